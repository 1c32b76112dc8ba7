"""The server's step-size rules against brute-force maximisation of the dual."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyfdca._round import LINE_SEARCH_GRID, grid_line_search_step, line_search_step
from hyfdca._round import quantize_step
from solvers import loss_code, neg_conjugate

GAMMA = {"hinge": 0.0, "smoothed_hinge": 0.7, "squared_hinge": 0.5, "squared": 1.0}


def dual_along(loss, X, y, alpha, dalpha, lam, g, smoothing=0.7):
    n = len(y)
    a = alpha + g * dalpha
    w = X.T @ a / (lam * n)
    conj = np.mean([neg_conjugate(loss_code(loss), a[i], y[i], smoothing) for i in range(n)])
    return -0.5 * lam * w @ w + conj


def _problem(seed, loss):
    rng = np.random.default_rng(seed)
    n, d = 12, 4
    X, y = rng.normal(size=(n, d)), np.where(rng.random(n) < 0.5, 1.0, -1.0)
    hi = 3.0 if loss in ("squared_hinge", "squared") else 1.0
    beta, beta_new = rng.uniform(0, hi, n), rng.uniform(0, hi, n)
    if loss == "squared":
        return X, y, rng.normal(size=n), rng.normal(size=n)
    return X, y, beta * y, (beta_new - beta) * y


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), loss=st.sampled_from(sorted(GAMMA)))
def test_closed_form_step_maximises_the_dual_on_0_1(seed, loss):
    X, y, alpha, dalpha = _problem(seed, loss)
    lam, n = 0.1, len(y)
    w, dw = X.T @ alpha / (lam * n), X.T @ dalpha / (lam * n)
    shares = (np.mean(y * dalpha), np.mean(alpha * dalpha), np.mean(dalpha**2))
    g = line_search_step(shares, w, dw, lam, GAMMA[loss])
    grid = np.linspace(0, 1, 2001)
    values = [dual_along(loss, X, y, alpha, dalpha, lam, t) for t in grid]
    assert dual_along(loss, X, y, alpha, dalpha, lam, g) >= max(values) - 1e-9


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), loss=st.sampled_from(sorted(GAMMA)),
       theta=st.floats(0.05, 1.0))
def test_a_relaxed_step_never_lowers_the_dual(seed, loss, theta):
    """line_search_relax's argument (docs/algorithm.md section 6, twenty-fourth round):
    D is a concave quadratic along dalpha, so the step theta g* gains theta (2 - theta)
    of the exact step's gain where g* is interior, and at least theta of it always."""
    X, y, alpha, dalpha = _problem(seed, loss)
    lam, n = 0.1, len(y)
    w, dw = X.T @ alpha / (lam * n), X.T @ dalpha / (lam * n)
    shares = (np.mean(y * dalpha), np.mean(alpha * dalpha), np.mean(dalpha**2))
    g = line_search_step(shares, w, dw, lam, GAMMA[loss])
    start = dual_along(loss, X, y, alpha, dalpha, lam, 0.0)
    exact = dual_along(loss, X, y, alpha, dalpha, lam, g) - start
    relaxed = dual_along(loss, X, y, alpha, dalpha, lam, theta * g) - start
    assert relaxed >= theta * exact - 1e-9 >= -1e-9
    if 0.0 < g < 1.0:
        assert relaxed == pytest.approx(theta * (2 - theta) * exact, rel=1e-6, abs=1e-12)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_grid_step_is_the_best_grid_point_for_logistic(seed):
    X, y, alpha, dalpha = _problem(seed, "hinge")
    lam, n = 0.1, len(y)
    w, dw = X.T @ alpha / (lam * n), X.T @ dalpha / (lam * n)
    code = loss_code("logistic")
    conj = lambda a: np.mean([neg_conjugate(code, a[i], y[i], 1.0) for i in range(n)])
    gains = [conj(alpha + g * dalpha) - conj(alpha) for g in LINE_SEARCH_GRID]
    g = grid_line_search_step(gains, w, dw, lam)
    values = [dual_along("logistic", X, y, alpha, dalpha, lam, t) for t in LINE_SEARCH_GRID]
    assert dual_along("logistic", X, y, alpha, dalpha, lam, g) == pytest.approx(max(values))
    assert dual_along("logistic", X, y, alpha, dalpha, lam, g) >= \
        dual_along("logistic", X, y, alpha, dalpha, lam, 0.0) - 1e-12


def test_quantized_step():
    assert quantize_step(1.0, 16) == (65536, 1.0)
    assert quantize_step(0.3, 4) == (5, 0.3125)
    assert quantize_step(0.7, 0) == (1, 1.0)


