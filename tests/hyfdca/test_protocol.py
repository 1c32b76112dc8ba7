"""HyFDCA protocol: exactness (docs/algorithm.md section 7), convergence, accounting,
reproducibility."""

import dataclasses
import json
import re

import numpy as np
import pytest
import scipy.sparse as sp

from feddata import partition as P
from hyfdca._draws import draw_positions, sample_units
from hyfdca._certificate import prox_iterate
from hyfdca import run_hyfdca
from hyfdca._protocol import HyFDCARun
from hyfdca import HyFDCASettings
from solvers import as_csr, encode_targets, loss_code, primal_objective, reference_optimum
from solvers.kernels import sdca_pass

LAM = 0.05


@pytest.fixture(scope="module")
def small(cancer):
    X, y = cancer
    return X[:300], y[:300]


@pytest.fixture(scope="module")
def p_star(small):
    return reference_optimum(*small, loss="hinge", lam=LAM)[0]


def partitions(X, y):
    return {
        "horizontal": P.horizontal(X, y, 3),
        "vertical": P.vertical(X, y, 3),
        "hybrid": P.hybrid_grid(X, y, 3, 3),
        "explicit-overlapping": P.from_blocks(X, y, [(range(160), range(20)),
                                                     (range(140, 300), range(30)),
                                                     (range(300), range(15, 30))]),
    }


def server_alpha(run):
    return run.clients[0].keys.decrypt(run.server.enc_alpha)


@pytest.mark.parametrize("loss", ["hinge", "squared"])
def test_one_client_is_centralized_sdca_step_for_step(small, loss):
    X, y = small
    Xc = as_csr(X)
    n, seed = X.shape[0], 3
    fed = P.horizontal(X, y, 1)
    settings = HyFDCASettings.from_variant("paper", loss=loss, lam=LAM, H=n, draw="permuted",
                                           sampling="shared")
    per_round = []
    run, _ = run_hyfdca(fed, settings, max_rounds=4, eval_every=100, seed=seed,
                        frac_bits=50, callback=lambda r: per_round.append(server_alpha(r)))
    Y, _ = encode_targets(y, loss)
    alpha, W = np.zeros_like(Y), np.zeros((X.shape[1], 1))
    q = np.asarray(Xc.multiply(Xc).sum(axis=1)).ravel()
    for t in range(4):
        order = draw_positions((seed, 1, 0), t, sample_units(n), None, n, permuted=True)
        assert np.array_equal(np.sort(order), np.arange(n))  # one pass: an SDCA epoch
        sdca_pass(Xc.data, Xc.indices, Xc.indptr, Y, alpha, W, q, order, loss_code(loss),
                  LAM * n, 1.0, 1.0)
        np.testing.assert_allclose(per_round[t], alpha[:, 0], atol=1e-11)
    np.testing.assert_allclose(run.server.w, W[:, 0], atol=1e-11)


@pytest.mark.parametrize("name", ["horizontal", "vertical", "hybrid", "explicit-overlapping"])
@pytest.mark.parametrize("participation, variant, aggregation", [
    ("full", "auto", None), ("fraction", "combined", "consistent"),
    ("cyclic", "rho", "consistent")])
def test_server_w_is_the_dual_map_of_alpha(small, name, participation, variant, aggregation):
    X, y = small
    fed = partitions(X, y)[name]
    settings = HyFDCASettings.from_variant(variant, lam=LAM, H=40, participation=participation,
                                           fraction=0.7, aggregation=aggregation)
    run, _ = run_hyfdca(fed, settings, max_rounds=12, eval_every=100, seed=1)
    Xp, _ = fed.reassemble()
    s = run.settings  # auto at full participation: the proximal outer loop, mu = lam + kappa
    offset = s.kappa / s.round_lam * run.server.prox_centre
    np.testing.assert_allclose(run.server.w,
                               offset + Xp.T @ server_alpha(run) / (s.round_lam * X.shape[0]),
                               atol=1e-12)


@pytest.mark.parametrize("name", ["horizontal", "vertical", "hybrid", "explicit-overlapping"])
@pytest.mark.parametrize("participation", ["full", "fraction", "cyclic"])
def test_converges_to_the_centralized_optimum(small, p_star, name, participation):
    X, y = small
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=50, participation=participation,
                                           fraction=0.5)
    run, history = run_hyfdca(partitions(X, y)[name], settings, max_rounds=3000,
                              eval_every=20, p_star=p_star, tol=5e-5 * p_star, seed=0)
    primal, dual = history.certified()
    assert (primal - dual) / primal <= 1e-4
    assert abs(primal - p_star) / p_star <= 1e-4
    w = run.model  # the certificate with the smallest primal
    assert primal_objective(X, y, w, loss="hinge", lam=LAM) == pytest.approx(primal, rel=1e-6)


