"""Block-splitting ADMM: the per-sample prox, the graph projection, convergence to the
centralized optimum on grid, vertical, horizontal and overlapping layouts, full
participation only, reproducibility."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize_scalar

import baselines.admm as admm
from baselines._admm_kernels import loss_prox, prox_losses
from baselines._base import run_baseline
from baselines.admm import BlockSplittingADMM, GraphProjector
from feddata import partition as P
from solvers import LOSS_CODES, loss_code, loss_value, reference_optimum

LAM = 0.1


@pytest.fixture(scope="module")
def small(cancer):
    X, y = cancer
    return X[:200], y[:200]


def layouts(X, y):
    return {
        "2x2": P.hybrid_grid(X, y, 2, 2),
        "1x3": P.vertical(X, y, 3),
        "3x1": P.horizontal(X, y, 3),
        "overlapping": P.from_blocks(X, y, [(range(120), range(20)),
                                            (range(100, 200), range(30)),
                                            (range(120), range(10, 30))]),
    }


@pytest.mark.parametrize("loss", sorted(LOSS_CODES))
@pytest.mark.parametrize("t", [0.01, 0.7, 5.0])
def test_prox_matches_a_brute_force_minimisation(loss, t):
    code, smoothing = loss_code(loss), 0.5
    rng = np.random.default_rng(0)
    for v in np.concatenate([rng.normal(scale=3.0, size=25), [1.0, -1.0, 1.0 - t, 0.0]]):
        for b in ((1.0, -1.0) if loss != "squared" else (0.3, -2.0)):
            def objective(z):
                return t * loss_value(code, z, b, smoothing) + 0.5 * (z - v) ** 2
            found = loss_prox(code, v, b, t, smoothing)
            reach = t + abs(v) + abs(b) + 3.0       # bounds |prox(v) - v| for every loss
            best = minimize_scalar(objective, bounds=(v - reach, v + reach),
                                   method="bounded", options=dict(xatol=1e-12))
            assert objective(found) <= objective(best.x) + 1e-12
            assert abs(found - best.x) < 1e-5


def test_prox_vector_kernel_is_the_scalar_one():
    rng = np.random.default_rng(1)
    v, labels = rng.normal(size=50), np.where(rng.random(50) < 0.5, 1.0, -1.0)
    out = prox_losses(loss_code("logistic"), v, labels, 0.3, 1.0, np.empty(50))
    assert np.array_equal(out, [loss_prox(loss_code("logistic"), a, b, 0.3, 1.0)
                                for a, b in zip(v, labels)])


@pytest.mark.parametrize("shape", [(40, 7), (7, 40)])
@pytest.mark.parametrize("path", ["cholesky", "sparse-lu"])
def test_graph_projection_is_exact(monkeypatch, shape, path):
    if path == "sparse-lu":
        monkeypatch.setattr(admm, "_DENSE_MAX", 0)
    rng = np.random.default_rng(2)
    A = sp.random(*shape, density=0.4, random_state=rng, format="csr")
    A.data = rng.normal(size=A.nnz)
    project = GraphProjector(A)
    assert (project.lu is not None) == (path == "sparse-lu")
    c, d = rng.normal(size=shape[1]), rng.normal(size=shape[0])
    x, y = project(c, d)
    np.testing.assert_allclose(y, A @ x, rtol=0, atol=1e-10)
    # optimality of the projection: (c - x) + A^T (d - y) = 0
    np.testing.assert_allclose((c - x) + A.T @ (d - y), 0.0, atol=1e-10)
    # a point of the graph is its own projection
    x0 = rng.normal(size=shape[1])
    x1, y1 = project(x0, A @ x0)
    np.testing.assert_allclose(x1, x0, atol=1e-10)
    # its counted work: the products with A (two if tall, else three), the solves, x
    size = min(shape)
    solve = size * size if path == "cholesky" else project.lu.L.nnz + project.lu.U.nnz
    assert project.ops == (2 if shape[1] <= shape[0] else 3) * A.nnz + solve + shape[1]


@pytest.mark.parametrize("layout", ["2x2", "1x3", "3x1", "overlapping"])
@pytest.mark.parametrize("loss, rho, rounds", [("squared", 10.0, 600), ("hinge", 1.0, 1800)])
def test_converges_to_the_centralized_optimum(small, layout, loss, rho, rounds):
    X, y = small
    p_star = reference_optimum(X, y, loss=loss, lam=LAM)[0]
    method = BlockSplittingADMM(layouts(X, y)[layout], loss=loss, lam=LAM, rho=rho)
    history = run_baseline(method, max_rounds=rounds, eval_every=rounds, p_star=p_star)
    assert history.last_evaluation["relative_loss"] <= 1e-4
    assert method.last_residual < 1e-2


def test_block_copies_agree_with_the_consensus_at_convergence(small):
    X, y = small
    fed = layouts(X, y)["overlapping"]
    method = BlockSplittingADMM(fed, loss="squared", lam=LAM, rho=10.0)
    for _ in range(1500):
        method.step()
    Xp, _ = fed.reassemble()
    np.testing.assert_allclose(method.y, Xp @ method.w, atol=1e-5)
    for k, block in enumerate(fed.blocks):
        # the shares add up to y and each is its block's own partial margin
        np.testing.assert_allclose(method.yk[k], block.X @ method.w[block.feature_ids],
                                   atol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(participation="fraction", fraction=0.5),
                                    dict(participation="cyclic", fraction=0.5)])
def test_partial_participation_is_refused(small, kwargs):
    with pytest.raises(ValueError, match="needs every client in every iteration"):
        BlockSplittingADMM(P.hybrid_grid(*small, 2, 2), **kwargs)


@pytest.mark.parametrize("kwargs", [dict(participation="fraction", fraction=0.9),
                                    dict(participation="cyclic", fraction=1.0)])
def test_a_fraction_that_draws_every_client_runs_as_full_participation(small, kwargs):
    """round(0.9 x 4) = 4 clients, or one cyclic subset: every client in every round, so
    ADMM runs, with the bits of full participation (it was refused for f < 1)."""
    fed = P.hybrid_grid(*small, 2, 2)
    full = BlockSplittingADMM(fed)
    drawn = BlockSplittingADMM(fed, **kwargs)
    for _ in range(3):
        full.step()
        drawn.step()
    np.testing.assert_array_equal(full.w, drawn.w)


def test_round_record_and_bad_rho(small):
    fed = P.hybrid_grid(*small, 2, 2)
    method = BlockSplittingADMM(fed)
    record = method.step()
    assert record["rtc"] == 1 and record["available"] == 4 and record["bytes_up"] > 0
    assert record["compute_ops"] == max(p.ops + ids.size for p, ids in
                                        zip(method.projectors, method.prox_samples))
    for rho in (0.0, float("inf")):
        with pytest.raises(ValueError, match=f"rho must be a positive finite number, got {rho!r}"):
            BlockSplittingADMM(fed, rho=rho)


def test_same_seed_same_bits(small):
    X, y = small
    runs = []
    for _ in range(2):
        method = BlockSplittingADMM(layouts(X, y)["2x2"], loss="logistic", lam=LAM, seed=4)
        for _ in range(30):
            method.step()
        runs.append(method.w.copy())
    assert np.array_equal(runs[0], runs[1])