def test_settings_that_need_the_data_refuse_to_be_used_unbound():
    from feddata.partition import hybrid_grid
    from hyfdca import HyFDCASettings

    settings = HyFDCASettings.from_variant("sigma-safe", lam=0.1, H=5)
    for name in ("lam_n", "sigma_bound"):
        with pytest.raises(RuntimeError, match="bind"):
            getattr(settings, name)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(12, 4)), np.where(rng.random(12) < 0.5, 1.0, -1.0)
    bound = settings.bind(hybrid_grid(X, y, 2, 2))
    assert bound.lam_n == 0.1 * 12 and bound.sigma_bound == 2.0


def test_the_scaled_line_search_multiplies_the_regulariser_curvature():
    rng = np.random.default_rng(3)
    w, dw = rng.normal(size=5), rng.normal(size=5)
    s1, s2, s3, lam = 0.3, 0.1, 0.2, 0.05
    plain = line_search_step([s1, s2, s3], w, dw, lam, 0.0)
    assert line_search_step([s1, s2, s3, 0.7, 0.7], w, dw, lam, 0.0) == plain
    doubled = line_search_step([s1, s2, s3, 1.4, 0.7], w, dw, lam, 0.0)
    expected = np.clip((s1 - lam * w @ dw) / (2 * lam * dw @ dw), 0, 1)
    assert doubled == pytest.approx(expected, rel=1e-12)
    # never below the present holders' curvature
    assert line_search_step([s1, s2, s3, 0.35, 0.7], w, dw, lam, 0.0) == plain


def test_auto_full_relaxes_the_exact_line_search_only():
    from feddata.partition import horizontal
    from hyfdca import HyFDCASettings
    from hyfdca._settings import AUTO_FULL_RELAX

    def relax(**overrides):
        return HyFDCASettings.from_variant("auto", **overrides).line_search_relax

    assert relax() == relax(loss="squared") == AUTO_FULL_RELAX < 1
    assert relax(loss="logistic") == relax(line_search=False) == 1
    assert relax(participation="fraction", fraction=0.5) == 1
    # partial participation on horizontal data: bind() turns the preset into auto-full
    rng = np.random.default_rng(0)
    data = horizontal(rng.normal(size=(12, 4)), np.where(rng.random(12) < 0.5, 1.0, -1.0), 3)
    for loss, expected in (("hinge", AUTO_FULL_RELAX), ("logistic", 1.0)):
        partial = HyFDCASettings.from_variant("auto", loss=loss, participation="fraction",
                                              fraction=0.2)
        assert partial.bind(data).line_search_relax == expected
    capped = HyFDCASettings.from_variant("capped-line-search", line_search_relax=0.9)
    assert capped.after_stall().line_search_relax == 1  # no line search after a stall


def test_line_search_relax_is_checked():
    from hyfdca import HyFDCASettings

    for bad in (0.0, 1.5, -0.2, "half"):
        with pytest.raises(ValueError, match="line_search_relax must be in"):
            HyFDCASettings.from_variant("line-search", line_search_relax=bad)
    for variant, loss in (("paper", "hinge"), ("line-search", "logistic")):
        with pytest.raises(ValueError, match="relaxes the exact line search"):
            HyFDCASettings.from_variant(variant, loss=loss, line_search_relax=0.5)


def test_curvature_scaling_needs_a_quadratic_line_search():
    from hyfdca import HyFDCASettings

    with pytest.raises(ValueError, match="curvature_scaling='absent-share' scales the exact "
                                         "line search .* needs line_search=True and a loss "
                                         "other than logistic"):
        HyFDCASettings.from_variant("sigma-safe", H=5, curvature_scaling="absent-share")
    with pytest.raises(ValueError, match="curvature_scaling='absent-share' scales the exact "
                                         "line search .* needs line_search=True and a loss "
                                         "other than logistic"):
        HyFDCASettings.from_variant("scaled-line-search", loss="logistic", H=5)


