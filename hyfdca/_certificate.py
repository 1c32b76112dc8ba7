"""The certificate's own check: weak duality, D(alpha) <= P* <= P(w), holds for every
alpha and w, so a gap P - D below -(rounding) proves that a sum went wrong (a lost or
forged share, an encoding error), never that the run converged.

It also holds the certified points (docs/algorithm.md section 3): the primal model a
certificate certifies is the best point of the segment between the last certified point
w_c and this certificate's w(alpha), w_c <- c w(alpha) + (1 - c) w_c with c in
``POINT_STEPS`` minimising P (with ``prox`` > 0, a proximal iterate in place of
w(alpha): :func:`certified_problem`, :func:`prox_iterate`; with
``certify_two_round_mean``, its mean with the round before's: :func:`offered_point`,
:func:`kept_iterates`); its lower bound is D at
the certified dual point, the best point of the segment between the last one alpha_c
and this certificate's alpha, alpha_c <- t alpha + (1 - t) alpha_c with t in
``POINT_STEPS`` maximising D (the conjugate's domain, a box for the classification
losses, is convex, so every point of the segment is dual feasible). Both engines call
the functions below."""

from typing import NamedTuple

import numpy as np
from numba import njit

from solvers import loss_value, neg_conjugate, projected_dual

# the grid of the certified point's step c: 0, 1/32, ..., 1 (0 keeps the last point,
# 1 takes w(alpha))
POINT_STEPS = np.arange(33) / 32.0


class Certificate(NamedTuple):
    """One certificate: ``primal`` = P(w_c) of the certified point ``w`` (<= the last
    certified point's but after a reset, and <= ``iterate_primal``, P of the point the
    certificate offers: w(alpha), its proximal iterate, or the two-round mean of
    :func:`offered_point`),
    ``dual`` = D(alpha_c) of the certified dual point (>= the last one's but after a
    reset, and >= ``iterate_dual`` = D(alpha))."""

    primal: float
    dual: float
    w: np.ndarray
    iterate_primal: float
    iterate_dual: float


# the layout of a client's certificate sums (before its holding flag): the primal
# segment's loss sums, one per c in POINT_STEPS, then the dual segment's conjugate sums,
# one per t in POINT_STEPS (the last, t = 1, is the conjugate sum at alpha)
PRIMAL_SUMS = slice(0, POINT_STEPS.size)
DUAL_SUMS = slice(POINT_STEPS.size, 2 * POINT_STEPS.size)
SEGMENT_SUMS = 2 * POINT_STEPS.size


@njit(cache=True)
def segment_objective_sums(code, z, z_point, y, alpha, alpha_point, weight, smoothing, out):
    """The sums of ``SEGMENT_SUMS`` layout: out[j] = sum_i weight_i l(c_j z_i + (1 - c_j)
    zc_i) for c_j = POINT_STEPS[j] (z: the margins of w(alpha), zc: those of the
    certified point), and out[n + j] = sum_i weight_i -l*(-(t_j alpha_i + (1 - t_j)
    ac_i)) for t_j = POINT_STEPS[j] (ac: the certified dual point), n = POINT_STEPS.size,
    each dual value (beta = alpha y) first projected onto the loss's domain (as
    ``solvers.weighted_objective_sums``, whose sums are out[n - 1] and out[2 n - 1])."""
    last = POINT_STEPS.size - 1
    out[:] = 0.0
    for i in range(z.shape[0]):
        out[0] += weight[i] * loss_value(code, z_point[i], y[i], smoothing)
        out[last + 1] += weight[i] * neg_conjugate(
            code, projected_dual(code, alpha_point[i], y[i]), y[i], smoothing)
        for j in range(1, last):
            c = j / last
            out[j] += weight[i] * loss_value(code, c * z[i] + (1.0 - c) * z_point[i],
                                             y[i], smoothing)
            mixed = c * alpha[i] + (1.0 - c) * alpha_point[i]
            out[last + 1 + j] += weight[i] * neg_conjugate(
                code, projected_dual(code, mixed, y[i]), y[i], smoothing)
        out[last] += weight[i] * loss_value(code, z[i], y[i], smoothing)
        out[2 * last + 1] += weight[i] * neg_conjugate(code, projected_dual(code, alpha[i], y[i]),
                                                       y[i], smoothing)


def certified_problem(settings, solved, current):
    """The (kappa, c) whose proximal iterate a certificate offers: ``solved``, the
    problem the last round solved (before a move of the centre at its end: the outer
    loop's iterate x_k), under ``settings.certify_outer_iterate``; else ``current``, the
    rounds' problem now (after such a move)."""
    return solved if settings.certify_outer_iterate else current