def test_relative_tolerance_stops_at_the_first_certificate_that_meets_it(small):
    """rel_tol stops at the first evaluation whose certified gap, smallest primal so far
    minus largest dual so far, plus its rounding bound e, is at most rel_tol times that
    dual less e (a lower bound on P*), not before."""
    from hyfdca._certificate import certificate_rounding

    X, y = small
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=50)
    fed = partitions(X, y)["hybrid"]
    _, full = run_hyfdca(fed, settings, max_rounds=200, eval_every=10, seed=0,
                         engine="batched")
    rounds = sorted(full.evaluations)
    best_p = np.minimum.accumulate([full.evaluations[r]["primal"] for r in rounds])
    best_d = np.maximum.accumulate([full.evaluations[r]["dual"] for r in rounds])
    e = np.array([certificate_rounding("hinge", p, frac_bits=32, n_clients=fed.n_clients)
                  for p in best_p])
    lower = best_d - e   # no relative bound while it is not positive (round 0: D = 0)
    relative = dict(zip(rounds, np.where(lower > 0, (best_p - best_d + e)
                                         / np.where(lower > 0, lower, 1.0), np.inf)))
    target = sorted(relative.values())[len(relative) // 2]  # met halfway, not at once
    first = min(r for r, v in relative.items() if v <= target)
    run, stopped = run_hyfdca(partitions(X, y)["hybrid"], settings, max_rounds=200,
                              eval_every=10, seed=0, engine="batched", rel_tol=target)
    assert run.round == first > 0
    assert all(v > target for r, v in relative.items() if r < first)


def test_paper_variant_diverges_on_a_hybrid_grid(small, p_star):
    """docs/algorithm.md section 5, lesson (a): sigma = 1 with added sample-group updates
    blows up (3x3 hybrid)."""
    X, y = small
    settings = HyFDCASettings.from_variant("paper", lam=LAM, H=100)
    _, history = run_hyfdca(P.hybrid_grid(X, y, 3, 3), settings, max_rounds=60,
                            eval_every=60, p_star=p_star)
    assert history.last_evaluation["relative_loss"] > 1.0


@pytest.mark.parametrize("builder, participation, second, expected", [
    (lambda X, y: P.horizontal(X, y, 3), "full", False, 2),
    (lambda X, y: P.hybrid_grid(X, y, 2, 2), "full", False, 3),
    (lambda X, y: P.hybrid_grid(X, y, 2, 2), "fraction", False, 4),
    (lambda X, y: P.hybrid_grid(X, y, 2, 2), "fraction", True, 5),
])
def test_round_trips_per_round(small, builder, participation, second, expected):
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=10, participation=participation,
                                           fraction=0.5, second_inner_product=second)
    _, history = run_hyfdca(builder(*small), settings, max_rounds=3, eval_every=10)
    assert [r["rtc"] for r in history.rounds[1:]] == [expected] * 2
    assert all(r["bytes_up"] > 0 and r["bytes_down"] > 0 for r in history.rounds)


def test_crypto_operations_are_counted(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 2)
    settings = HyFDCASettings.from_variant("rho", lam=LAM, H=10)
    _, history = run_hyfdca(fed, settings, max_rounds=2, eval_every=10)
    r = history.rounds[1]   # round 2: no phase A; B, C and D
    # encrypt: 2 holders x drawn-sample parts (<= 4 x 10) + dual updates (<= 4 x 10)
    assert 0 < r["encrypt"] <= 80
    assert r["decrypt"] >= 40          # every client decrypts its 10 margins at least
    assert r["add"] > 0 and r["multiply"] == 0   # g = 1: no scalar multiplications


def test_participation_models(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 3)
    for participation, sizes in (("fraction", {3}), ("cyclic", {3})):
        settings = HyFDCASettings.from_variant("auto", lam=LAM, H=5,
                                               participation=participation, fraction=0.5)
        _, history = run_hyfdca(fed, settings, max_rounds=4, eval_every=10)
        assert {r["available"] for r in history.rounds} == sizes


@pytest.mark.parametrize("engine", ["protocol", "batched"])
def test_cyclic_participation_with_more_subsets_than_clients_is_refused(small, engine):
    """Four clients at fraction 0.2 would take turns in five subsets, one of them empty: a
    round with no client (which the two engines would count differently)."""
    fed = P.hybrid_grid(*small, 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, participation="cyclic",
                                           fraction=0.2)
    with pytest.raises(ValueError, match=r"ceil\(1/f\) = 5 subsets, more than the 4 "
                                         r"clients: .* use a fraction >= 1/4"):
        run_hyfdca(fed, settings, max_rounds=2, engine=engine)
    run_hyfdca(fed, dataclasses.replace(settings, fraction=0.25), max_rounds=2,
               engine=engine)