def test_norm_share_weights_partition_each_row_among_its_holders():
    """p_i^k = ||x_i^k||^2 / q_i sums to 1 over the holders of every sample (so the
    aggregated dual stays a convex combination); 1/|C_i| on an empty row, exactly 1 with one
    holder; "equal" is 1/|C_i| everywhere."""
    from feddata import partition as P
    from hyfdca import HyFDCASettings
    from hyfdca._round import aggregation_weights

    rng = np.random.default_rng(5)
    X = rng.normal(size=(9, 7)) * (rng.random((9, 7)) < 0.5)
    X[4] = 0.0  # an empty row
    X[6, :4] = 0.0  # a row that some holders see empty
    fed = P.hybrid_grid(X, np.where(rng.random(9) < 0.5, 1.0, -1.0), 3, 2)
    totals = {"equal": np.zeros(9), "norm-share": np.zeros(9)}
    for b in fed.blocks:
        partial = np.asarray(b.X.multiply(b.X).sum(axis=1)).ravel()
        counts = fed.holder_counts[b.sample_ids]
        for rule, total in totals.items():
            weights = aggregation_weights(rule, counts, fed.sq_row_norms[b.sample_ids],
                                          partial, 32)
            total[b.sample_ids] += weights
            if rule == "equal":
                assert np.array_equal(weights, 1.0 / counts)
            else:
                full = fed.sq_row_norms[b.sample_ids] > 0
                assert np.allclose(weights[full], partial[full] /
                                   fed.sq_row_norms[b.sample_ids][full])
                assert np.array_equal(weights[~full], 1.0 / counts[~full])
    for total in totals.values():
        assert np.allclose(total, 1.0)
    horizontal = P.horizontal(X, np.ones(9), 3)  # one holder per sample: exactly 1
    for b in horizontal.blocks:
        partial = np.asarray(b.X.multiply(b.X).sum(axis=1)).ravel()
        assert np.all(aggregation_weights("norm-share", horizontal.holder_counts[b.sample_ids],
                                          horizontal.sq_row_norms[b.sample_ids],
                                          partial, 32) == 1.0)
    with pytest.raises(ValueError, match="holder_weights"):
        HyFDCASettings.from_variant("paper", holder_weights="norm")


@pytest.mark.parametrize("best", [0.2, 0.01, 3e-4, 2e-5])
def test_the_logistic_grid_takes_a_small_best_step_within_a_factor_two(best):
    """D concave in g with its maximum at ``best``: the grid's step is within a factor 2
    of it (the uniform grid 0, 1/32, ..., 1 took every best step under 1/64 as 0, and a
    logistic run stalled there for good); every grid point is a multiple of 2^-16."""
    grid = LINE_SEARCH_GRID
    assert grid[0] == 0.0 and grid[-1] == 1.0 and np.all(np.diff(grid) > 0)
    assert np.array_equal(grid * 2.0 ** 16, np.round(grid * 2.0 ** 16))
    gains = -(grid - best) ** 2 + best ** 2     # the conjugate's gain, w . dw = 0
    g = grid_line_search_step(gains, np.zeros(1), np.zeros(1), 1e-4)
    assert best / 2 <= g <= 2 * best


def test_norm_share_weights_add_up_to_one_on_rows_of_tiny_norm():
    """q_i is the sum of the holders' parts as the set-up encoded them (2^-32 each): on
    rows of squared norm a few 2^-32 the exact parts' shares added up to 0.5-1.8 and
    alpha left its box; the shares of the encoded parts add up to 1 in both engines, and
    alpha y stays in [0, 1] (to the updates' rounding)."""
    from feddata import partition as P
    from hyfdca import BatchedHyFDCA, HyFDCARun, HyFDCASettings, run_hyfdca

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 8)) * 1e-5   # q_i about 3.5 x 2^-32
    y = np.where(rng.random(60) < 0.5, 1.0, -1.0)
    fed = P.hybrid_grid(X, y, 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=1e-4)
    message_run = HyFDCARun(fed, settings, seed=0)
    total = np.zeros(60)
    for client in message_run.clients:
        total[client.sample_ids] += client.update_weight
    np.testing.assert_allclose(total, 1.0, rtol=0, atol=1e-12)
    batched = BatchedHyFDCA(fed, settings, seed=0).blocks
    np.testing.assert_allclose(np.bincount(batched.hold_sample, batched.update_weight), 1.0,
                               rtol=0, atol=1e-12)
    run, _ = run_hyfdca(fed, settings, max_rounds=50, eval_every=10, engine="batched")
    assert np.max(run.alpha * y) <= 1.0 + 2.0 ** -30


