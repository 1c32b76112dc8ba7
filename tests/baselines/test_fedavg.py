"""FedAvg and HyFEM-linear: the SGD kernel against a plain loop, the server's averaging,
participation, and the errors."""

import numpy as np
import pytest

from baselines._base import run_baseline
from baselines._local_sgd import local_sgd
from baselines._server_average import add_weighted, divide_covered
from baselines.fedavg import FedAvg, HyFEMLinear
from feddata import partition as P
from solvers import LOSS_CODES, as_csr, loss_code
from solvers._losses import loss_derivative

LAM = 0.05


@pytest.fixture(scope="module")
def small(cancer):
    X, y = cancer
    return X[:120], y[:120]


def reference_sgd(X, y, anchor, order, a, b, t0, lam, mu, code, smoothing=1.0):
    """The update of the kernel's docstring, on a dense w."""
    X = as_csr(X).toarray()
    w = anchor.copy()
    for t, i in enumerate(order):
        eta = a / (b + t0 + t)
        g = loss_derivative(code, X[i] @ w, y[i], smoothing)
        w = w - eta * (g * X[i] + lam * w + mu * (w - anchor))
    return w


@pytest.mark.parametrize("loss", sorted(LOSS_CODES))
@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_kernel_matches_the_plain_sgd_loop(sparse_binary, loss, mu):
    X, y = sparse_binary
    X = as_csr(X)
    rng = np.random.default_rng(0)
    anchor = rng.normal(scale=0.1, size=X.shape[1])
    order = rng.integers(0, X.shape[0], size=500)
    args = (order, 0.5, 5.0, 7.0, LAM, mu, loss_code(loss), 1.0)
    fast = local_sgd(X.data, X.indices, X.indptr, y, anchor, *args)
    np.testing.assert_allclose(fast, reference_sgd(X, y, anchor, *args), rtol=1e-10,
                               atol=1e-12)


def test_kernel_survives_many_shrinking_steps(sparse_binary):
    """s shrinks by (1 - eta lam) per step; the kernel folds it into v before it underflows."""
    X, y = sparse_binary
    X = as_csr(X)
    order = np.random.default_rng(1).integers(0, X.shape[0], size=4000)
    args = (order, 1.0, 1.1, 0.0, 0.9, 0.0, loss_code("squared"), 1.0)
    fast = local_sgd(X.data, X.indices, X.indptr, y, np.zeros(X.shape[1]), *args)
    reference = reference_sgd(X, y, np.zeros(X.shape[1]), *args)
    assert np.all(np.isfinite(fast))
    np.testing.assert_allclose(fast, reference, rtol=1e-8, atol=1e-12)


def test_one_client_is_plain_sgd_round_after_round(small):
    X, y = small
    fed = P.horizontal(X, y, 1)
    method = FedAvg(fed, lam=LAM, iic=0.25, a=0.5, b=4.0, seed=3)
    w = np.zeros(X.shape[1])
    for r in range(3):
        method.step()
        order = np.random.default_rng((3, 3, 0, r)).integers(0, X.shape[0], size=30)
        w = reference_sgd(X, y, w, order, 0.5, 4.0, 30.0 * r, LAM, 0.0, loss_code("hinge"))
        np.testing.assert_allclose(method.w, w, rtol=1e-10, atol=1e-12)


def test_server_averages_client_models_where_they_overlap(small):
    X, y = small
    fed = P.from_blocks(X, y, [(range(0, 40), range(0, 20)), (range(40, 120), range(0, 30)),
                               (range(0, 40), range(20, 30))])
    method = FedAvg(fed, lam=LAM, iic=0.5, a=0.5, b=4.0, seed=1)
    locals_ = []
    for k, block in enumerate(fed.blocks):
        H = method.H[k]
        order = np.random.default_rng((1, 3, k, 0)).integers(0, block.X.shape[0], size=H)
        locals_.append(reference_sgd(block.X, block.y, np.zeros(block.X.shape[1]), order,
                                     0.5, 4.0, 0.0, LAM, 0.0, loss_code("hinge")))
    method.step()
    n = [block.X.shape[0] for block in fed.blocks]   # 40, 80, 40
    expected = np.zeros(30)
    expected[:20] = (n[0] * locals_[0] + n[1] * locals_[1][:20]) / (n[0] + n[1])
    expected[20:] = (n[1] * locals_[1][20:] + n[2] * locals_[2]) / (n[1] + n[2])
    np.testing.assert_allclose(method.w, expected, rtol=1e-10, atol=1e-12)


def test_the_averaging_kernels_give_the_bits_of_the_numpy_form():
    """add_weighted and divide_covered against ``total[J] += c w_k; weight[J] += c`` and
    ``w[covered] = total[covered] / weight[covered]``, over overlapping clients with
    unequal weights and features no client holds."""
    rng = np.random.default_rng(4)
    d = 500
    w_fast = rng.normal(size=d)
    w_numpy = w_fast.copy()
    total, weight = np.zeros(d), np.zeros(d)
    total_np, weight_np = np.zeros(d), np.zeros(d)
    for _ in range(7):
        J = np.sort(rng.choice(d - 50, size=rng.integers(1, 300), replace=False))
        w_k, c_k = rng.normal(size=J.size) * 10.0 ** rng.integers(-8, 8), rng.uniform(0.1, 9)
        add_weighted(total, weight, J, w_k, c_k)
        total_np[J] += c_k * w_k
        weight_np[J] += c_k
    divide_covered(w_fast, total, weight)
    covered = weight_np > 0
    w_numpy[covered] = total_np[covered] / weight_np[covered]
    assert np.array_equal(total, total_np) and np.array_equal(weight, weight_np)
    assert np.array_equal(w_fast, w_numpy) and not covered[-50:].any()