def test_same_seed_same_bits(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=20, participation="fraction",
                                           fraction=0.5)
    a = run_hyfdca(fed, settings, max_rounds=5, eval_every=5, seed=4)[0].server.w
    b = run_hyfdca(fed, settings, max_rounds=5, eval_every=5, seed=4)[0].server.w
    c = run_hyfdca(fed, settings, max_rounds=5, eval_every=5, seed=5)[0].server.w
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_certificate_matches_pooled_objectives(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 2)
    # the segment to the proximal iterate alone, not the triangle with the round before's
    # (test_certified_point.py: test_the_certificate_searches_the_triangle_of_the_...)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=20, certify_two_iterates=False)
    # 12 rounds: past the start of auto-full's warm-started outer loop (after round 10)
    run, history = run_hyfdca(fed, settings, max_rounds=12, eval_every=12)
    alpha = server_alpha(run)
    w = X.T @ alpha / (LAM * len(y))
    # the primal at the proximal iterate (w(alpha) without prox), the dual at w(alpha)
    kappa = run.server.round_settings.kappa
    assert kappa > 0
    point = prox_iterate(LAM, kappa, w, run.server.prox_centre)  # round 12 did not move
    primal = LAM / 2 * point @ point + np.mean(np.maximum(0, 1 - y * (X @ point)))
    dual = -LAM / 2 * w @ w + np.mean(alpha * y)
    last = history.last_evaluation
    assert last["iterate_primal"] == pytest.approx(primal, abs=1e-8)
    assert last["iterate_dual"] == pytest.approx(dual, abs=1e-8)
    # the certified points are at least as good (the segments end at the iterates)
    assert last["primal"] <= last["iterate_primal"] and last["dual"] >= last["iterate_dual"]


def test_history_exports(small, tmp_path, p_star):
    X, y = small
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=20)
    _, history = run_hyfdca(P.hybrid_grid(X, y, 2, 2), settings, max_rounds=4, eval_every=2,
                            p_star=p_star, validation=(X, y))
    history.to_csv(tmp_path / "h.csv")
    history.to_json(tmp_path / "h.json")
    lines = (tmp_path / "h.csv").read_text().splitlines()
    assert len(lines) == 6 and lines[0].startswith("round,available,step,rtc")
    rows = json.loads((tmp_path / "h.json").read_text())["rows"]
    assert rows[2]["gap"] is not None and rows[1]["gap"] is None
    assert 0.5 < rows[4]["validation_accuracy"] <= 1.0
    assert np.all(np.diff(history.simulated_time(latency=0.2575)) >= 0.2575 * 3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(H=None, iic=None, variant="paper"), None),
    (dict(H=0), "H must be a whole number >= 1, got 0"),
    (dict(H=2.5), "H must be a whole number >= 1, got 2.5"),   # never truncated to 2
    (dict(H=True), "H must be a whole number >= 1, got True"),
    (dict(H=5, iic=0.1), "give exactly one of H and iic"),
    (dict(H=5, sigma=-1.0), "sigma must be a finite number > 0, 'safe' or 'partial'"),
    (dict(sigma=float("inf")), "sigma must be a finite number > 0, 'safe' or 'partial', got inf"),
    (dict(iic=float("inf")), "iic must be a finite number > 0, got inf"),
    (dict(smoothing=float("inf")), "smoothing must be a finite number > 0, got inf"),
    (dict(step_cap=1e-6), "step_cap must be in [2^-16, 1] (a step below rounds to 0"),
    (dict(line_search=True, line_search_relax=1e-6, curvature_scaling="absent-share"),
     "line_search_relax must be in [2^-16, 1]"),
    (dict(line_search="no"), "line_search must be True or False, got 'no'"),
    (dict(H=5, participation="some"), "participation must be one of"),
    (dict(H=5, fraction=0.0), "fraction must be in (0, 1]"),
    (dict(participation="cyclic", fraction=0.0),   # auto picks its preset by the cycle
     "cyclic participation needs a fraction in (0, 1], got 0.0"),
    (dict(H=5, variant="best"), "unknown variant 'best'"),
])
def test_settings_errors(kwargs, message):
    kwargs = dict(kwargs)
    variant = kwargs.pop("variant", "auto")
    if message is None:
        assert HyFDCASettings.from_variant(variant, **kwargs).iic == 0.01
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        HyFDCASettings.from_variant(variant, **kwargs)


@pytest.mark.parametrize("name, overrides, line_search", [
    ("horizontal", {}, True),                  # one holder per sample: exact rounds
    ("horizontal", dict(sigma=2.0), True),     # overrides survive the switch
    ("horizontal", dict(iic=0.05), True),      # so does the local work (which turns
    ("horizontal", dict(H=20), True),          # iic_coherence off)
    ("hybrid", {}, False),                     # stale state: no line search
    ("vertical", {}, False),
])
def test_auto_partial_is_auto_full_on_horizontal_data(small, name, overrides, line_search):
    fed = partitions(*small)[name]
    bound = HyFDCASettings.from_variant("auto", lam=LAM, participation="fraction",
                                        fraction=0.3, **overrides).bind(fed)
    preset = HyFDCASettings.from_variant("auto", lam=LAM, **overrides).bind(fed)
    assert bound.line_search is line_search
    if "H" in overrides:
        assert bound.H == overrides["H"] and bound.iic is None
    else:
        assert bound.iic == overrides.get("iic", 1.0 if line_search else 0.03)
    assert bound.sigma == overrides.get("sigma", 1.0 if line_search else "partial")
    assert (bound.participation, bound.fraction) == ("fraction", 0.3)
    if line_search:  # the same numbers as full participation, participation aside
        assert bound.sigma_value == preset.sigma_value and bound.rho == preset.rho