def test_prox_auto_sets_kappa_from_the_disclosed_norm_and_caps_it():
    """prox="auto": kappa = max(0, ||X||_F^2 / N^2 - lam), at most (PROX_CAP - 1) lam, from
    the layout's sq_norm_total; refused where the layout lacks it; bad values are named."""
    from feddata import Layout
    from feddata.partition import hybrid_grid
    from hyfdca import HyFDCASettings
    from hyfdca._settings import PROX_CAP

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 6)), np.where(rng.random(40) < 0.5, 1.0, -1.0)
    fed = hybrid_grid(X, y, 2, 2)
    ratio = float(np.sum(X * X)) / 40 / 40
    for lam, expected in ((ratio / 3, ratio - ratio / 3), (ratio / 50, (PROX_CAP - 1) * ratio / 50),
                          (2 * ratio, 0.0)):
        bound = HyFDCASettings.from_variant("auto-full", lam=lam, prox="auto").bind(fed)
        assert bound.kappa == pytest.approx(expected, rel=1e-12)
        assert bound.round_lam == pytest.approx(lam + expected, rel=1e-12)
    bare = Layout.from_ids([b.sample_ids for b in fed.blocks], [b.feature_ids for b in fed.blocks])
    with pytest.raises(ValueError, match="sq_norm_total"):
        HyFDCASettings.from_variant("auto-full", lam=0.1, prox="auto").bind(bare)
    with pytest.raises(RuntimeError, match="bind"):
        HyFDCASettings.from_variant("auto-full", lam=0.1, prox="auto").kappa
    for bad in (-1.0, float("nan"), "often"):
        with pytest.raises(ValueError, match="prox must be a number >= 0, 'auto' or 'strong'"):
            HyFDCASettings.from_variant("auto-full", lam=0.1, prox=bad)
    with pytest.raises(ValueError, match="prox_rounds"):
        HyFDCASettings.from_variant("auto-full", lam=0.1, prox_rounds=0)


def _auto_on_a_small_grid():
    """(the data, mean q_i / N, bind(lam, fraction, **fields)): the data a 2x2 grid of 40
    Gaussian rows, bind giving variant "auto" under participation "fraction" bound on it."""
    from feddata.partition import hybrid_grid
    from hyfdca import HyFDCASettings

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 6)), np.where(rng.random(40) < 0.5, 1.0, -1.0)
    fed = hybrid_grid(X, y, 2, 2)

    def bound_auto(lam, fraction, **fields):
        return HyFDCASettings.from_variant("auto", lam=lam, participation="fraction",
                                           fraction=fraction, **fields).bind(fed)

    return fed, float(np.sum(X * X)) / 40 / 40, bound_auto


def test_phase_e_auto_runs_where_the_proximal_loop_is_strong():
    """second_inner_product="auto" and prox_rounds="auto" (the capped line search):
    phase E and a centre moved every STRONG_PROX_ROUNDS rounds where the rounds' mu =
    lam + kappa is above PHASE_E_MU lam, with mu capped at CAPPED_PROX_CAP lam; below, no
    phase E, WEAK_PROX_ROUNDS and the same mu as a cap of 3; explicit values and bad
    ones."""
    from hyfdca import HyFDCASettings
    from hyfdca._round import moves_prox_centre, plan_round
    from hyfdca._settings import (CAPPED_PROX_CAP, PHASE_E_MU, STRONG_PROX_ROUNDS,
                                  WEAK_PROX_ROUNDS)

    _, ratio, bound_auto = _auto_on_a_small_grid()

    def capped(lam, **fields):
        return bound_auto(lam, 0.5, **fields)

    conditioned = capped(ratio / 2)  # mu = 2 lam <= PHASE_E_MU lam
    assert not conditioned.second_inner_product
    assert conditioned.round_lam == pytest.approx(ratio, rel=1e-12)
    assert plan_round(conditioned, 1, False).round_trips == 4
    strong = capped(ratio / 10)  # mu = 10 lam
    assert strong.second_inner_product and strong.round_lam == pytest.approx(ratio, rel=1e-12)
    assert plan_round(strong, 1, False).round_trips == 5
    assert (conditioned.prox_rounds, strong.prox_rounds) == (WEAK_PROX_ROUNDS,
                                                             STRONG_PROX_ROUNDS)
    assert [t for t in range(1, 101) if moves_prox_centre(strong, t)] == list(
        range(STRONG_PROX_ROUNDS, 101, STRONG_PROX_ROUNDS))
    assert capped(ratio / 10, prox_rounds=7).prox_rounds == 7
    assert capped(ratio / 100).round_lam == pytest.approx(CAPPED_PROX_CAP * ratio / 100,
                                                          rel=1e-12)
    assert capped(ratio / (PHASE_E_MU + 1e-9)).second_inner_product
    assert not capped(ratio / 10, second_inner_product=False).second_inner_product
    assert capped(ratio / 2, second_inner_product=True).second_inner_product
    with pytest.raises(ValueError, match="second_inner_product"):
        HyFDCASettings.from_variant("auto-full", second_inner_product="sometimes")
    with pytest.raises(ValueError, match="prox_rounds"):
        HyFDCASettings.from_variant("auto-full", prox_rounds="often")


