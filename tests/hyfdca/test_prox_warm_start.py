"""prox_warm_start (in auto-full; an option under partial participation): the outer loop's
first period runs the original problem (kappa 0), and its first centre is the w that
period reached (hyfdca._round.starts_outer_loop)."""

from dataclasses import replace

import numpy as np
import pytest

from feddata import partition as P
from hyfdca import BatchedHyFDCA, HyFDCARun, HyFDCASettings
from hyfdca._round import initial_kappa, starts_outer_loop, tracked_dual
from server_accounting import assert_w_accounts_for_each_client  # beside this file

LAM, KAPPA, PERIOD = 0.05, 0.2, 3


@pytest.fixture(scope="module")
def grid(cancer):
    X, y = cancer
    return P.hybrid_grid(X[:240], y[:240], 3, 3)


def settings(**fields):
    """auto (at full participation auto-full, warm start on) with a strong outer loop
    (kappa = 4 lam), its centre moved every PERIOD rounds."""
    return HyFDCASettings.from_variant("auto", **(dict(lam=LAM, H=30, prox=KAPPA,
                                                       prox_rounds=PERIOD) | fields))


# full participation (auto-full's preset warm-starts) and f = 0.9 (the scaled line
# search, with the option set)
WARM_REGIMES = {"full": {}, "fraction 0.9": dict(participation="fraction", fraction=0.9,
                                                 prox_warm_start=True)}


def test_auto_full_warm_starts_its_outer_loop_and_the_partial_presets_do_not():
    assert HyFDCASettings.from_variant("auto").prox_warm_start
    for fields in (dict(participation="fraction", fraction=0.9),
                   dict(participation="fraction", fraction=0.5),
                   dict(participation="fraction", fraction=0.1),
                   dict(participation="cyclic", fraction=1 / 3)):
        assert not HyFDCASettings.from_variant("auto", **fields).prox_warm_start


def test_the_outer_loop_starts_once_after_its_first_period(grid):
    s = settings().bind(grid)
    assert initial_kappa(s) == 0.0
    assert [t for t in range(1, 20) if starts_outer_loop(s, t)] == [PERIOD]
    off = replace(s, prox_warm_start=False)
    assert initial_kappa(off) is None and not any(starts_outer_loop(off, t)
                                                  for t in range(1, 20))
    no_loop = settings(prox=0.0).bind(grid)  # nothing to start
    assert initial_kappa(no_loop) is None and not starts_outer_loop(no_loop, PERIOD)


def test_the_first_period_is_the_run_without_the_outer_loop(grid):
    """Until the start, the rounds are those of kappa 0 bit for bit; then kappa is the
    settings', and after the next period the runs differ."""
    warm, plain = (BatchedHyFDCA(grid, settings(), seed=1),
                   BatchedHyFDCA(grid, settings(prox=0.0), seed=1))
    for _ in range(PERIOD):
        warm.step(), plain.step()
        np.testing.assert_array_equal(warm.w, plain.w)
        np.testing.assert_array_equal(warm.alpha, plain.alpha)
    assert warm.round_settings.kappa == KAPPA
    np.testing.assert_array_equal(warm.prox_centre, plain.w)  # c = w at the start
    for _ in range(PERIOD):
        warm.step(), plain.step()
    assert not np.array_equal(warm.w, plain.w)


@pytest.mark.parametrize("engine", ["protocol", "batched"])
def test_w_stays_the_dual_map_of_alpha_through_the_start(grid, engine):
    """After every round, before, at and after the start, the server's w is alpha's
    dual map under the rounds' kappa: u = mu w - kappa c is X^T alpha / N, so the dual
    the server tracks from it (prox_adapt's C - ||u||^2 / (2 lam)) is the certificate's
    D(alpha)."""
    run = (HyFDCARun if engine == "protocol" else BatchedHyFDCA)(
        grid, settings(prox_adapt=True), seed=1)
    state = run.server if engine == "protocol" else run
    for _ in range(2 * PERIOD + 1):
        run.step()
        dual = tracked_dual(state.round_settings, state.conjugate_total, state.w,
                            state.prox_centre)[0]
        assert dual == pytest.approx(run.certificate().iterate_dual, rel=1e-7, abs=1e-9)
    assert state.round_settings.kappa > 0.0  # the loop started


@pytest.mark.parametrize("regime", WARM_REGIMES)
def test_the_engines_agree_bit_for_bit_through_the_start(grid, regime):
    fields = WARM_REGIMES[regime]
    a, b = (HyFDCARun(grid, settings(**fields), seed=1),
            BatchedHyFDCA(grid, settings(**fields), seed=1))
    for t in range(1, 2 * PERIOD + 2):
        a.step(), b.step()
        np.testing.assert_array_equal(a.server.w, b.w)
        assert a.server.prox_kappa == b.prox_kappa == (0.0 if t < PERIOD else KAPPA)
        np.testing.assert_array_equal(a.server.prox_centre, b.prox_centre)
    for client in a.clients:  # told with the dual sync (every client synced since)
        assert client.round_settings.kappa == KAPPA


@pytest.mark.parametrize("regime", WARM_REGIMES)
def test_the_servers_v_k_take_the_new_mu_at_the_start(grid, regime):
    """w = (kappa/mu) c + sum_k v_k, and each v_k the server keeps is (X^k)^T alpha^(k) /
    (mu N) at the rounds' mu, before and after the start, for the clients absent at the
    start too (a rejoining client's new v_k replaces it: it must be at the same mu)."""
    run = HyFDCARun(grid, settings(**WARM_REGIMES[regime]), crypto="mask")
    for _ in range(PERIOD + 2):
        run.step()
        assert_w_accounts_for_each_client(run)
    assert run.server.round_settings.kappa == KAPPA


def test_settings_refuse_a_warm_start_that_is_not_a_bool():
    with pytest.raises(ValueError, match="prox_warm_start must be True or False"):
        HyFDCASettings.from_variant("auto-full", lam=LAM, prox_warm_start="yes")
