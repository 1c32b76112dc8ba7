"""The round's maths: every algorithmic decision of a HyFDCA round, made here once.

Both engines call this module for every rule of a round: the message engine
(``_protocol``, ``_client``, ``_server``) and the batched engine (``_batched``,
``_batched_kernels``, whose CUDA copy ``_cupy_kernels`` repeats ``local_step`` in C). A
change to the algorithm is a change here; the engines move the values and read only
plain switches from the settings (draws permuted or random, line search on or off)
(docs/algorithm.md sections 3 and 4, docs/architecture.md).

- Which phases a round runs: :func:`plan_round`.
- Which samples move: who shares an index stream (:func:`sampling_streams`), which
  samples may be drawn (:func:`draws_all_samples`, :func:`eligible_samples`); the
  draws themselves are ``hyfdca._draws``.
- Curvature and step of the local dual method: rho_i (:func:`correction_factors`) and
  the coordinate step at s = sigma q_i / (lam N) on the margin corrected by
  rho_i sigma x_i^k . u (:func:`local_step`, :func:`local_dual_method`).
- The aggregation rule and what absent clients contribute: each present holder of
  sample i sends p_i^k dalpha_i (1/|C_i| or its norm share: :func:`aggregation_weights`),
  so an absent holder counts as 0 in alpha_i's move; in a margin x_i . w an absent
  holder's last part (stale) counts.
- The line search: each holder's terms of the secure sums (:func:`line_search_terms`,
  :func:`line_search_shares`), the server's step g (:func:`choose_step`) and its
  fixed-point form (:func:`step_bits`), whether the participants then hold the server's
  alpha (:func:`participants_are_synced`: no dual sync is due); the range of the dual
  updates the holders encrypt (:func:`dual_update_range_bits`); when it has stalled
  (:func:`stalls`: the switch to ``HyFDCASettings.after_stall``).
- The proximal outer loop (``prox`` > 0): when the centre moves and where
  (:func:`moves_prox_centre`, :func:`next_prox_centre`); the original problem's dual
  the server tracks from the line search (:func:`conjugate_gain`, :func:`tracked_dual`)
  and the weaker loop it calls for (:func:`weakened_outer_loop`, ``prox_adapt``); the
  warm start that runs its first period without the proximal term (:func:`initial_kappa`,
  :func:`starts_outer_loop`, ``prox_warm_start``).
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from crypto import DEFAULT_FRACTIONAL_BITS, FixedPoint
from hyfdca._pairwise_sum import pairwise_sum
from hyfdca._primal_change import add_row
from solvers import coordinate_step

STEP_BITS = 16  # a line-search step g is applied as the integer m = g 2^STEP_BITS
# the line search has stalled once half of the last STALL_WINDOW steps were 0 (of each
# cyclic subset's steps among them: stalls)
STALL_WINDOW = 100
# prox_adapt weakens the outer loop where D(alpha) < -ADAPT_FALL P(0) at a move of the
# centre (weakened_outer_loop)
ADAPT_FALL = 0.1


# --- the phases -----------------------------------------------------------------------

class RoundPlan(NamedTuple):
    """Which phases of docs/algorithm.md section 3 a round runs."""

    dual_sync_phase: bool       # A: its own round trip (else the sync rides with B or C)
    inner_products: bool        # B: secure inner products (else margins are local)
    second_inner_product: bool  # E: fresh stored parts for the next round
    predraw: bool               # next round's draws come with phase D

    @property
    def round_trips(self):
        """C and D always, A, B and E when they run."""
        return 2 + self.dual_sync_phase + self.inner_products + self.second_inner_product


def margins_are_local(holder_counts):
    """True when every sample has one holder (horizontal data): a client computes its
    margins itself and phase B never runs."""
    return bool(np.all(np.asarray(holder_counts) == 1))


def plan_round(settings, round_, local_margins):
    """The phases of round ``round_``. Under full participation after round 0 nothing is
    stale: the draws came with the previous round's phase D and the dual sync rides with
    B (or C). ``local_margins``: every sample has one holder (horizontal data)."""
    full = settings.participation == "full"
    return RoundPlan(dual_sync_phase=not (full and round_ > 0),
                     inner_products=not local_margins,
                     second_inner_product=bool(settings.second_inner_product),
                     predraw=full)


# --- which samples move ---------------------------------------------------------------

def sampling_streams(sample_ids, sampling, seed):
    """Seed tuple of each client's index draws (``sample_ids[k]``: I_k): holders of the
    same sample set share one under ``sampling="shared"`` (they draw the same samples);
    otherwise each has its own."""
    if sampling == "independent":
        return [(seed, 2, k) for k in range(len(sample_ids))]
    groups = {}
    return [(seed, 1, groups.setdefault(np.asarray(ids).tobytes(), len(groups)))
            for ids in sample_ids]


def draws_all_samples(aggregation):
    """True where any sample may be drawn whoever is present (``"mean"``): the engines
    then skip counting present holders."""
    return aggregation == "mean"


def eligible_samples(aggregation, present_holders, holder_counts, out=None):
    """Which samples may be drawn this round (boolean, over all samples; into ``out`` if
    given): all under ``"mean"``; under ``"consistent"`` those whose holders are all
    present (``present_holders[i] == |C_i|``)."""
    if out is None:
        out = np.empty(holder_counts.shape[0], dtype=bool)
    if draws_all_samples(aggregation):
        out[:] = True
        return out
    return np.equal(present_holders, holder_counts, out=out)


# --- curvature and step of the local dual method --------------------------------------

def correction_factors(rule, sq_norms, partial_sq_norms):
    """rho_i of a client's samples: 1 (``"one"``, the paper) or q_i / ||x_i^k||^2
    (``"norm"``: a client sees only its features' share of a margin change; 1 on empty
    rows)."""
    q = np.asarray(sq_norms, dtype=np.float64)
    if rule == "norm":
        return np.divide(q, partial_sq_norms, out=np.ones_like(q),
                         where=partial_sq_norms > 0)
    return np.ones_like(q)


@njit(cache=True)
def local_step(data, indices, start, end, u, z, rho_i, sigma, q_i, lam_n, code, alpha_i, y_i,
               smoothing):
    """One inner step of LocalDualMethod at the row x_i^k = data[start:end]:

        z~    = z_i + rho_i sigma (x_i^k . u)
        delta = coordinate step at (alpha_i, z~) with curvature s = sigma q_i / (lam N)
        u    += delta x_i^k / (lam N)

    Returns delta."""
    corr = 0.0
    for p in range(start, end):
        corr += data[p] * u[indices[p]]
    z_local = z + rho_i * sigma * corr
    s = sigma * q_i / lam_n
    delta = coordinate_step(code, alpha_i, z_local, y_i, s, smoothing)
    if delta != 0.0:
        add_row(data, indices, start, end, delta, lam_n, u)
    return delta


@njit(cache=True)
def local_dual_method(data, indices, indptr, y, alpha, z, sq_norms, rho, order, code,
                      lam_n, sigma, smoothing, n_features):
    """LocalDualMethod (the paper's Algorithm 5) of one client: :func:`local_step` at each
    drawn local position of ``order``, margins z from the secure inner product, u = 0 and
    dalpha = 0 at the start. Returns (dalpha over the client's samples, u over its
    features). One client holding everything, sigma = rho = 1, H = N: an SDCA epoch."""
    dalpha = np.zeros(y.shape[0])
    u = np.zeros(n_features)
    for t in range(order.shape[0]):
        i = order[t]
        dalpha[i] += local_step(data, indices, indptr[i], indptr[i + 1], u, z[i], rho[i],
                                sigma, sq_norms[i], lam_n, code, alpha[i] + dalpha[i], y[i],
                                smoothing)
    return dalpha, u


# --- aggregation ----------------------------------------------------------------------

# below q_i = 2^(EXACT_SHARE_BITS - f) the norm-share weights take the holders' parts as
# the set-up encoded them (aggregation_weights); every benchmark data set's rows are above
# (q_i >= 0.99 where not empty), and keep their bits
EXACT_SHARE_BITS = 24


def aggregation_weights(rule, holder_counts, sq_norms, partial_sq_norms,
                        frac_bits=DEFAULT_FRACTIONAL_BITS):
    """The weight p_i^k by which holder k scales its dalpha_i; the server's sum is the
    weighted mean sum_k p_i^k dalpha_i^k over holders, absent holders counting as 0, and
    sum_k p_i^k = 1 over all holders of i, so alpha_i + Delta_i is a convex combination of
    alpha_i and the holders' alpha_i + dalpha_i^k (feasible).

    ``"equal"``: p_i^k = 1/|C_i| (the paper). ``"norm-share"``: p_i^k = ||x_i^k||^2 / q_i,
    the share of row i's squared norm that holder k sees (the holders' parts partition the
    row), so a holder whose part of the row is small, and whose local margin correction
    is therefore extrapolated furthest (with ``rho="norm"``, rho_i = 1 / p_i^k where its
    part is not empty and q_i is above the threshold below), counts little; 1/|C_i| on
    an empty row, and exactly 1 for a sample with one holder (as "equal").

    q_i of a shared sample is the sum of the parts as encoded at the set-up (each rounded
    to 2^-f, ``frac_bits``), so the exact parts' shares add up to 1 only within |C_i|
    2^-(f+1) / q_i: where q_i < 2^(EXACT_SHARE_BITS - f) (2^-8 at f = 32) each share is
    of the part as encoded, and the shares add up to 1 to rounding whatever the data's
    scale (rows of squared norm 1e-9 had shares adding up to 1.75, and alpha left its box
    by 2%); above, within |C_i| 2^-25 of 1, as before."""
    counts = np.asarray(holder_counts, dtype=np.float64)
    equal = 1.0 / counts
    if rule == "equal":
        return equal
    q = np.asarray(sq_norms, dtype=np.float64)
    parts = np.array(partial_sq_norms, dtype=np.float64)
    small = q < 2.0 ** (EXACT_SHARE_BITS - frac_bits)
    codec = FixedPoint(frac_bits)
    parts[small] = codec.decode(codec.encode(parts[small]))   # as the set-up sent them
    return np.divide(parts, q, out=equal, where=(q > 0) & (counts > 1))


# --- the line search ------------------------------------------------------------------

def line_search_term_count(settings):
    """How many secure sums the quadratic line search reveals: S1, S2, S3, and with
    ``curvature_scaling="absent-share"`` also S4, S5."""
    return 5 if settings.curvature_scaling == "absent-share" else 3


@njit(cache=True, inline="always")
def line_search_terms(y_i, alpha_i, d_i, present_i, n_samples, q_i, partial_i):
    """One present holder's terms of the secure sums for sample i (aggregated step d_i,
    its alpha_i before the step, full squared norm q_i, its own part ||x_i^k||^2):

        S1, S2, S3: (y_i d_i, alpha_i d_i, d_i^2) / (present holders x N)
        S4:         d_i^2 q_i / (present holders x N)
        S5:         d_i^2 ||x_i^k||^2 / N

    Over the present holders S1-S4 add up to (1/N) (y_i d_i, alpha_i d_i, d_i^2,
    d_i^2 q_i) and S5 to (1/N) d_i^2 x (the squared norm the present holders carry)."""
    weight = 1.0 / np.float64(present_i * n_samples)
    return (weight * y_i * d_i, weight * alpha_i * d_i, weight * d_i * d_i,
            weight * d_i * d_i * q_i, d_i * d_i * partial_i / n_samples)


@njit(cache=True)
def _quadratic_shares(y, alpha, d, present, n_samples, q, partial, count):
    n = y.shape[0]
    terms = np.empty((count, n))
    for t in range(n):
        values = line_search_terms(y[t], alpha[t], d[t], present[t], n_samples, q[t],
                                   partial[t])
        for j in range(count):
            terms[j, t] = values[j]
    out = np.empty(count)
    for j in range(count):
        out[j] = pairwise_sum(terms[j], 0, n)
    return out


def line_search_shares(settings, y, alpha, d, present, q, partial):
    """A client's contribution to the line-search secure sums, over its samples touched
    by the step d: S1, S2, S3 (and S4, S5: :func:`line_search_term_count`) of
    :func:`line_search_terms` for the quadratic-conjugate losses; for logistic the
    entropy gains at each grid step (:func:`_entropy_gains`)."""
    n = settings.n_samples
    if settings.loss == "logistic":
        return _entropy_gains(alpha * y, d * y, 1.0 / (present * n))
    return list(_quadratic_shares(y, alpha, d, present, n, q, partial,
                                  line_search_term_count(settings)))


def _entropy(beta):
    """Binary entropy -b log b - (1-b) log(1-b) (the logistic -l*(-alpha), beta = alpha y),
    with beta clipped to [0, 1] against fixed-point rounding."""
    b = np.clip(beta, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(b > 0, b * np.log(b), 0.0) - np.where(b < 1, (1 - b) * np.log1p(-b), 0.0)
    return h


def _entropy_gains(beta, dbeta, weight):
    """Per grid step g: sum_i weight_i [H(beta_i + g dbeta_i) - H(beta_i)]."""
    base = _entropy(beta)
    return [float(np.sum(weight * (_entropy(beta + g * dbeta) - base)))
            for g in LINE_SEARCH_GRID]


def line_search_step(shares, w, dw, lam, gamma):
    """g* maximising D(alpha + g dalpha) over [0, 1] for losses whose dual term is
    a y - (gamma/2) a^2 on its domain (docs/algorithm.md section 5, lesson (c)):

        D(g) = -(lam/2)||w + g dw||^2 + S1 g - gamma (S2 g + S3 g^2 / 2) + const
        g*   = clip((S1 - gamma S2 - lam w.dw) / (lam ||dw||^2 + gamma S3), 0, 1)

    with the secure sums S1 = (1/N) sum y_i dalpha_i, S2 = (1/N) sum alpha_i dalpha_i,
    S3 = (1/N) sum dalpha_i^2 (``shares``). With five shares (curvature scaling) the
    term lam ||dw||^2 is multiplied by S4 / S5 >= 1: dw holds only the present holders'
    part of each moved row, whose full squared norm is S4 / S5 times what they carry
    (= 1 when every holder is present).
    """
    s1, s2, s3 = shares[:3]
    scale = 1.0
    if len(shares) == 5 and shares[4] > 0.0:
        scale = max(1.0, float(shares[3] / shares[4]))
    curvature = lam * float(dw @ dw) * scale + gamma * s3
    if curvature <= 0.0:
        return 1.0
    return float(np.clip((s1 - gamma * s2 - lam * float(w @ dw)) / curvature, 0.0, 1.0))


# the logistic grid: 0, 1/32, ..., 1, and 2^-6, ..., 2^-16 below 1/32 (every point a
# multiple of the step's 2^-16): with the uniform points alone a step g* under 1/64 was
# taken as 0 for good, and the estimator's logistic fit on a9a stalled at lam 1e-4
LINE_SEARCH_GRID = np.union1d(np.linspace(0.0, 1.0, 33), 2.0 ** -np.arange(6, 17))


def grid_line_search_step(conj_gains, w, dw, lam, grid=LINE_SEARCH_GRID):
    """g maximising D(alpha + g dalpha) over ``grid`` (any loss; used for logistic, whose
    conjugate is not quadratic). ``conj_gains[j]`` is the secure sum
    (1/N) sum_i [-l*(-(alpha_i + g_j dalpha_i)) + l*(-alpha_i)]; the server adds
    -(lam/2)(||w + g_j dw||^2 - ||w||^2). D is concave in g and g = 0 is on the grid, so
    the step never lowers the dual."""
    grid = np.asarray(grid)
    reg = -0.5 * lam * (2.0 * grid * float(w @ dw) + grid**2 * float(dw @ dw))
    return float(grid[int(np.argmax(reg + np.asarray(conj_gains)))])


def quantize_step(g, bits):
    """(m, m / 2^bits): the step as the integer the server multiplies ciphertexts by."""
    m = int(round(g * (1 << bits)))
    return m, m / float(1 << bits)


def step_bits(settings):
    """Fractional bits of the step g: STEP_BITS with the line search, a capped step or a
    fallback from the line search (whose settings keep the bits), else 0 (g = 1)."""
    stepped = settings.line_search or settings.step_cap < 1 or settings.stall_fallback
    return STEP_BITS if stepped else 0


def choose_step(settings, revealed, w, dw):
    """The server's step for the round's aggregated update, as (m, g = m / 2^bits):
    the line search on the revealed secure sums (grid search for logistic), else 1;
    at most ``step_cap``. The exact line search's step is theta g* (theta =
    ``line_search_relax``): where the revealed sums are the whole round's (every holder
    present, or horizontal data) D is a concave quadratic in g, so D(theta g*) - D(0) =
    theta (2 - theta) (D(g*) - D(0)) for an interior g*, and at least theta (D(g*) - D(0))
    for a clipped one (g* = 1): the relaxed step never lowers the dual there."""
    g = 1.0
    if settings.line_search and settings.loss == "logistic":
        g = grid_line_search_step(revealed, w, dw, settings.round_lam)
    elif settings.line_search:
        g = settings.line_search_relax * line_search_step(
            revealed, w, dw, settings.round_lam, settings.curvature_of_conjugate)
    return quantize_step(min(g, settings.step_cap), step_bits(settings))


def moves_prox_centre(settings, round_):
    """Whether the proximal centre moves after round ``round_`` (counted from 1)."""
    return settings.kappa > 0 and round_ % settings.prox_rounds == 0


def initial_kappa(settings):
    """The kappa of the first rounds where it is not the settings' (None: the settings'):
    0 under ``prox_warm_start`` (bound settings), whose outer loop starts at its first
    move (:func:`starts_outer_loop`)."""
    return 0.0 if settings.prox_warm_start and settings.kappa > 0 else None


def starts_outer_loop(settings, round_):
    """Whether the warm-started outer loop (``prox_warm_start``, bound settings) starts
    after round ``round_``: its first ``prox_rounds`` rounds ran the original problem
    (kappa 0), and its first centre is the w they reached. w(alpha) does not jump: with
    c = w and X^T alpha / N = lam w, the rounds' dual map (kappa/mu) c + X^T alpha / (mu N)
    is w again; each client's v_k = X_k^T alpha / (mu N) takes the factor lam / mu."""
    return initial_kappa(settings) is not None and round_ == settings.prox_rounds