def test_auto_partial_scales_its_local_work_with_the_square_root_of_lam(small):
    """auto-partial's iic is 0.03 at lam >= 1e-4 and proportional to the square root of
    lam below; a preset at a small lam is still recognised as untouched (switched to
    auto-full on horizontal data), and an explicit iic wins."""
    iic = {lam: HyFDCASettings.from_variant("auto", lam=lam, participation="fraction",
                                            fraction=0.3).iic
           for lam in (1e-1, 1e-4, 1e-5, 1e-6)}
    assert iic[1e-1] == iic[1e-4] == 0.03
    assert iic[1e-5] == pytest.approx(0.03 * 0.1 ** 0.5)
    assert iic[1e-6] == pytest.approx(0.003)
    small_lam = HyFDCASettings.from_variant("auto", lam=1e-5, participation="fraction",
                                            fraction=0.3)
    assert small_lam.bind(partitions(*small)["horizontal"]).line_search
    assert not small_lam.bind(partitions(*small)["hybrid"]).line_search
    assert HyFDCASettings.from_variant("auto", lam=1e-5, participation="fraction",
                                       fraction=0.3, iic=0.02).iic == 0.02


def test_layout_coherence_is_the_mean_rows_norm_over_the_mean_row_norm(small):
    """Layout.coherence = sum_k |I_k| ||m_k||^2 / ||X||_F^2: for one non-negative block
    ||mean row||^2 / mean q_i; on a grid the sample groups' own mean rows stand in for the
    pooled one; a block with a negative entry counts as coherence 1 (its pairwise inner
    products can cancel in the mean); None where a client did not disclose it."""
    from feddata import Layout, block_mean_sq

    X, y = np.abs(small[0]), small[1]
    one = P.horizontal(X, y, 1).layout()
    q = np.sum(X * X, axis=1)
    assert one.coherence == pytest.approx(float(np.sum(X.mean(axis=0) ** 2)) / q.mean(),
                                          rel=1e-12)
    grid = P.hybrid_grid(X, y, 3, 3)
    groups = [ids for ids in {tuple(b.sample_ids) for b in grid.blocks}]
    expected = sum(len(ids) * float(np.sum(X[list(ids)].mean(axis=0) ** 2)) for ids in groups)
    assert grid.layout().mean_sq_total == pytest.approx(expected, rel=1e-12)
    assert grid.layout().mean_sq_total == sum(block_mean_sq(b.X) for b in grid.blocks)
    assert 0 < grid.layout().coherence < 1
    signed = P.hybrid_grid(*small, 3, 3).layout()  # standardised: centred, signed
    assert signed.coherence == 1.0
    bare = Layout.from_ids([b.sample_ids for b in grid.blocks],
                           [b.feature_ids for b in grid.blocks], grid.layout().sq_norm_total)
    assert bare.coherence is None


