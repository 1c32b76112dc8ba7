"""prox_adapt (an option): the original problem's dual tracked from the line search's
sums, and the weaker outer loop where it falls below -P(0) / 10
(hyfdca._round.weakened_outer_loop)."""

from dataclasses import replace

import numpy as np
import pytest

from feddata import partition as P
from hyfdca import BatchedHyFDCA, HyFDCARun, HyFDCASettings
from hyfdca._round import tracked_dual, weakened_outer_loop

LAM = 0.05


@pytest.fixture(scope="module")
def grid(cancer):
    X, y = cancer
    return P.hybrid_grid(X[:240], y[:240], 3, 3)


def settings(**fields):
    """auto at full participation (auto-full) with prox_adapt, a strong outer loop that
    this data's dual falls under (kappa = 4 lam) from round 1 (no warm start: the fall is
    the one at c = 0), the centre moved every 2 rounds."""
    return HyFDCASettings.from_variant("auto", **(dict(lam=LAM, H=30, prox=0.2,
                                                       prox_rounds=2, prox_adapt=True,
                                                       prox_warm_start=False)
                                                  | fields))


def bound(fed, **fields):
    return settings(**fields).bind(fed)


def test_the_rule_keeps_alpha_and_lowers_mu(grid):
    """Where D < -P(0) / 10 (hinge: -0.1): mu' = mu C / Q < mu, and w' is the same
    alpha's dual map (mu' w' - kappa' c = mu w - kappa c = X^T alpha / N); nothing where
    D >= -0.1, a dip below D(0) = 0 included."""
    s = bound(grid)
    rng = np.random.default_rng(0)
    w, c = rng.normal(size=30), rng.normal(size=30)
    _, conj, quad = tracked_dual(s, 0.0, w, c)
    assert quad > 1.0
    assert weakened_outer_loop(s, quad + 1e-3, w, c) is None  # D = 1e-3 > 0
    assert weakened_outer_loop(s, quad - 0.09, w, c) is None  # D = -0.09 >= -0.1
    kappa, new_w, scale = weakened_outer_loop(s, 0.25 * quad, w, c)  # D = -0.75 Q
    new_mu = s.lam + kappa
    assert new_mu == pytest.approx(0.25 * s.round_lam)
    assert scale == pytest.approx(s.round_lam / new_mu)
    np.testing.assert_allclose(new_mu * new_w - kappa * c, s.round_lam * w - s.kappa * c,
                               rtol=1e-12, atol=1e-12)
    assert weakened_outer_loop(s, -1.0, w, c)[0] == 0.0  # C <= 0: the outer loop stops


@pytest.mark.parametrize("engine", ["protocol", "batched"])
def test_the_tracked_dual_is_the_certificates_dual_through_a_weakening(grid, engine):
    """After every round the server's D(alpha) (its sum of the steps' conjugate gains and
    w) equals the certificate's D(alpha), before and after the rule weakens kappa: the
    rescaled w and the clients' new mu keep the dual map exact."""
    run = (HyFDCARun if engine == "protocol" else BatchedHyFDCA)(grid, settings(), seed=1)
    state = run.server if engine == "protocol" else run
    kappas = []
    for _ in range(12):
        run.step()
        dual = tracked_dual(state.round_settings, state.conjugate_total, state.w,
                            state.prox_centre)[0]
        assert dual == pytest.approx(run.certificate().iterate_dual, rel=1e-7, abs=1e-9)
        kappas.append(state.round_settings.kappa)
    assert kappas[0] == pytest.approx(0.2)
    assert kappas[-1] < 0.2  # the rule fired
    assert all(a >= b for a, b in zip(kappas, kappas[1:]))  # kappa only ever falls


def test_the_engines_agree_bit_for_bit_after_a_weakening(grid):
    a, b = HyFDCARun(grid, settings(), seed=1), BatchedHyFDCA(grid, settings(), seed=1)
    for _ in range(10):
        a.step(), b.step()
        np.testing.assert_array_equal(a.server.w, b.w)
        assert a.server.prox_kappa == b.prox_kappa
        assert a.server.conjugate_total == b.conjugate_total
    assert b.prox_kappa is not None and b.prox_kappa < 0.2
    for client in a.clients:
        assert client.round_settings.kappa == b.prox_kappa  # told with the dual sync


def test_without_a_fall_the_rule_changes_nothing(grid):
    """prox_adapt only acts where the dual fell: with a weak outer loop (kappa = lam / 2)
    that it never weakens, the run is the run without it, bit for bit."""
    on = settings(prox=0.025)
    off = replace(on, prox_adapt=False)
    a, b = BatchedHyFDCA(grid, on, seed=1), BatchedHyFDCA(grid, off, seed=1)
    for _ in range(10):
        a.step(), b.step()
    assert a.prox_kappa is None
    np.testing.assert_array_equal(a.w, b.w)
    np.testing.assert_array_equal(a.alpha, b.alpha)


@pytest.mark.parametrize("fields, problem", [
    (dict(line_search=False), "needs line_search=True"),
    (dict(stall_fallback=True), "no stall_fallback"),
    (dict(loss="logistic", step_cap=0.5), "it needs step_cap=1"),
    (dict(prox_adapt="yes"), "prox_adapt must be True or False"),
    (dict(loss="squared"), "for the classification losses"),
])
def test_settings_that_cannot_track_the_dual_are_refused(fields, problem):
    with pytest.raises(ValueError, match=problem):
        HyFDCASettings.from_variant("auto-full", **(dict(lam=LAM, prox_adapt=True) | fields))
