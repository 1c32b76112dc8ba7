"""The certificate's own check: weak duality, D(alpha) <= P* <= P(w), holds for every
alpha and w, so a gap P - D below -(rounding) proves that a sum went wrong (a lost or
forged share, an encoding error), never that the run converged.

It also holds the certified points (docs/algorithm.md section 3): the primal model a
certificate certifies is the best point of the segment between the last certified point
w_c and this certificate's w(alpha), w_c <- c w(alpha) + (1 - c) w_c with c in
``POINT_STEPS`` minimising P (with ``prox`` > 0, a proximal iterate x_t in place of
w(alpha): :func:`certified_problem`, :func:`prox_iterate`; with
``certify_two_iterates``, the best point of the triangle of w_c, x_t and the round
before's x_{t-1}, w_c <- c (a x_t + (1 - a) x_{t-1}) + (1 - c) w_c with a in
``LINE_STEPS`` as well: :func:`offered_points`, :func:`kept_iterates`,
:func:`choose_triangle_point`); its lower bound is D at
the certified dual point, the best point of the segment between the last one alpha_c
and this certificate's alpha, alpha_c <- t alpha + (1 - t) alpha_c with t in
``POINT_STEPS`` maximising D (the conjugate's domain, a box for the classification
losses, is convex, so every point of the segment is dual feasible). Both engines call
the functions below."""

from typing import NamedTuple

import numpy as np
from numba import njit

from feddata.history import best_pair
from solvers import loss_value, neg_conjugate, projected_dual

# the grid of the certified point's step c: 0, 1/32, ..., 1 (0 keeps the last point,
# 1 takes w(alpha))
POINT_STEPS = np.arange(33) / 32.0
# the grid of the weight a of x_t on the line from x_{t-1} (certify_two_iterates): 0,
# 1/8, ..., 1 (1: x_t alone, the only row used where x_{t-1} is not kept)
LINE_STEPS = np.arange(9) / 8.0


class Certificate(NamedTuple):
    """One certificate: ``primal`` = P(w_c) of the certified point ``w`` (<= the last
    certified point's but after a reset, and <= ``iterate_primal``, P of the point the
    certificate offers: w(alpha) or its proximal iterate x_t),
    ``dual`` = D(alpha_c) of the certified dual point (>= the last one's but after a
    reset, and >= ``iterate_dual`` = D(alpha))."""

    primal: float
    dual: float
    w: np.ndarray
    iterate_primal: float
    iterate_dual: float


class SumsLayout(NamedTuple):
    """Where a client's certificate sums lie (before its holding flag): ``primal`` the
    loss sums, one per (a, c) in LINE_STEPS x POINT_STEPS (row-major: the row of a = 1,
    x_t's segment, last) where the certificate searches the triangle, else one per c of
    x_t's segment; ``dual`` the dual segment's conjugate sums, one per t in POINT_STEPS
    (the last, t = 1, is the conjugate sum at alpha); ``size`` their number."""

    primal: slice
    dual: slice
    size: int


def sums_layout(has_previous):
    """The :class:`SumsLayout` of a certificate with (``has_previous``) or without
    x_{t-1}."""
    primal = (LINE_STEPS.size if has_previous else 1) * POINT_STEPS.size
    return SumsLayout(slice(0, primal), slice(primal, primal + POINT_STEPS.size),
                      primal + POINT_STEPS.size)