def next_prox_centre(settings, w, centre, last_w):
    """The accelerated proximal outer step (``settings.kappa`` > 0), made by the
    server in the clear every ``prox_rounds`` rounds. The rounds solve
    P(w) + (kappa/2)||w - c||^2, whose dual map is w = (kappa/mu) c + X^T alpha / (mu N)
    (mu = lam + kappa), so w holds the offset (kappa/mu) c. With w the server's w now and
    last_w its w at the previous move, the centre becomes

        c' = w + beta (w - last_w),  beta = (1 - sqrt(lam/mu)) / (1 + sqrt(lam/mu))

    (Nesterov's extrapolation for a mu/lam-conditioned outer problem). Returns (c', the
    change (kappa/mu)(c' - c) to add to w, the new last_w). alpha is unchanged: the dual
    box does not depend on c."""
    mu = settings.round_lam
    ratio = np.sqrt(settings.lam / mu)
    beta = (1.0 - ratio) / (1.0 + ratio)
    new_centre = w + beta * (w - last_w)
    return new_centre, (settings.kappa / mu) * (new_centre - centre), w.copy()


def conjugate_gain(settings, revealed, g):
    """The step's change of the dual's conjugate term C(alpha) = (1/N) sum_i
    -l*(-alpha_i), exact from the line search's revealed sums: g S1 - gamma (g S2 +
    g^2 S3 / 2) (:func:`line_search_step`), or the grid's sum at g (logistic, whose step
    is a grid point: ``prox_adapt`` needs step_cap 1 there)."""
    if settings.loss == "logistic":
        return float(revealed[int(np.searchsorted(LINE_SEARCH_GRID, g))])
    gamma = settings.curvature_of_conjugate
    s1, s2, s3 = revealed[:3]
    return float(g * s1 - gamma * (g * s2 + 0.5 * g * g * s3))