def test_auto_partial_raises_its_local_work_on_data_less_coherent_than_a9a(
        small, sparse_non_negative):
    """iic_coherence (auto-partial): bind() multiplies iic by max(1, 0.4 / c) ** 0.5, c
    the layout's coherence, at every lam, to at most 0.3, and clears the flag, so binding
    again keeps it; coherent data (c >= 0.4; signed, standardised data count as 1), a
    layout without the statistic and an explicit iic or H keep the iic of from_variant
    bit for bit; the capped line search has no such rule."""
    from feddata import Layout
    from hyfdca._settings import COHERENCE_IIC_CAP, COHERENCE_REF

    incoherent = P.hybrid_grid(*sparse_non_negative(300, 200, 0.02), 3, 3)
    c = incoherent.layout().coherence
    assert c < COHERENCE_REF / 10
    coherent = [P.hybrid_grid(X, y, 3, 3)   # signed (c = 1) and shifted positive
                for X, y in (small, (np.abs(small[0]) + 3.0, small[1]))]
    assert all(fed.layout().coherence > COHERENCE_REF for fed in coherent)

    def settings(lam, **fields):
        return HyFDCASettings.from_variant("auto", lam=lam, participation="fraction",
                                           fraction=0.3, **fields)

    for lam in (1e-3, 1e-4, 1e-5, 1e-6, 3e-5):
        unbound = settings(lam)
        assert unbound.iic_coherence
        bound = unbound.bind(incoherent)
        assert bound.iic == pytest.approx(
            min(0.3, 0.03 * (min(1.0, lam / 1e-4) * COHERENCE_REF / c) ** 0.5), rel=1e-12)
        assert bound.iic > unbound.iic and not bound.iic_coherence
        assert bound.bind(incoherent).iic == bound.iic
        for fed in coherent:
            assert settings(lam).bind(fed).iic == unbound.iic
    assert COHERENCE_IIC_CAP == 0.3
    assert settings(1e-4).bind(incoherent).iic == settings(1e-3).bind(incoherent).iic
    orthogonal = P.hybrid_grid(sp.identity(900, format="csr"), np.tile([-1.0, 1.0], 450),
                               3, 3)   # c = 1 / 300, past the cap
    assert orthogonal.layout().coherence < 0.4 * (0.03 / 0.3) ** 2
    assert settings(1e-4).bind(orthogonal).iic == 0.3
    assert settings(1e-4, iic=0.5, iic_coherence=True).bind(orthogonal).iic == 0.5
    bare = Layout.from_ids([b.sample_ids for b in incoherent.blocks],
                           [b.feature_ids for b in incoherent.blocks],
                           incoherent.layout().sq_norm_total)
    assert settings(1e-5).bind(bare).iic == settings(1e-5).iic
    assert settings(1e-5, iic=0.02).bind(incoherent).iic == 0.02
    assert settings(1e-5, H=7).bind(incoherent).inner_steps(1000) == 7
    assert not settings(1e-5, iic=0.02).iic_coherence
    assert settings(1e-5, iic=0.02, iic_coherence=True).bind(incoherent).iic > 0.02
    capped = HyFDCASettings.from_variant("auto", lam=1e-5, participation="fraction",
                                         fraction=0.5)
    assert not capped.iic_coherence and capped.bind(incoherent).iic == capped.iic
    with pytest.raises(ValueError, match="iic_coherence must be"):
        settings(1e-5, iic_coherence="yes")
    with pytest.raises(ValueError, match="iic_coherence scales iic"):
        settings(1e-5, H=7, iic_coherence=True)


def test_the_capped_line_search_scales_its_local_work_as_auto_partial():
    """capped-line-search: the scaled line search with g <= 0.3 and iic 0.3 at lam >= 1e-4,
    scaled below as auto-partial's (by the square root of lam / 1e-4); the scaled line
    search keeps 0.3 at every lam."""
    def iic(variant, lam):
        return HyFDCASettings.from_variant(variant, lam=lam, participation="fraction",
                                           fraction=0.5).iic

    assert iic("capped-line-search", 1e-1) == iic("capped-line-search", 1e-4) == 0.3
    for lam in (1e-5, 1e-6):
        assert iic("capped-line-search", lam) == pytest.approx(10 * iic("auto-partial", lam))
    assert iic("capped-line-search", 1e-6) == pytest.approx(0.03)
    assert {iic("scaled-line-search", lam) for lam in (1e-1, 1e-4, 1e-6)} == {0.3}
    settings = HyFDCASettings.from_variant("capped-line-search", participation="cyclic",
                                           fraction=0.5)
    assert (settings.step_cap, settings.line_search, settings.curvature_scaling) == (
        0.3, True, "absent-share")


@pytest.mark.parametrize("participation, fraction, loss, preset", [
    ("full", 1.0, "hinge", "auto-full"),
    ("fraction", 0.9, "hinge", "scaled-line-search"),   # most clients present
    ("fraction", 0.75, "squared", "scaled-line-search"),
    ("fraction", 0.5, "hinge", "capped-line-search"),   # half of the clients or more
    ("fraction", 0.5, "squared", "capped-line-search"),
    ("cyclic", 0.9, "hinge", "capped-line-search"),     # two subsets: half present
    ("cyclic", 1 / 3, "hinge", "capped-line-search"),   # three subsets
    ("cyclic", 0.3, "hinge", "auto-partial"),           # four subsets
    ("fraction", 0.49, "hinge", "auto-partial"),
    ("fraction", 0.1, "hinge", "auto-partial"),
    ("fraction", 0.9, "logistic", "auto-partial"),      # no quadratic conjugate
    ("fraction", 0.5, "logistic", "auto-partial"),
])
def test_auto_resolves_by_participation(participation, fraction, loss, preset):
    settings = HyFDCASettings.from_variant("auto", participation=participation,
                                           fraction=fraction, loss=loss)
    expected = HyFDCASettings.from_variant(preset, participation=participation,
                                           fraction=fraction, loss=loss)
    assert settings.variant == "auto"
    for field in ("sigma", "rho", "line_search", "iic", "min_H", "curvature_scaling",
                  "step_cap", "stall_fallback"):
        assert getattr(settings, field) == getattr(expected, field), field