def test_features_of_absent_clients_keep_their_value(small):
    X, y = small
    fed = P.vertical(X, y, 2)
    method = FedAvg(fed, lam=LAM, iic=0.2, participation="cyclic", fraction=0.5, seed=0)
    method.step()
    present = method.participation.cycles[0]
    absent = fed.blocks[1 - present[0]].feature_ids
    assert np.all(method.w[absent] == 0.0)
    assert np.any(method.w[fed.blocks[present[0]].feature_ids] != 0.0)


def test_hyfem_without_matching_weight_is_fedavg_with_equal_weights(small):
    X, y = small
    fed = P.horizontal(X, y, 3)          # equal blocks: |I_k| weights = 1/M weights
    fedavg = FedAvg(fed, lam=LAM, iic=0.3, seed=2)
    hyfem = HyFEMLinear(fed, lam=LAM, iic=0.3, mu=1e-12, seed=2)
    for _ in range(3):
        fedavg.step()
        hyfem.step()
    np.testing.assert_allclose(hyfem.w, fedavg.w, rtol=1e-9, atol=1e-12)


def test_matching_weight_pulls_clients_to_the_server_model(small):
    X, y = small
    fed = P.hybrid_grid(X, y, 2, 2)
    moves = []
    for mu in (0.1, 5.0):
        method = HyFEMLinear(fed, lam=LAM, iic=0.5, a=0.1, b=10.0, mu=mu, seed=0)
        method.step()
        before = method.w.copy()
        method.step()
        moves.append(np.linalg.norm(method.w - before))
    assert moves[1] < moves[0]


def test_fedavg_reduces_the_objective_on_a_horizontal_split(small):
    X, y = small
    history = run_baseline(FedAvg(P.horizontal(X, y, 3), lam=LAM, iic=0.5, seed=0),
                           max_rounds=30, eval_every=10)
    primal = [history.evaluations[r]["primal"] for r in sorted(history.evaluations)]
    assert primal[-1] < 0.6 * primal[0]
    assert np.isnan(history.last_evaluation["gap"])     # no certificate for baselines
    assert [r["rtc"] for r in history.rounds] == [1] * 30


@pytest.mark.parametrize("kwargs, message", [
    (dict(a=5.0, b=1.0, lam=0.5), "step too large"),
    (dict(iic=0.0), "iic must be a positive finite number, got 0.0"),
    (dict(lam=-1.0), "lam must be a positive finite number, got -1.0"),
    (dict(b=float("inf")), "b must be a positive finite number, got inf"),
    (dict(iic=float("inf"), a=float("nan")), "iic must be a positive finite number, got inf"),
    (dict(smoothing=0.0), "smoothing must be a positive finite number, got 0.0"),
    (dict(smoothing=-1.0, loss="smoothed_hinge"), "smoothing must be a positive finite"),
    (dict(seed=1.7), "seed must be a whole number >= 0, got 1.7"),
    (dict(seed=-1), "seed must be a whole number >= 0, got -1"),
    (dict(participation="some"), "participation must be one of"),
])
def test_bad_settings_are_named(small, kwargs, message):
    with pytest.raises(ValueError, match=message):
        FedAvg(P.horizontal(*small, 2), **kwargs)


@pytest.mark.parametrize("method", ["FedAvg", "HyFEMLinear", "D3CA", "BlockSplittingADMM"])
def test_every_convex_baseline_refuses_what_hyfdca_refuses(small, method):
    """Labels other than -1/+1 under a classification loss (0/1 labels would make every
    margin y z of a 0 label 0: another problem, solved silently), and run arguments that
    are not whole numbers or a validation set of another width (its accuracy would read
    part of w)."""
    import baselines

    X, y = small
    cls = getattr(baselines, method)
    with pytest.raises(ValueError, match=r"loss 'hinge' needs labels -1 and \+1, .* labels "
                                         r"found: 0, 1"):
        cls(P.hybrid_grid(X, (y + 1) / 2, 2, 2), lam=LAM)
    cls(P.hybrid_grid(X, (y + 1) / 2, 2, 2), lam=LAM, loss="squared")  # any target
    fed = P.hybrid_grid(X, y, 2, 2)
    for kwargs, message in ((dict(eval_every=0), "eval_every must be a whole number >= 1"),
                            (dict(max_rounds=2.5), "max_rounds must be a whole number >= 0"),
                            (dict(validation=(X[:, :20], y)), "the validation set has 20 "
                                                               "features, the training data"),
                            (dict(validation=(X, (y + 1) / 2)),
                             r"the validation set: loss 'hinge' needs labels -1 and \+1"),
                            (dict(validation=(X, y[:-1])), "the validation labels has")):
        with pytest.raises(ValueError, match=message):
            run_baseline(cls(fed, lam=LAM), **kwargs)