@njit(cache=True)
def segment_objective_sums(code, z, z_previous, has_previous, z_point, y, alpha, alpha_point,
                           weight, smoothing, out):
    """The sums of the ``sums_layout(has_previous)`` layout: out[r m + j] = sum_i
    weight_i l(c_j u_i + (1 - c_j) zc_i), u_i = a_r z_i + (1 - a_r) zp_i, for a_r =
    LINE_STEPS[r] and c_j = POINT_STEPS[j] (z: the margins of x_t, zp: those of
    x_{t-1}, zc: those of the certified point; m = POINT_STEPS.size), and out[R m + j] =
    sum_i weight_i -l*(-(t_j alpha_i + (1 - t_j) ac_i)) for t_j = POINT_STEPS[j] (ac:
    the certified dual point; R = LINE_STEPS.size), each dual value (beta = alpha y)
    first projected onto the loss's domain (as ``solvers.weighted_objective_sums``,
    whose sums are out[R m - 1] and out[(R + 1) m - 1]). Without x_{t-1}
    (``has_previous`` False, zp unread) R = 1 and the one row is x_t's segment, a = 1."""
    last = POINT_STEPS.size - 1
    rows = LINE_STEPS.size if has_previous else 1
    dual = rows * (last + 1)
    out[:] = 0.0
    for i in range(z.shape[0]):
        out[dual] += weight[i] * neg_conjugate(
            code, projected_dual(code, alpha_point[i], y[i]), y[i], smoothing)
        for j in range(1, last):
            mixed = (j / last) * alpha[i] + (1.0 - j / last) * alpha_point[i]
            out[dual + j] += weight[i] * neg_conjugate(
                code, projected_dual(code, mixed, y[i]), y[i], smoothing)
        out[dual + last] += weight[i] * neg_conjugate(
            code, projected_dual(code, alpha[i], y[i]), y[i], smoothing)
        loss_point = weight[i] * loss_value(code, z_point[i], y[i], smoothing)
        for r in range(rows):
            a = LINE_STEPS[r] if has_previous else 1.0
            u = line_point(a, z[i], z_previous[i] if has_previous else z[i])
            base = r * (last + 1)
            out[base] += loss_point
            for j in range(1, last):
                c = j / last
                out[base + j] += weight[i] * loss_value(code, c * u + (1.0 - c) * z_point[i],
                                                        y[i], smoothing)
            out[base + last] += weight[i] * loss_value(code, u, y[i], smoothing)


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


def offered_points(settings, iterate, kept):
    """(x_t, x_{t-1} or None, the iterates kept after the certificate): the certified
    problem's ``iterate`` x_t (:func:`prox_iterate`), and under
    ``settings.certify_two_iterates`` the round before's x_{t-1} where ``kept`` =
    (x_{t-1}, x_t) holds it (:func:`kept_iterates`: the round before solved the same
    problem and ended without a certificate); the certified point is then the best of
    the triangle (w_c, x_{t-1}, x_t) (:func:`choose_triangle_point`). At full
    participation the line search zig-zags (consecutive steps nearly opposite,
    docs/algorithm.md section 6, twenty-fourth round), so x_t and x_{t-1} lie on either
    side of the optimum and points between them are better than both (P is convex).
    After a certificate x_t is not kept: the next certificate's search starts from a
    point chosen on a segment that ends at x_t, and searching the line to x_{t-1} there
    slowed it (measured, section 6, twenty-fifth and twenty-sixth rounds)."""
    if not settings.certify_two_iterates:
        return iterate, None, kept
    return iterate, kept[0], (kept[0], None)


class RunningMean(NamedTuple):
    """The running mean of the points certificates offered (``certify_running_mean``):
    of those of rounds 2^(e-1) and later, e the doubling epoch of the last one (2^e <=
    round < 2^(e+1)), kept as the sums over the epoch before (``previous_sum``, None where
    it had none) and this one; a server keeps the points, each client their margins on
    its samples (the mean's margins are the mean of the margins: no inner product)."""

    epoch: int
    previous_count: int
    previous_sum: np.ndarray | None
    count: int
    sum: np.ndarray

    @property
    def size(self):
        """How many points the mean holds."""
        return self.previous_count + self.count

    def value(self):
        """The mean point (or margins)."""
        total = self.sum if self.previous_sum is None else self.previous_sum + self.sum
        return total / self.size


def mean_epoch(round_):
    """The doubling epoch e of a certificate after round ``round_`` >= 1: 2^e <= round <
    2^(e+1). Round 0's certificate (the start) joins no mean: -1."""
    return int(round_).bit_length() - 1


def with_point(mean, values, epoch):
    """``mean`` (a :class:`RunningMean` or None) with the point or margins ``values`` of
    a certificate of doubling epoch ``epoch`` (:func:`mean_epoch`; -1 leaves it): a new
    epoch drops the points of the epoch before the last."""
    if epoch < 0:
        return mean
    if mean is not None and epoch == mean.epoch:
        return mean._replace(count=mean.count + 1, sum=mean.sum + values)
    if mean is not None and epoch == mean.epoch + 1:
        return RunningMean(epoch, mean.count, mean.sum, 1, values.copy())
    return RunningMean(epoch, 0, None, 1, values.copy())


def with_offered_point(settings, mean, x, round_, has_previous):
    """(epoch, mean, x_bar) of a certificate after round ``round_`` offering ``x``: the
    doubling epoch its margins join the clients' means in (-1: none, the rule off), the
    server's ``mean`` with x (:func:`with_point`), and where the certificate has no
    x_{t-1} (``has_previous`` False) the mean it searches in its place
    (:func:`offered_mean`; else None). Both engines call it."""
    epoch = mean_epoch(round_) if settings.certify_running_mean else -1
    mean = with_point(mean, x, epoch)
    return epoch, mean, None if has_previous else offered_mean(settings, mean)


