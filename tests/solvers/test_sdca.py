"""Centralized SDCA: kernel against a pure-Python reference, optimality, errors."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from solvers import as_csr, coordinate_step, encode_targets, loss_code, objectives
from solvers import reference_optimum, sdca
from solvers._sdca import epoch_order
from solvers._sdca_kernels import sdca_pass

LAM = 1e-2


def python_sdca_pass(X, Y, alpha, W, order, loss, lam, sigma=1.0, smoothing=1.0):
    """Reference: the SDCA epoch written plainly over a dense X."""
    Xd = X.toarray()
    n = Xd.shape[0]
    for i in order:
        s = sigma * Xd[i] @ Xd[i] / (lam * n)
        for c in range(Y.shape[1]):
            z = Xd[i] @ W[:, c]
            d = coordinate_step(loss_code(loss), alpha[i, c], z, Y[i, c], s, smoothing)
            alpha[i, c] += d
            W[:, c] += d * Xd[i] / (lam * n)


@pytest.mark.parametrize("loss", ["hinge", "smoothed_hinge", "squared_hinge", "logistic",
                                  "squared"])
def test_kernel_matches_python_reference(sparse_binary, loss):
    X, y = sparse_binary
    X = as_csr(X)
    Y, _ = encode_targets(y, loss)
    n = X.shape[0]
    rng = np.random.default_rng(3)
    order = np.concatenate([epoch_order(rng, n, "permuted"), epoch_order(rng, n, "random")])
    a_ref, W_ref = np.zeros_like(Y), np.zeros((X.shape[1], 1))
    python_sdca_pass(X, Y, a_ref, W_ref, order, loss, LAM)
    alpha, W = np.zeros_like(Y), np.zeros((X.shape[1], 1))
    q = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    sdca_pass(X.data, X.indices, X.indptr, Y, alpha, W, q, order, loss_code(loss), LAM * n,
              1.0, 1.0)
    np.testing.assert_allclose(alpha, a_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(W, W_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "logistic", "squared"])
@pytest.mark.parametrize("data", ["cancer", "sparse_binary"])
def test_reaches_tiny_gap_and_matches_sklearn(loss, data, request):
    X, y = request.getfixturevalue(data)
    result = sdca(X, y, loss=loss, lam=LAM, tol=1e-8, max_epochs=5000)
    assert result.converged and result.gap <= 1e-8
    p_star, _ = reference_optimum(X, y, loss=loss, lam=LAM)
    assert result.history["primal"][-1] == pytest.approx(p_star, rel=1e-6)
    assert min(result.history["gap"]) >= -1e-12  # weak duality


def test_smoothed_hinge_converges(cancer):
    X, y = cancer
    result = sdca(X, y, loss="smoothed_hinge", lam=LAM, tol=1e-9, smoothing=0.5)
    assert result.gap <= 1e-9


def test_multiclass_one_vs_rest_matches_per_class_runs(digits_small):
    X, y = digits_small
    result = sdca(X, y, loss="hinge", lam=LAM, tol=1e-8, max_epochs=3000)
    assert result.coef.shape == (X.shape[1], 10) and result.dual_coef.shape == (400, 10)
    np.testing.assert_array_equal(result.classes, np.arange(10))
    p_star, _ = reference_optimum(X, y, loss="hinge", lam=LAM)
    assert result.history["primal"][-1] == pytest.approx(p_star, rel=1e-6)
    single = sdca(X, np.where(y == 3, 1.0, -1.0), loss="hinge", lam=LAM, tol=1e-10,
                  max_epochs=5000)
    np.testing.assert_allclose(result.coef[:, 3], single.coef, atol=1e-4)


@pytest.mark.parametrize("loss", ["hinge", "logistic", "squared"])
def test_fenchel_young_equality_at_the_optimum(cancer, loss):
    """At the optimum -alpha_i is a subgradient of l at z_i: l(z) + l*(-a) = -a z."""
    X, y = cancer
    result = sdca(X, y, loss=loss, lam=LAM, tol=1e-11, max_epochs=20000)
    from solvers import loss_value, neg_conjugate
    code = loss_code(loss)
    z = X @ result.coef
    a = result.dual_coef
    slack = np.array([loss_value(code, z[i], y[i], 1.0) - neg_conjugate(code, a[i], y[i], 1.0)
                      + a[i] * z[i] for i in range(len(y))])
    assert slack.min() >= -1e-9                     # Fenchel-Young inequality
    assert slack.max() <= len(y) * 1e-11 + 1e-9     # equality, sum of slacks is N * gap
    assert slack.sum() / len(y) == pytest.approx(result.gap, abs=1e-12)


def test_primal_dual_map_invariant(sparse_binary):
    X, y = sparse_binary
    with pytest.warns(ConvergenceWarning):
        result = sdca(X, y, loss="hinge", lam=LAM, max_epochs=7, tol=0.0, order="random")
    w = X.T @ result.dual_coef / (LAM * X.shape[0])
    np.testing.assert_allclose(result.coef, w, atol=1e-12)


def test_same_seed_same_bits_and_seed_matters(sparse_binary):
    X, y = sparse_binary
    kw = dict(loss="logistic", lam=LAM, max_epochs=3, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a, b, c = sdca(X, y, random_state=5, **kw), sdca(X, y, random_state=5, **kw), \
            sdca(X, y, random_state=6, **kw)
    assert np.array_equal(a.coef, b.coef) and a.history == b.history
    assert not np.array_equal(a.coef, c.coef)


def test_dense_and_sparse_inputs_agree(cancer):
    X, y = cancer
    dense = sdca(X, y, lam=LAM, tol=1e-6)
    sparse = sdca(sp.csr_matrix(X), y, lam=LAM, tol=1e-6)
    np.testing.assert_array_equal(dense.coef, sparse.coef)


def test_convergence_warning_when_budget_runs_out(cancer):
    X, y = cancer
    with pytest.warns(ConvergenceWarning, match="raise max_epochs"):
        result = sdca(X, y, lam=1e-5, tol=1e-12, max_epochs=2)
    assert not result.converged and result.n_epochs == 2


def test_objectives_match_definition(cancer):
    X, y = cancer
    result = sdca(X, y, loss="squared", lam=LAM, tol=1e-3)
    Xc = as_csr(X)
    primal, dual = objectives(Xc, y.reshape(-1, 1), result.coef.reshape(-1, 1).copy(),
                              result.dual_coef.reshape(-1, 1).copy(), loss="squared", lam=LAM)
    w, a = result.coef, result.dual_coef
    expected_p = LAM / 2 * w @ w + np.mean(0.5 * (X @ w - y) ** 2)
    expected_d = -LAM / 2 * w @ w + np.mean(a * y - 0.5 * a**2)
    assert primal[0] == pytest.approx(expected_p, rel=1e-12)
    assert dual[0] == pytest.approx(expected_d, rel=1e-12)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, np.nan, X), y),
         "X contains 1 NaN"),
        (lambda X, y: (X, y[:-1]), "y has 568 entries but X has 569 samples"),
        (lambda X, y: (X, np.ones_like(y)), "at least 2 classes"),
        (lambda X, y: (X[0], y), "X must be 2-D"),
        (lambda X, y: (X, np.where(y > 0, np.inf, y)), "y contains"),
    ],
)
def test_bad_input_errors_name_the_problem(cancer, mutate, message):
    X, y = mutate(*cancer)
    with pytest.raises(ValueError, match=message):
        sdca(X, y)


@pytest.mark.parametrize("kwargs, message", [
    (dict(lam=0.0), "lam must be a positive"),
    (dict(order="cyclic"), "unknown order 'cyclic'"),
    (dict(loss="hinge2"), "unknown loss"),
    (dict(eval_every=0), "eval_every must be >= 1"),
])
def test_bad_parameters_are_named(cancer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sdca(*cancer, **kwargs)