def tracked_dual(settings, conjugate_total, w, centre):
    """(D(alpha), C(alpha), Q(alpha)) of the original problem from the server's public
    values: D = C - Q with C the sum of the steps' :func:`conjugate_gain` (C(0) = 0) and
    Q = ||u||^2 / (2 lam), u = X^T alpha / N = mu w - kappa c (the rounds' dual map,
    :func:`next_prox_centre`). Exact where the server's w is w(alpha): every holder of
    each moved sample took part (full participation, or one holder per sample)."""
    u = settings.round_lam * w - settings.kappa * centre
    q = float(u @ u) / (2.0 * settings.lam)
    return conjugate_total - q, conjugate_total, q


def weakened_outer_loop(settings, conjugate_total, w, centre):
    """``prox_adapt``'s rule where the centre moves: None while D(alpha) >= -ADAPT_FALL
    P(0), P(0) = l(0) the primal at w = 0 (the starting duality gap, the same for every
    sample of a classification loss); else (kappa', w for kappa', mu / mu') with mu' =
    mu max(C, 0) / Q < mu (D < 0: Q > C), kappa' = max(0, mu' - lam). A proximal problem
    whose solution puts the original dual that far below its start D(0) = 0 has too
    strong a kappa for the data (docs/algorithm.md section 6, sixteenth round: SMS falls
    to -0.30 P(0); a9a's -0.006 and Fashion-MNIST's -0.051 are dips its outer loop pays
    back, and so is news20-like's -0.21, which this threshold does not spare: hence an
    option); alpha is kept and w is its dual map under kappa': (kappa'/mu') c + (mu/mu')
    (w - (kappa/mu) c)."""
    dual, conj, quad = tracked_dual(settings, conjugate_total, w, centre)
    if dual >= -ADAPT_FALL * settings.loss_at_zero:
        return None
    mu = settings.round_lam
    kappa = max(0.0, mu * max(conj, 0.0) / quad - settings.lam)
    new_mu = settings.lam + kappa
    offset = (settings.kappa / mu) * centre
    return kappa, (kappa / new_mu) * centre + (mu / new_mu) * (w - offset), mu / new_mu