def offered_mean(settings, mean):
    """The running mean x_bar of the points certificates offered, this one's x_t
    included, which a certificate without x_{t-1} searches in its place (the triangle of
    w_c, x_bar and x_t) under ``settings.certify_running_mean``; None where it is off or
    the mean holds x_t alone. The zig-zag's iterates lie on either side of the optimum,
    so their mean is near it (the averaged iterate of SDCA's analysis), and searching it
    where x_{t-1} was already searched (a certificate every round) certifies SMS sooner
    (docs/algorithm.md section 6, thirty-first round)."""
    if not settings.certify_running_mean or mean is None or mean.size < 2:
        return None
    return mean.value()


def kept_iterates(settings, kept, iterate, solved, current):
    """The iterates kept after round t's end, (x_{t-1}, x_t), from those kept after round
    t - 1, ``kept`` = (x_{t-2}, x_{t-1}), and ``iterate`` = x_t, the server's w before a
    move of the centre at the round's end (a copy that nothing changes later). A
    certificate after round t searches the line from the first to its x_t
    (:func:`offered_points`, which drops the second). x_t is kept where the problem the
    round ``solved`` (kappa, c) is the one the rounds solve next (``current``: no move of
    the centre, no change of kappa), else None; both are None without
    ``settings.certify_two_iterates``."""
    if not settings.certify_two_iterates:
        return None, None
    unchanged = solved[0] == current[0] and np.array_equal(solved[1], current[1])
    return kept[1], (iterate if unchanged else None)


@njit(cache=True)
def line_point(a, x, x_previous):
    """a x + (1 - a) x_previous (x itself where a = 1): a point of the line between two
    iterates, or its margins (arrays or, in :func:`segment_objective_sums`, one value)."""
    return x if a == 1.0 else a * x + (1.0 - a) * x_previous


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
    last = POINT_STEPS.size - 1

    def point(j):
        return w_point if j == 0 else w if j == last else (
            POINT_STEPS[j] * w + (1.0 - POINT_STEPS[j]) * w_point)

    points = {}

    def primal(j):
        v = points[j] = point(j)
        return 0.5 * lam * float(v @ v) + float(loss_sums[j])

    primals = np.full(POINT_STEPS.size, np.inf)
    candidates = near_minimum(lam, w, w_point, loss_sums)
    primals[candidates] = [primal(j) for j in candidates]
    if not np.all(np.isfinite(primals[candidates])):  # (overflow: every step, directly)
        primals = np.array([primal(j) for j in range(POINT_STEPS.size)])
    finite = np.where(np.isfinite(primals), primals, np.inf)
    j = last - int(np.argmin(finite[::-1]))
    if not np.isfinite(finite[j]):
        return 1.0, iterate, w, iterate
    return float(POINT_STEPS[j]), float(primals[j]), points[j], iterate


def near_minimum(lam, w, w_point, loss_sums):
    """The steps j of POINT_STEPS whose P(c_j w + (1 - c_j) w_c), as :func:`choose_point`
    computes it (the point, then its squared norm), may be the smallest. The regulariser
    from three inner products, (lam/2)(c^2 ||w||^2 + 2 c (1 - c) w.w_c + (1 - c)^2
    ||w_c||^2), is within ``tol`` of the direct one (each rounds the d terms of a sum
    bounded by (||w|| + ||w_c||)^2, to at most (2 d + 16) eps of it), so the steps whose
    screened value is within 2 tol of the smallest hold every minimiser: P computed
    directly for those alone chooses what computing it for every step does, with the same
    bits, in 3 inner products of length d and a few points in place of 33 of each. Every
    step where a screened value is not finite."""
    ww, wp, pp = float(w @ w), float(w @ w_point), float(w_point @ w_point)
    c = POINT_STEPS
    screened = 0.5 * lam * (c * c * ww + 2.0 * c * (1.0 - c) * wp
                            + (1.0 - c) ** 2 * pp) + np.asarray(loss_sums, dtype=float)
    if not np.all(np.isfinite(screened)):
        return np.arange(POINT_STEPS.size)
    eps = np.finfo(float).eps
    scale = (np.sqrt(ww) + np.sqrt(pp)) ** 2
    tol = 2.0 * (0.5 * lam * (2 * w.size + 16) * eps * scale
                 + 4.0 * eps * float(np.max(np.abs(screened))))
    return np.flatnonzero(screened <= screened.min() + 2.0 * tol)