def test_auto_at_high_participation_is_auto_full_on_horizontal_data(small):
    fed = partitions(*small)["horizontal"]
    bound = HyFDCASettings.from_variant("auto", lam=LAM, participation="fraction",
                                        fraction=0.9).bind(fed)
    assert (bound.iic, bound.sigma, bound.curvature_scaling) == (1.0, 1.0, "none")
    hybrid = HyFDCASettings.from_variant("auto", lam=LAM, participation="fraction",
                                         fraction=0.9).bind(partitions(*small)["hybrid"])
    assert (hybrid.curvature_scaling, hybrid.sigma, hybrid.iic) == ("absent-share", 1.0, 0.3)


@pytest.mark.parametrize("n_local, expected", [(5, 5), (300, 10), (5000, 150)])
def test_auto_partial_takes_at_least_ten_steps(n_local, expected):
    settings = HyFDCASettings.from_variant("auto", participation="fraction", fraction=0.3)
    assert settings.inner_steps(n_local) == expected        # max(min(10, n), 0.03 n)
    capped = HyFDCASettings.from_variant("auto", participation="fraction", fraction=0.5)
    assert capped.after_stall().inner_steps(n_local) == expected  # its fallback's rounds
    assert HyFDCASettings.from_variant("paper").inner_steps(n_local) == max(1, n_local // 100)


def test_settings_built_directly_are_never_re_resolved(small):
    """bind() re-resolves only from_variant("auto"): settings built field by field keep
    their fields on horizontal data, even where they equal the auto-partial preset."""
    fed = partitions(*small)["horizontal"]
    settings = HyFDCASettings(H=5, participation="fraction", fraction=0.5).bind(fed)
    assert (settings.line_search, settings.sigma, settings.H) == (False, 1.0, 5)
    preset = HyFDCASettings.from_variant("auto", lam=LAM, participation="fraction",
                                         fraction=0.3)
    assert preset.bind(fed).line_search  # re-resolved to auto-full
    fields = {f.name: getattr(preset, f.name) for f in dataclasses.fields(preset)
              if f.name != "overridden"}
    bound = HyFDCASettings(**fields).bind(fed)
    assert (bound.variant, bound.participation, bound.fraction) == ("auto", "fraction", 0.3)
    assert (bound.line_search, bound.sigma, bound.iic, bound.min_H) == (False, "partial",
                                                                        0.03, 10)


def test_line_search_sums_are_exact_with_absent_holders(small, monkeypatch):
    """S1 = (1/N) sum_i y_i dalpha_i etc. must hold with only some holders present."""
    import hyfdca._round as round_module

    X, y = small
    seen = []
    original = round_module.line_search_step

    def spy(shares, w, dw, lam, gamma):
        seen.append(np.array(shares))
        return original(shares, w, dw, lam, gamma)

    monkeypatch.setattr(round_module, "line_search_step", spy)
    settings = HyFDCASettings.from_variant("line-search", lam=LAM, H=30,
                                           participation="fraction", fraction=0.5)
    alphas, deltas = [np.zeros(len(y))], []

    def after_round(run):
        keys = run.clients[0].keys
        deltas.append(keys.decrypt(run.server.enc_delta))
        alphas.append(server_alpha(run))

    run_hyfdca(P.hybrid_grid(X, y, 3, 3), settings, max_rounds=5, eval_every=10,
               callback=after_round)
    assert len(seen) == 5   # one line search a round: the spy saw every one
    for t, shares in enumerate(seen):
        d, a = deltas[t], alphas[t]
        expected = np.array([np.mean(y * d), np.mean(a * d), np.mean(d * d)])
        np.testing.assert_allclose(shares, expected, atol=1e-8)


def test_round_traffic_does_not_depend_on_the_certificate(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=20, participation="fraction",
                                           fraction=0.5)
    often = run_hyfdca(fed, settings, max_rounds=6, eval_every=1, seed=3)[1].rounds
    rarely = run_hyfdca(fed, settings, max_rounds=6, eval_every=100, seed=3)[1].rounds
    for key in ("bytes_up", "bytes_down", "encrypt", "decrypt", "add"):
        assert [r[key] for r in often] == [r[key] for r in rarely]


def test_a_certificate_records_what_it_costs_apart_from_the_rounds(small):
    """Three round trips with every client (sync + v_k, inner products, masked sums),
    each client encrypting its part of each of its margins: what the certified point
    costs every eval_every rounds (docs/algorithm.md section 3)."""
    X, y = small
    fed = P.hybrid_grid(X, y, 3, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=20, participation="fraction",
                                           fraction=0.5)
    run = HyFDCARun(fed, settings, seed=3)
    records = [run.step() for _ in range(2)]
    run.certificate()
    run.step()
    run.certificate()
    n_clients = len(fed.blocks)
    held_margins = sum(block.X.shape[0] for block in fed.blocks)  # sum_k |I_k|
    assert [c["round"] for c in run.certificate_costs] == [2, 3]
    for cost in run.certificate_costs:
        assert (cost["rtc"], cost["messages_down"], cost["messages_up"]) == (
            3, 3 * n_clients, 3 * n_clients)
        assert cost["encrypt"] == held_margins and cost["add"] == held_margins
        assert cost["bytes_down"] > 0 and cost["bytes_up"] > 0
    assert all(r["rtc"] == records[0]["rtc"] for r in records)


def test_a_certificate_that_searches_the_last_two_iterates_costs_a_second_inner_product(
        small):
    """Under auto-full (certify_two_iterates) a certificate after a round whose round
    before ended without one computes x_{t-1}'s margins as well: a fourth round trip,
    and every client encrypts its part of each of its margins twice; right after a
    certificate it costs the three of the segment."""
    X, y = small
    fed = P.hybrid_grid(X, y, 3, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=20, prox=0)
    assert settings.certify_two_iterates
    run = HyFDCARun(fed, settings, seed=3)
    for _ in range(2):
        run.step()
    run.certificate()
    run.step()
    run.certificate()
    n_clients = len(fed.blocks)
    held_margins = sum(block.X.shape[0] for block in fed.blocks)
    (line, segment) = run.certificate_costs
    assert (line["rtc"], line["messages_down"], line["messages_up"]) == (
        4, 4 * n_clients, 4 * n_clients)
    assert line["encrypt"] == line["add"] == 2 * held_margins
    assert (segment["rtc"], segment["messages_up"]) == (3, 3 * n_clients)
    assert segment["encrypt"] == segment["add"] == held_margins


def test_divergence_stops_with_an_error_that_says_so(small):
    X, y = small
    settings = HyFDCASettings.from_variant("paper", loss="squared", lam=1e-3, H=300)
    try:
        _, history = run_hyfdca(P.hybrid_grid(X, y, 3, 3), settings, max_rounds=200,
                                eval_every=5)
    except OverflowError as err:
        assert "diverged" in str(err)
    else:
        assert not np.isfinite(history.last_evaluation["gap"])


def test_every_drawn_sample_is_reported_zeros_included(cancer):
    """Which drawn samples did not move would leak their margins (hinge: y z >= 1)."""
    X, y = cancer
    settings = HyFDCASettings.from_variant("rho", lam=LAM, H=40, participation="fraction",
                                           fraction=0.5)
    run, _ = run_hyfdca(P.hybrid_grid(X, y, 2, 2), settings, max_rounds=20, eval_every=50,
                        record=True)
    drawn, zeros = {}, 0
    for phase, k, message in run.transport.server_inbox:
        if type(message).__name__ == "PrimalContribution" and phase.startswith("dual"):
            drawn[k] = np.unique(message.drawn)
        if type(message).__name__ == "DualUpdate":
            np.testing.assert_array_equal(message.positions, drawn[k])
            zeros += int(np.sum(run.clients[k].keys.decrypt(message.dalpha) == 0))
    assert zeros > 0   # the hinge leaves many drawn samples where they are


def test_federated_prediction_equals_the_pooled_models(cancer):
    """New samples split across the parties like the training data: the server learns
    only the margins, and they are the pooled model's (fixed-point sums of the parts)."""
    from hyfdca import HyFDCARun
    from solvers import sign_labels

    X, y = cancer
    train_fed, new = P.hybrid_grid(X[:300], y[:300], 2, 2), P.hybrid_grid(X[300:], y[300:], 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=0.05, participation="fraction",
                                           fraction=0.5)
    run, _ = run_hyfdca(train_fed, settings, max_rounds=20, crypto="mask", record=True)
    labels, margins = run.predict(new.n_samples, blocks=new.blocks)
    X_new, _ = new.reassemble()
    np.testing.assert_allclose(margins, X_new @ run.model, atol=1e-8)
    np.testing.assert_array_equal(labels, sign_labels(X_new @ run.model))
    # what the server received: masked shares, never a client's parts of a margin
    received = {k: m.shares for phase, k, m in run.transport.server_inbox
                if phase == "prediction"}
    for k, block in enumerate(new.blocks):
        parts = np.zeros(new.n_samples)
        parts[block.sample_ids] = block.X @ run.model[block.feature_ids]
        plain = np.round(parts * 2.0**32).astype(np.int64).view(np.uint64)
        assert np.mean(received[k] == plain) < 0.01
    with pytest.raises(ValueError, match="no model to predict with"):
        HyFDCARun(train_fed, settings).predict(new.n_samples)
    with pytest.raises(ValueError, match="holds no prediction block"):
        HyFDCARun(train_fed, settings).predict(new.n_samples, w=run.model)


def test_a_prediction_block_unlike_the_training_block_is_refused(cancer):
    """A party's new samples must come in its training features, in order (w_k's
    coordinates), and within the samples asked for: a block of another party's features,
    or of the same number of features in another order, would give wrong margins, and an
    id past the end (or negative) would fail or wrap around in the index."""
    from feddata.federated import ClientBlock

    X, y = cancer
    train_fed, new = P.hybrid_grid(X[:300], y[:300], 2, 2), P.hybrid_grid(X[300:], y[300:], 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=0.05)
    run, _ = run_hyfdca(train_fed, settings, max_rounds=2, crypto="plain")
    blocks = list(new.blocks)
    swapped = blocks[0]
    blocks[0] = ClientBlock(swapped.sample_ids, swapped.feature_ids[::-1].copy(),
                            swapped.X[:, ::-1].tocsr(), swapped.y)
    with pytest.raises(ValueError, match=r"client 0: the prediction block's feature ids "
                                         r"differ .*first at position 0"):
        run.predict(new.n_samples, blocks=blocks)
    other = new.blocks[1]   # client 1 holds the other feature group, as many features
    assert other.X.shape[1] == new.blocks[0].X.shape[1]
    with pytest.raises(ValueError, match="client 0: the prediction block's feature ids"):
        run.predict(new.n_samples, blocks=[other, *new.blocks[1:]])
    with pytest.raises(ValueError, match=r"outside the 100 new samples asked for"):
        run.predict(100, blocks=new.blocks)
    # blocks that leave new samples to nobody (grid group 0's parties drop 0-24): the
    # server, which sees the ids each party holds, names them (their margins read 0)
    from hyfdca._protocol import PredictionError
    dropped = []
    for block in new.blocks:
        keep = block.sample_ids >= 25
        dropped.append(ClientBlock(block.sample_ids[keep], block.feature_ids,
                                   block.X[keep], block.y[keep]))
    with pytest.raises(PredictionError, match=r"new samples \[0, 1, 2, .*\] \(25 of "):
        run.predict(new.n_samples, blocks=dropped)
    # a party reporting ids it cannot hold (a wrapped -1 would mark the last sample held)
    honest = run.clients[1].predict_shares

    def lying(message):
        reply = honest(message)
        return type(reply)(reply.shares, np.array([-1]))
    run.clients[1].predict_shares = lying
    with pytest.raises(PredictionError, match=r"client 1 reports new-sample ids outside 0"):
        run.predict(new.n_samples, blocks=new.blocks)
    del run.clients[1].predict_shares
    # every party given every new sample in its own features (a grid's two sample groups
    # both holding them): each margin part would be added twice; the server sees it in
    # the keyed entry tags (hyfdca._holdings) and names the pairs of parties
    whole = P.vertical(X[300:], y[300:], 2)
    everything = [ClientBlock(whole.blocks[k % 2].sample_ids, b.feature_ids,
                              whole.blocks[k % 2].X, whole.blocks[k % 2].y)
                  for k, b in enumerate(new.blocks)]
    assert all(np.array_equal(e.feature_ids, b.feature_ids)
               for e, b in zip(everything, new.blocks))
    doubled = [whole.blocks[0].X.nnz, whole.blocks[1].X.nnz]
    with pytest.raises(PredictionError, match=rf"{sum(doubled)} entries \(new sample, "
                                              rf"feature\) are held more than once "
                                              rf"\(clients 0, 2: {doubled[0]}; clients 1, 3: "
                                              rf"{doubled[1]}\)"):
        run.predict(new.n_samples, blocks=everything)
    labels, margins = run.predict(new.n_samples, blocks=new.blocks)   # the right blocks
    np.testing.assert_allclose(margins, new.reassemble()[0] @ run.model, atol=1e-8)


@pytest.mark.parametrize("loss, synced", [("hinge", True), ("smoothed_hinge", True),
                                          ("logistic", True), ("squared", False)])
def test_participants_hold_the_servers_alpha_after_a_partial_step(small, loss, synced):
    """After a step g < 1 a participant's settled alpha_i + g dalpha_i is the server's
    alpha_i bit for bit where the dual box bounds alpha (``_round.settles_exactly``), so
    the server owes it no dual sync; for the squared loss it still syncs."""
    from hyfdca import HyFDCARun

    X, y = small
    y_fit = y if loss != "squared" else X[:, 0] * 3.0
    fed = P.hybrid_grid(X, y_fit, 3, 3)
    run = HyFDCARun(fed, HyFDCASettings.from_variant("auto", loss=loss, lam=LAM), seed=2)
    partial = 0
    for _ in range(6):
        record = run.step()
        partial += record["step"] < 1
        alpha = server_alpha(run)
        for k, client in enumerate(run.clients):
            settled = client.settled_alpha(run.server.client_step[k])
            owed = run.server.synced_at[k] < run.server.version
            if synced:
                np.testing.assert_array_equal(settled, alpha[fed.blocks[k].sample_ids])
            assert owed != synced or record["step"] == 1
    assert partial >= 3   # the line search took partial steps
