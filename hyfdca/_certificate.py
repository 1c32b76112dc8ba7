"""The certificate's own check: weak duality, D(alpha) <= P* <= P(w), holds for every
alpha and w, so a gap P - D below -(rounding) proves that a sum went wrong (a lost or
forged share, an encoding error), never that the run converged.

It also holds the certified point (docs/algorithm.md section 3): the primal model a
certificate certifies is the best point of the segment between the last certified point
w_c and this certificate's w(alpha), w_c <- c w(alpha) + (1 - c) w_c with c in
``POINT_STEPS`` minimising P (with ``prox`` > 0, the proximal iterate in place of
w(alpha): :func:`prox_iterate`); both engines call the functions below."""

from typing import NamedTuple

import numpy as np
from numba import njit

from solvers import loss_value, neg_conjugate, projected_dual

# the grid of the certified point's step c: 0, 1/32, ..., 1 (0 keeps the last point,
# 1 takes w(alpha))
POINT_STEPS = np.arange(33) / 32.0


class Certificate(NamedTuple):
    """One certificate: ``primal`` = P(w_c) of the certified point ``w`` (<= the last
    certified point's but after a reset, and <= ``iterate_primal`` = P(w(alpha))),
    ``dual`` = D(alpha)."""

    primal: float
    dual: float
    w: np.ndarray
    iterate_primal: float


@njit(cache=True)
def segment_objective_sums(code, z, z_point, y, alpha, weight, smoothing, out):
    """out[j] = sum_i weight_i l(c_j z_i + (1 - c_j) zc_i) for c_j = POINT_STEPS[j]
    (z: the margins of w(alpha), zc: those of the certified point), and out[-1] =
    sum_i weight_i -l*(-alpha_i), beta = alpha y first projected onto the loss's domain
    (as ``solvers.weighted_objective_sums``, whose sums are out[-2] and out[-1])."""
    last = out.shape[0] - 2
    out[:] = 0.0
    for i in range(z.shape[0]):
        out[0] += weight[i] * loss_value(code, z_point[i], y[i], smoothing)
        for j in range(1, last):
            c = j / last
            out[j] += weight[i] * loss_value(code, c * z[i] + (1.0 - c) * z_point[i],
                                             y[i], smoothing)
        out[last] += weight[i] * loss_value(code, z[i], y[i], smoothing)
        out[last + 1] += weight[i] * neg_conjugate(code, projected_dual(code, alpha[i], y[i]),
                                                   y[i], smoothing)


def prox_iterate(settings, w_alpha, centre):
    """The primal point a certificate offers beside the certified point: w(alpha) =
    X^T alpha / (lam N), or, when the rounds solve the proximal problem (``prox`` =
    kappa > 0, ``hyfdca._round.next_prox_centre``), that problem's iterate (kappa/mu) c +
    (lam/mu) w(alpha), mu = lam + kappa. D(alpha) is always the original problem's, on
    w(alpha)."""
    if settings.kappa <= 0:
        return w_alpha
    mu = settings.round_lam
    return (settings.kappa / mu) * centre + (settings.lam / mu) * w_alpha


def next_point_margins(step, z, z_point):
    """The margins of the new certified point, c z + (1 - c) zc (z where c = 1)."""
    return z.copy() if step == 1.0 else step * z + (1.0 - step) * z_point


def choose_point(lam, w, w_point, loss_sums):
    """(c, P(w_c new), w_c new, P(w(alpha))) from the revealed ``loss_sums`` (one per
    c in POINT_STEPS): c minimises P(c w + (1 - c) w_c) = (lam/2)||c w + (1 - c) w_c||^2
    + loss sum; ties go to the larger c. ``w_point=None`` (no point yet, or a client lost
    its point margins) takes c = 1."""
    iterate = 0.5 * lam * float(w @ w) + float(loss_sums[-1])
    if w_point is None:
        return 1.0, iterate, w, iterate
    points = [w_point, *(c * w + (1.0 - c) * w_point for c in POINT_STEPS[1:-1]), w]
    primals = np.array([0.5 * lam * float(v @ v) + float(loss)
                        for v, loss in zip(points, loss_sums)])
    finite = np.where(np.isfinite(primals), primals, np.inf)
    j = POINT_STEPS.size - 1 - int(np.argmin(finite[::-1]))
    if not np.isfinite(finite[j]):
        return 1.0, iterate, w, iterate
    return float(POINT_STEPS[j]), float(primals[j]), points[j], iterate


class CertificateError(RuntimeError):
    """A certificate that contradicts weak duality beyond fixed-point rounding."""


def rounding_allowance(primal, dual, w, *, lam, frac_bits, n_clients, max_sq_norm):
    """A bound on how far fixed-point rounding can move P - D below 0.

    Every value crosses the protocol as a multiple of 2^-f, so each of the at most K
    parts of a coordinate of w or of a margin is off by at most 2^-f: |dw_j| <= K 2^-f,
    |d(x_i . w)| <= K 2^-f (1 + ||x_i|| sqrt(d)); the losses' slopes are bounded by
    1 + |P| + |D| on the values met, and the regulariser moves by lam ||w||_1 K 2^-f.
    """
    d = w.size
    scale = 2.0 ** -frac_bits * max(n_clients, 1)
    slope = 1.0 + abs(primal) + abs(dual)
    return scale * (4.0 + np.sqrt(max_sq_norm * d) + lam * float(np.abs(w).sum())) * slope


def larger_l1(w, point_w):
    """Of w(alpha) and the certified point, the one whose ||.||_1 the rounding allowance
    must use (the primal checked is the smaller of their two primals)."""
    return w if np.abs(w).sum() >= np.abs(point_w).sum() else point_w


def checked_certificate(primal, dual, w, *, lam, frac_bits, n_clients, max_sq_norm, round_):
    """(primal, dual, w) unchanged, or CertificateError when P - D < -allowance.

    A non-finite gap is returned as it is: that is divergence, which the run reports.
    """
    gap = primal - dual
    if np.isfinite(gap):
        allowance = rounding_allowance(primal, dual, w, lam=lam, frac_bits=frac_bits,
                                       n_clients=n_clients, max_sq_norm=max_sq_norm)
        if gap < -allowance:
            raise CertificateError(
                f"round {round_}: the certificate's duality gap is {gap:.6g} (primal "
                f"{primal:.6g}, dual {dual:.6g}), below -{allowance:.3g}, the most that "
                f"fixed-point rounding can explain: weak duality says P(w) >= D(alpha), "
                f"so a secure sum or an encoded value is wrong (a lost, duplicated or "
                f"forged share?); the run is not converged")
    return primal, dual, w