def is_full_step(m, settings):
    """After a full step (g = 1) every participant's copy alpha + dalpha equals the
    server's alpha: no sync is due."""
    return m == 1 << step_bits(settings)


BOXED_LOSSES = ("hinge", "smoothed_hinge", "logistic")  # dual box |alpha_i| <= 1


def settles_exactly(settings, frac_bits):
    """Whether a participant's settled copy alpha_i + g dalpha_i (float64) equals the
    server's alpha_i after any step g = m / 2^s, so that no sync is due after it either.

    The server holds alpha_i as the integer a at 2^(f + s) fractional bits and adds
    m d, d the aggregated dalpha_i at f bits; the client computes a 2^-(f+s) +
    (m 2^-s)(d 2^-f). Where |alpha_i| <= 1 and |dalpha_i| <= 1 (the box of the hinge,
    smoothed hinge and logistic duals, which alpha_i and alpha_i + dalpha_i stay in),
    every term and the sum lie on the 2^-(f+s) grid below 2 in magnitude, exact in the
    53-bit significand when f + s + 2 <= 53 (default 32 + 16)."""
    return settings.loss in BOXED_LOSSES and frac_bits + step_bits(settings) + 2 <= 53


def dual_update_range_bits(settings, frac_bits):
    """The declared range of a holder's encrypted p_i^k dalpha_i: below 2^(f + 1) in
    magnitude where the loss's dual box bounds alpha (|alpha_i|, |alpha_i + dalpha_i|
    <= 1, so |dalpha_i| <= 1 after the box's clip, and p_i^k < 3/2: at most 1 exactly,
    a little more where q_i, summed from parts rounded to 2^-f, rounds below a tiny
    row's part); None (the codec's whole range) for the squared loss. A public fact of
    the loss, so the bound the server sees says nothing about the data; the encoder
    refuses a value outside it (OverflowError), so packed slots never carry."""
    return frac_bits + 1 if settings.loss in BOXED_LOSSES else None