def choose_triangle_point(lam, x, x_previous, w_point, loss_sums):
    """(a, c, P(w_c new), w_c new, P(x)) from the revealed ``loss_sums`` (the primal
    part of :func:`sums_layout`: one per (a, c) in LINE_STEPS x POINT_STEPS, or without
    x_{t-1} one per c; x = x_t the offered point, ``x_previous`` = x_{t-1} or None): (a,
    c) minimises P(c (a x + (1 - a) x_{t-1}) + (1 - c) w_c), each line point's segment
    by :func:`choose_point`; ties go to the larger a. Without x_{t-1}, a = 1 (x_t's
    segment, the last row)."""
    rows = np.asarray(loss_sums).reshape(-1, POINT_STEPS.size)
    step, primal, point, iterate = choose_point(lam, x, w_point, rows[-1])
    best = (1.0, step, primal, point)
    if x_previous is not None:
        for r in range(LINE_STEPS.size - 2, -1, -1):
            a = float(LINE_STEPS[r])
            step, primal, point, _ = choose_point(lam, line_point(a, x, x_previous),
                                                  w_point, rows[r])
            if primal < best[2]:
                best = (a, step, primal, point)
    return (*best, iterate)


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


def certificate_rounding(loss, primal, *, frac_bits, n_clients):
    """A bound on how far fixed-point rounding moves a certificate's gap P - D either
    way: each of the at most K shares of a secure sum (the loss sums, the conjugate sums)
    and of a margin is rounded to 2^-f, so each sum is off by K 2^-(f+1), and the mean loss
    by its mean slope L times a margin's K 2^-(f+1): e = K 2^-(f+1) (2 + L), L = 1 for the
    hinge, smoothed hinge and logistic losses, sqrt(2 P) for the squared loss and 2 sqrt(P)
    for the squared hinge (Cauchy-Schwarz on |l'| = sqrt(2 l), 2 sqrt(l)). w crosses the
    protocol in floats (the clients' changes of v_k), so D's quadratic term is exact to
    floating point. A gap within e of a tolerance does not certify it (about 3e-9 on a
    3x3 grid at f = 32). :func:`rounding_allowance` is a looser bound (it lets w's
    coordinates be rounded too), for the weak-duality check alone."""
    positive = max(float(primal), 0.0) if np.isfinite(primal) else 0.0
    slope = {"squared": np.sqrt(2.0 * positive),
             "squared_hinge": 2.0 * np.sqrt(positive)}.get(loss, 1.0)
    return max(n_clients, 1) * 2.0 ** -(frac_bits + 1) * (2.0 + slope)


def check_best_pair(evaluations, rounding):
    """CertificateError where the smallest finite primal P_best and the largest finite
    dual D_best of ``evaluations`` (``feddata.history.best_pair``) contradict weak duality
    beyond the rounding of the two certificates they come from: P_best >= P* - e_a and
    D_best <= P* + e_b (e = ``rounding(P)`` at each one's primal, the run's
    :func:`certificate_rounding`), so P_best - D_best >= -(e_a + e_b).

    :func:`checked_certificate` checks each certificate against its own primal; after a
    client lost its certified points the certified point restarts at x_t, whose primal may
    lie above P_best, so a wrong dual could pass that check and close the certified gap.
    """
    (best_primal, at_primal), (best_dual, at_dual) = best_pair(evaluations)
    if at_primal is None or at_dual is None:
        return
    allowance = sum(rounding(evaluations[r]["primal"]) for r in (at_primal, at_dual))
    if best_primal - best_dual < -allowance:
        raise CertificateError(
            f"the best certified dual ({best_dual:.9g}, round {at_dual}) exceeds the best "
            f"certified primal ({best_primal:.9g}, round {at_primal}) by "
            f"{best_dual - best_primal:.3g}, more than the {allowance:.3g} that fixed-point "
            f"rounding can explain: weak duality says P(w) >= D(alpha), so a secure sum "
            f"or an encoded value is wrong (a lost, duplicated or forged share?); the run "
            f"is not converged")


def larger_l1(*ws):
    """Of the certificate's vectors (w(alpha), the proximal iterate x_t, x_{t-1}, the
    certified points' w; None, an absent x_{t-1}, skipped), the one whose ||.||_1 the
    rounding allowance must use (the first of the largest)."""
    ws = [w for w in ws if w is not None]
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