def test_the_scaled_line_search_runs_a_weak_outer_loop_without_phase_e():
    """The scaled line search (auto at f >= 0.75) takes prox "auto": where lam < mu <=
    PHASE_E_MU lam a weak outer loop, kappa = mu - lam, its centre moved every 25 rounds,
    without phase E (4 round trips); where mu > PHASE_E_MU lam the strong loop with
    phase E (5); where mu <= lam no loop, the bits of prox="strong"."""
    from hyfdca._round import moves_prox_centre, plan_round
    from hyfdca._settings import CAPPED_PROX_CAP, PHASE_E_MU

    fed, ratio, bound_auto = _auto_on_a_small_grid()

    def scaled(lam, **fields):
        return bound_auto(lam, 0.9, **fields)

    weak = scaled(ratio / 2)  # mu = 2 lam
    assert weak.curvature_scaling == "absent-share"
    assert weak.kappa == pytest.approx(ratio / 2, rel=1e-12) and weak.prox_rounds == 25
    assert not weak.second_inner_product and plan_round(weak, 1, False).round_trips == 4
    assert [t for t in range(1, 101) if moves_prox_centre(weak, t)] == [25, 50, 75, 100]
    strong = scaled(ratio / 10)  # mu = 10 lam
    assert strong.round_lam == pytest.approx(ratio, rel=1e-12) and strong.prox_rounds == 25
    assert strong.second_inner_product and plan_round(strong, 1, False).round_trips == 5
    assert scaled(ratio / 100).round_lam == pytest.approx(CAPPED_PROX_CAP * ratio / 100,
                                                          rel=1e-12)
    conditioned = scaled(ratio * 2)  # mean q_i / N = lam / 2: no loop
    assert conditioned.kappa == 0.0
    assert replace(conditioned, overridden=()) == replace(
        scaled(ratio * 2, prox="strong"), overridden=())
    assert not scaled(ratio / PHASE_E_MU, prox="strong").kappa  # "strong": none at 3 lam


def test_the_prox_centre_moves_by_nesterovs_extrapolation():
    from hyfdca import HyFDCASettings
    from hyfdca._round import moves_prox_centre, next_prox_centre

    settings = HyFDCASettings.from_variant("auto-full", lam=0.01, prox=0.08, prox_rounds=5)
    w, centre, last = np.array([1.0, -2.0]), np.array([0.5, 0.5]), np.array([0.0, -1.0])
    beta = (1 - np.sqrt(0.01 / 0.09)) / (1 + np.sqrt(0.01 / 0.09))
    new_centre, shift, new_last = next_prox_centre(settings, w, centre, last)
    np.testing.assert_allclose(new_centre, w + beta * (w - last), rtol=1e-15)
    np.testing.assert_allclose(shift, 0.08 / 0.09 * (new_centre - centre), rtol=1e-15)
    np.testing.assert_array_equal(new_last, w)
    assert [r for r in range(1, 16) if moves_prox_centre(settings, r)] == [5, 10, 15]
    off = HyFDCASettings.from_variant("auto-full", lam=0.01, prox=0.0)
    assert not any(moves_prox_centre(off, r) for r in range(1, 50))


def test_the_proximal_rounds_keep_w_on_the_proximal_dual_map():
    """With every holder present (horizontal data, full participation) the server's w is
    (kappa/mu) c + X^T alpha / (mu N) after every round, the outer loop's start and the
    centre's moves included."""
    from feddata.partition import horizontal
    from hyfdca import BatchedHyFDCA, HyFDCASettings

    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(90, 5)), np.where(rng.random(90) < 0.5, 1.0, -1.0)
    settings = HyFDCASettings.from_variant("auto", lam=0.01, prox=0.05, prox_rounds=2)
    run = BatchedHyFDCA(horizontal(X, y, 3), settings, seed=0)
    kappas = []
    for _ in range(7):  # auto-full's warm start: kappa 0 in rounds 1-2, then 0.05
        run.step()
        kappa = run.round_settings.kappa
        mu = 0.01 + kappa
        expected = kappa / mu * run.prox_centre + X.T @ run.alpha / (mu * 90)
        np.testing.assert_allclose(run.w, expected, rtol=1e-8, atol=1e-10)
        kappas.append(kappa)
    assert kappas == [0.0] + [0.05] * 6 and np.any(run.prox_centre)
