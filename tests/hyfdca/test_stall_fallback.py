"""The capped line search's fallback (docs/algorithm.md section 6, the sixth round): once
g = 0 in half of the last 100 rounds (under cyclic participation, in half of each subset's
rounds among them: the twentieth round) the run goes on with auto-partial's rounds for good,
in both engines alike, through a checkpoint, with no extra message."""

import numpy as np
import pytest

from feddata import partition as P
from hyfdca import BatchedHyFDCA, HyFDCASettings, run_hyfdca
from hyfdca._round import STALL_WINDOW, STEP_BITS, new_step_record, stalls, step_bits

LAM = 0.05
ROUNDS = 500  # the stall comes at round 267-432 on these splits
HALF = STALL_WINDOW // 2


@pytest.fixture(scope="module")
def small(cancer):
    X, y = cancer
    return X[:300], y[:300]


def capped(participation="fraction", fraction=0.5, lam=LAM, **overrides):
    """The default at fraction 0.5 (iic 0.3 before the fallback, 0.03 and at least 10
    steps after it: every client changes its number of draws)."""
    return HyFDCASettings.from_variant("auto", lam=lam, participation=participation,
                                       fraction=fraction, **overrides)


def test_after_stall_is_auto_partial_with_the_step_bits_kept():
    settings = HyFDCASettings.from_variant("auto", lam=1e-5, participation="fraction",
                                           fraction=0.5)
    after = settings.after_stall()
    partial = HyFDCASettings.from_variant("auto-partial", lam=1e-5)
    assert (settings.line_search, settings.stall_fallback, settings.step_cap) == (True, True,
                                                                                  0.3)
    assert (after.line_search, after.step_cap, after.curvature_scaling) == (False, 1.0, "none")
    # below lam 1e-4 more than auto-partial's local work of lam >= 1e-4 (0.03), not
    # less: the line search stalls far from the optimum there (section 6, thirtieth round)
    assert after.iic == pytest.approx(0.03 * 10 ** 0.5) and after.min_H == partial.min_H
    assert partial.iic < 0.03 < after.iic
    for field in ("rho", "holder_weights", "sampling", "draw", "aggregation"):
        assert getattr(after, field) == getattr(partial, field), field
    # the fallback takes auto-partial's local work, not its sigma rule: at f >= 0.5 the
    # capped preset keeps the safe value (auto-partial's rule is near it there)
    assert after.sigma == settings.sigma == "safe" and partial.sigma == "partial"
    assert step_bits(after) == step_bits(settings) == STEP_BITS  # alpha keeps its scale
    assert settings.after_stall(  # given local work is kept
        ).iic != 0.2 and HyFDCASettings.from_variant(
        "capped-line-search", iic=0.2).after_stall().iic == 0.2
    assert capped(H=50).after_stall().H == 50
    with pytest.raises(ValueError, match="no stall_fallback"):
        HyFDCASettings.from_variant("scaled-line-search").after_stall()
    with pytest.raises(ValueError, match="stall_fallback watches the line search"):
        HyFDCASettings.from_variant("auto-partial", stall_fallback=True)


@pytest.mark.parametrize("lam, iic", [(1.0, 0.03), (1e-4, 0.03), (1e-5, 0.03 * 10 ** 0.5),
                                      (1e-6, 0.3), (1e-8, 0.3)])
def test_the_fallback_s_local_work_grows_as_lam_falls_below_1e_4(lam, iic):
    # lam >= 1e-4 keeps auto-partial's 0.03 (the paper experiments' bits); below it the
    # fallback scales 0.03 by (1e-4 / lam) ** (1/2), up to the capped line search's 0.3
    after = capped(lam=lam).after_stall()
    assert after.iic == pytest.approx(iic, rel=1e-12)
    assert (after.iic == 0.03) == (lam >= 1e-4)  # exactly, not nearly


def test_a_stall_is_half_of_the_window_at_zero_steps():
    settings = capped()
    record, one = new_step_record(), 1 << STEP_BITS
    for _ in range(HALF - 1):
        assert not stalls(settings, record, 0)
    for _ in range(STALL_WINDOW - HALF):
        assert not stalls(settings, record, one)
    assert stalls(settings, record, 0)  # the 50th zero while the first is in the window
    record = new_step_record()
    for _ in range(HALF - 1):
        stalls(settings, record, 0)
    for _ in range(STALL_WINDOW - HALF + 2):
        stalls(settings, record, one)
    assert not stalls(settings, record, 0)  # the first zero has left the window
    # under full participation the line search sees the exact dual: no fallback
    full = HyFDCASettings.from_variant("capped-line-search", lam=LAM)
    record = new_step_record()
    assert not any(stalls(full, record, 0) for _ in range(STALL_WINDOW))
    assert not record.any()