def prox_iterate(lam, kappa, w_alpha, centre):
    """The primal point a certificate offers beside the certified point: w(alpha) =
    X^T alpha / (lam N), or, where the rounds solve the proximal problem about the
    centre c (kappa > 0, ``hyfdca._round.next_prox_centre``), that problem's iterate
    x = (kappa/mu) c + (lam/mu) w(alpha), mu = lam + kappa, with the kappa and c of
    :func:`certified_problem`. D(alpha) is always the original problem's, on
    w(alpha)."""
    if kappa <= 0:
        return w_alpha
    mu = lam + kappa
    return (kappa / mu) * centre + (lam / mu) * w_alpha


def offered_point(settings, iterate, kept):
    """(The primal point a certificate after round t offers, the iterates kept after it).
    The point is the certified problem's ``iterate`` x_t (:func:`prox_iterate`), or under
    ``settings.certify_two_round_mean`` the mean (x_t + x_{t-1}) / 2 where ``kept`` =
    (x_{t-1}, x_t) holds x_{t-1} (:func:`kept_iterates`: the round before solved the
    same problem and ended without a certificate). At full participation the exact line
    search zig-zags (consecutive steps nearly opposite, docs/algorithm.md section 6,
    twenty-fourth round), so x_t and x_{t-1} lie on either side of the optimum and, P
    being convex, P((x_t + x_{t-1}) / 2) <= (P(x_t) + P(x_{t-1})) / 2. After a
    certificate x_t is not kept: the next certificate's segment starts from a point
    chosen on one that ends at x_t, and offering the mean there slowed it (measured,
    section 6, twenty-fifth round)."""
    if not settings.certify_two_round_mean:
        return iterate, kept
    point = iterate if kept[0] is None else 0.5 * (iterate + kept[0])
    return point, (kept[0], None)


def kept_iterates(settings, kept, iterate, solved, current):
    """The iterates kept after round t's end, (x_{t-1}, x_t), from those kept after round
    t - 1, ``kept`` = (x_{t-2}, x_{t-1}), and ``iterate`` = x_t, the server's w before a
    move of the centre at the round's end (a copy that nothing changes later). A
    certificate after round t averages the first with its x_t (:func:`offered_point`,
    which drops the second). x_t is kept where the problem the round ``solved`` (kappa,
    c) is the one the rounds solve next (``current``: no move of the centre, no change
    of kappa), else None; both are None without ``settings.certify_two_round_mean``."""
    if not settings.certify_two_round_mean:
        return None, None
    unchanged = solved[0] == current[0] and np.array_equal(solved[1], current[1])
    return kept[1], (iterate if unchanged else None)


def next_point_values(step, z, z_point):
    """The values of a new certified point on its segment, c z + (1 - c) zc (z where
    c = 1): the primal point's margins, and the dual point's alpha."""
    return z.copy() if step == 1.0 else step * z + (1.0 - step) * z_point


def choose_point(lam, w, w_point, loss_sums):
    """(c, P(w_c new), w_c new, P(w)) from the revealed ``loss_sums`` (one per c in
    POINT_STEPS; w the offered point): c minimises P(c w + (1 - c) w_c) =
    (lam/2)||c w + (1 - c) w_c||^2 + loss sum; ties go to the larger c.
    ``w_point=None`` (no point yet, or a client lost its point margins) takes c = 1."""
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


def choose_dual_point(lam, w_alpha, w_point, conj_sums):
    """(t, D(alpha_c new), w(alpha_c new), D(alpha)) from the revealed ``conj_sums`` (one
    per t in POINT_STEPS): t maximises D(t alpha + (1 - t) alpha_c) = -(lam/2)||t w(alpha)
    + (1 - t) w(alpha_c)||^2 + conjugate sum (w is linear in alpha); ties go to the
    larger t. ``w_point=None`` (no point yet, or a client lost it) takes t = 1. It is
    :func:`choose_point` on -D: the same segment search, maximising."""
    step, neg_dual, point_w, neg_iterate = choose_point(lam, w_alpha, w_point,
                                                        -np.asarray(conj_sums))
    return step, -neg_dual, point_w, -neg_iterate


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


def larger_l1(*ws):
    """Of the certificate's vectors (w(alpha), the proximal iterate, the certified
    points' w), the one whose ||.||_1 the rounding allowance must use (the first of the
    largest)."""
    norms = [np.abs(w).sum() for w in ws]
    return ws[int(np.argmax(norms))]


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