def participants_are_synced(m, settings, frac_bits):
    """After the step m every participant holds the server's alpha on its samples (it
    received the aggregated dalpha of all of them): :func:`is_full_step` or
    :func:`settles_exactly`."""
    return is_full_step(m, settings) or settles_exactly(settings, frac_bits)


def new_step_record():
    """Whether each of the last STALL_WINDOW steps was 0 (none yet), for :func:`stalls`."""
    return np.zeros(STALL_WINDOW, dtype=bool)


def stalls(settings, zero_steps, m):
    """Record the round's step m in ``zero_steps`` (the last STALL_WINDOW, oldest first);
    True when the line search of settings that watch for it (``watches_stall``) has
    stalled: g = 0 in at least half of them; under cyclic participation in at least half
    of each subset's (``stall_turns``: the subsets take turns, so the entries i, i +
    n, i + 2n, ... of the record are one subset's rounds). Near the optimum the stale part
    of the line search's linear term outweighs the true gain, which shrinks
    quadratically, and g = 0 wastes the round (docs/algorithm.md section 6, the sixth
    round); far from it one cyclic subset may stall alone while the others progress (the
    twentieth round). The engines then switch to ``settings.after_stall()`` for good."""
    if not settings.watches_stall:
        return False
    zero_steps[:-1] = zero_steps[1:]
    zero_steps[-1] = m == 0
    turns = settings.stall_turns
    per_subset = (zero_steps[i::turns] for i in range(turns))
    return all(2 * np.count_nonzero(steps) >= steps.size for steps in per_subset)