@pytest.mark.parametrize("fraction, turns", [(0.5, 2), (0.34, 3)])
def test_under_cyclic_participation_every_subset_must_stall(fraction, turns):
    """One subset whose every step is 0 is no stall while the others progress, even where
    its zeros are half of the window (2 subsets); every subset at half zeros is."""
    settings = capped("cyclic", fraction=fraction)
    assert settings.stall_turns == turns
    one = 1 << STEP_BITS
    record = new_step_record()
    assert not any(stalls(settings, record, 0 if r % turns == 0 else one)
                   for r in range(3 * STALL_WINDOW))
    assert np.count_nonzero(record) >= STALL_WINDOW // turns  # the lone subset's zeros
    record = new_step_record()
    assert not any(stalls(settings, record, 0 if r % turns else one)  # all subsets but one
                   for r in range(3 * STALL_WINDOW))
    record = new_step_record()
    fell = [stalls(settings, record, 0 if (r // turns) % 2 else one)  # half of each subset's
            for r in range(3 * STALL_WINDOW)]
    assert any(fell)
    assert capped("fraction").stall_turns == 1


def first_stall(steps, turns):
    """The first round whose last STALL_WINDOW steps hold half of zeros in each of the
    ``turns`` interleaved subsets (the reference for :func:`stalls`), or None."""
    zero = np.concatenate([np.zeros(STALL_WINDOW, dtype=bool), np.asarray(steps) == 0])
    for r in range(len(steps)):
        window = zero[r + 1:r + 1 + STALL_WINDOW]
        if all(2 * window[i::turns].sum() >= window[i::turns].size for i in range(turns)):
            return r
    return None


@pytest.mark.parametrize("name, participation, draw_block", [
    ("hybrid", "fraction", 1), ("vertical", "cyclic", 1), ("hybrid", "fraction", 4)])
def test_both_engines_fall_back_at_the_same_round_with_the_same_bits(small, name,
                                                                     participation,
                                                                     draw_block):
    X, y = small
    fed = P.hybrid_grid(X, y, 3, 3) if name == "hybrid" else P.vertical(X, y, 3)
    settings = capped(participation, draw_block=draw_block)
    runs = {}
    for engine in ("batched", "protocol"):
        run, history = run_hyfdca(fed, settings, max_rounds=ROUNDS, eval_every=50, seed=0,
                                  engine=engine)
        server = run if engine == "batched" else run.server
        runs[engine] = (server.stalled, [r["step"] for r in history.rounds], run.model)
    assert runs["batched"][0] and runs["protocol"][0]
    assert runs["batched"][1] == runs["protocol"][1]
    np.testing.assert_array_equal(runs["batched"][2], runs["protocol"][2])
    steps = np.array(runs["protocol"][1])
    stall = first_stall(steps, settings.stall_turns)
    assert stall is not None and 0 < stall < ROUNDS - 20
    assert np.all(steps[stall + 1:] == 1.0)  # the fallback's full steps from then on
    assert np.any((steps[:stall] > 0) & (steps[:stall] < 1))  # the capped line search before


@pytest.mark.parametrize("participation, capped_H", [("fraction", 30), ("cyclic", 90)])
def test_the_fallback_survives_a_checkpoint(small, tmp_path, participation, capped_H):
    """Resumed after the fallback (the draws' sizes are the fallback's), both engines give
    the uninterrupted bits; the message engine's clients learn the fallback from the
    server's round start. Under cyclic participation the saved record keeps each
    subset's rounds in their places."""
    fed = (P.hybrid_grid(*small, 3, 3) if participation == "fraction"
           else P.vertical(*small, 3))
    settings = capped(participation)
    for engine in ("batched", "protocol"):
        folder = tmp_path / engine
        whole, _ = run_hyfdca(fed, settings, max_rounds=ROUNDS, eval_every=50, seed=0,
                              engine=engine)
        run_hyfdca(fed, settings, max_rounds=ROUNDS - 50, eval_every=50, seed=0,
                   engine=engine, checkpoint=folder)
        resumed, _ = run_hyfdca(fed, settings, max_rounds=ROUNDS, eval_every=50, seed=0,
                                engine=engine, checkpoint=folder, resume=True)
        np.testing.assert_array_equal(resumed.model, whole.model)
        server, whole_server = ((resumed, whole) if engine == "batched"
                                else (resumed.server, whole.server))
        np.testing.assert_array_equal(server.w, whole_server.w)
        if engine == "protocol":
            assert resumed.server.stalled and all(c.stalled for c in resumed.clients)
        else:  # the fallback's draws per round (max(10, 0.03 |I_k|)), not capped's 0.3 |I_k|
            capped_draws = BatchedHyFDCA(fed, settings).draws.H[0]
            assert resumed.draws.H[0] == 10 < capped_draws == capped_H


@pytest.mark.parametrize("engine", ["batched", "protocol"])
def test_a_run_saved_before_a_cyclic_stall_resumes_to_the_same_stall(small, tmp_path, engine):
    """The saved record keeps each subset's rounds in their places: a cyclic run saved
    shortly before its stall, resumed, stalls in the same round with the same bits."""
    fed = P.vertical(*small, 3)
    settings = capped("cyclic")
    whole, history = run_hyfdca(fed, settings, max_rounds=ROUNDS, eval_every=50, seed=0,
                                engine=engine)
    stall = first_stall([r["step"] for r in history.rounds], settings.stall_turns)
    assert stall is not None
    saved = stall // 50 * 50  # at a certificate: a run's last round is certified
    assert 100 < saved < stall
    run_hyfdca(fed, settings, max_rounds=saved, eval_every=50, seed=0, engine=engine,
               checkpoint=tmp_path)
    resumed, resumed_history = run_hyfdca(fed, settings, max_rounds=ROUNDS, eval_every=50,
                                          seed=0, engine=engine, checkpoint=tmp_path,
                                          resume=True)
    steps = [r["step"] for r in resumed_history.rounds]
    assert steps == [r["step"] for r in history.rounds][-len(steps):]
    np.testing.assert_array_equal(resumed.model, whole.model)
