"""Centralized SDCA: kernel against a pure-Python reference, optimality, errors."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from solvers import as_csr, coordinate_step, encode_targets, loss_code, objectives
from solvers import centralized_solution, reference_optimum, sdca
from solvers._sdca import ShrinkingHinge, epoch_order, frequency_order, shrinking_seeds
from solvers.kernels import (
    hinge_pass_binary,
    hinge_shrinking_epochs,
    hinge_steps,
    row_sq_norms,
    sdca_pass,
    shuffle_prefix,
)

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
    (dict(eval_every=0), "eval_every must be a whole number >= 1, got 0"),
    (dict(eval_every=1.5), "eval_every must be a whole number >= 1, got 1.5"),
    (dict(max_epochs=-3), "max_epochs must be a whole number >= 0, got -3"),
    (dict(max_epochs=2.5), "max_epochs must be a whole number >= 0, got 2.5"),
    (dict(tol=float("nan")), "tol must be a finite number >= 0, got nan"),
    (dict(tol="1e-3"), "tol must be a finite number >= 0, got '1e-3'"),
    (dict(dual_init=np.full(569, np.nan)), "dual_init contains 569 NaN"),
    (dict(dual_init=np.zeros(10)), r"dual_init has shape \(10,\); this problem's alpha has "
                                   r"shape \(569,\)"),
    (dict(dual_init=np.full(569, 5.0)), r"dual_init lies outside the domain of loss 'hinge' "
                                        r"at 569 sample\(s\)"),
])
def test_bad_parameters_are_named(cancer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sdca(*cancer, **kwargs)


def test_a_warm_start_is_read_never_written(cancer):
    """dual_init is copied: the caller's array keeps its values, and two runs from the
    same warm start give the same bits."""
    X, y = cancer
    start = np.zeros(X.shape[0])
    first = sdca(X, y, lam=1e-2, max_epochs=3, dual_init=start)
    assert not start.any() and first.dual_coef is not start
    again = sdca(X, y, lam=1e-2, max_epochs=3, dual_init=start)
    np.testing.assert_array_equal(first.coef, again.coef)
    y3 = np.digitize(X[:, 0], [-0.5, 0.5]).astype(float)   # 3 classes: alpha is (N, C)
    with pytest.raises(ValueError, match=r"dual_init has shape \(3, 569\)"):
        sdca(X, y3, dual_init=np.zeros((3, 569)))


def test_the_primal_objective_checks_what_it_is_given(cancer):
    """The kernel reads w and y without bounds checks: their shapes are checked first."""
    from solvers import primal_objective

    X, y = cancer
    with pytest.raises(ValueError, match=r"w has shape \(29,\), X has 30 features"):
        primal_objective(X, y, np.ones(29), loss="squared", lam=1e-2)
    with pytest.raises(ValueError, match="y has 5 entries but X has 569 samples"):
        primal_objective(X, y[:5], np.ones(30), loss="squared", lam=1e-2)
    with pytest.raises(ValueError, match="needs labels -1 and \\+1"):
        primal_objective(X, (y > 0).astype(float), np.zeros(30), loss="hinge", lam=1e-2)
    with pytest.raises(ValueError, match="lam must be a positive"):
        primal_objective(X, y, np.ones(30), loss="hinge", lam=-1)


# --------------------------------------------------------------------------- binary hinge


def _hinge_state(X, y):
    X = as_csr(X)
    Y, _ = encode_targets(y, "hinge")
    return X, Y, row_sq_norms(X.data, X.indptr)


@pytest.mark.parametrize("data", ["cancer", "sparse_binary"])
@pytest.mark.parametrize("sigma", [1.0, 0.7])
def test_binary_hinge_kernel_takes_sdca_pass_steps_bit_for_bit(data, sigma, request):
    X, Y, q = _hinge_state(*request.getfixturevalue(data))
    n, d = X.shape
    lam_n = 1e-3 * n
    rng = np.random.default_rng(11)
    alpha, W = np.zeros((n, 1)), np.zeros((d, 1))
    a, w = np.zeros(n), np.zeros(d)
    for epoch in range(30):
        order = epoch_order(rng, n, "permuted" if epoch % 2 else "random")
        sdca_pass(X.data, X.indices, X.indptr, Y, alpha, W, q, order, loss_code("hinge"),
                  lam_n, sigma, 1.0)
        hinge_pass_binary(X.data, X.indices, X.indptr, Y[:, 0].copy(), a, w, q, order, lam_n,
                          sigma)
        assert np.array_equal(a, alpha[:, 0]) and np.array_equal(w, W[:, 0]), epoch
    assert np.count_nonzero(a) > 0


def test_default_binary_hinge_path_equals_generic_kernel_loop(sparse_binary):
    """sdca(shrinking=False) on binary hinge takes exactly sdca_pass's steps (HyFDCA's
    exactness against the centralized solver relies on it)."""
    X, y = sparse_binary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = sdca(X, y, loss="hinge", lam=LAM, tol=0.0, max_epochs=25, random_state=4)
    Xc, Y, q = _hinge_state(X, y)
    alpha, W = np.zeros_like(Y), np.zeros((X.shape[1], 1))
    rng = np.random.default_rng(4)
    for _ in range(25):
        sdca_pass(Xc.data, Xc.indices, Xc.indptr, Y, alpha, W, q,
                  epoch_order(rng, X.shape[0], "permuted"), loss_code("hinge"),
                  LAM * X.shape[0], 1.0, 1.0)
    assert np.array_equal(result.dual_coef, alpha[:, 0])
    assert np.array_equal(result.coef, W[:, 0])


def test_empty_row_takes_the_exact_maximiser(sparse_binary):
    X, y = sparse_binary
    X = sp.vstack([sp.csr_matrix((1, X.shape[1])), X]).tocsr()
    y = np.concatenate([[1.0], y])
    result = sdca(X, y, loss="hinge", lam=LAM, tol=1e-8, max_epochs=5000, shrinking=True)
    assert result.converged and result.dual_coef[0] == 1.0


def python_shrinking_epoch(X, y, alpha, w, q, lam_n, index, bounds, active, rng_state, eps):
    """Reference: one pass of liblinear's shrinking, written plainly (the shuffle reuses
    the kernel's generator so both visit the same samples)."""
    n = len(y)
    size = int(active[0])
    shuffle_prefix(index, size, rng_state)
    pg_max, pg_min = -np.inf, np.inf
    t = 0
    while t < size:
        i = index[t]
        row = X[i]
        g = y[i] * (row.data @ w[row.indices]) - 1.0
        beta = alpha[i] * y[i]
        shrink = (beta == 0.0 and g > bounds[0]) or (beta == 1.0 and g < bounds[1])
        if shrink:
            size -= 1
            index[t], index[size] = index[size], index[t]
            continue
        pg = min(g, 0.0) if beta == 0.0 else max(g, 0.0) if beta == 1.0 else g
        pg_max, pg_min = max(pg_max, pg), min(pg_min, pg)
        t += 1
        if abs(pg) > 1e-12:
            a_new = y[i] * min(max(beta - g * lam_n / q[i], 0.0), 1.0)
            w[row.indices] += row.data * ((a_new - alpha[i]) / lam_n)
            alpha[i] = a_new
    if pg_max - pg_min <= eps:
        active[0], bounds[:] = n, (np.inf, -np.inf)
        return size == n
    active[0] = size
    bounds[:] = (pg_max if pg_max > 0 else np.inf, pg_min if pg_min < 0 else -np.inf)
    return False


def test_shrinking_kernel_matches_python_reference(sparse_binary):
    X, Y, q = _hinge_state(*sparse_binary)
    y = Y[:, 0].copy()
    n, d = X.shape
    lam_n = LAM * n
    states = []
    for _ in range(2):
        states.append(dict(alpha=np.zeros(n), w=np.zeros(d),
                           index=np.arange(n, dtype=np.int64),
                           bounds=np.array([np.inf, -np.inf]),
                           active=np.array([n], dtype=np.int64),
                           rng_state=np.array([12345], dtype=np.uint64)))
    ref, fast = states
    sizes, flags = [], []
    eps = 1e-2
    for _ in range(60):
        flag_ref = python_shrinking_epoch(X, y, q=q, lam_n=lam_n, eps=eps, **ref)
        done, flag = hinge_shrinking_epochs(X.data, X.indices, X.indptr, y, fast["alpha"],
                                            fast["w"], hinge_steps(q, lam_n, 1.0), lam_n,
                                            fast["index"], fast["bounds"], fast["active"],
                                            fast["rng_state"], 1, eps)
        assert done == 1 and flag == flag_ref
        np.testing.assert_array_equal(fast["index"], ref["index"])
        np.testing.assert_allclose(fast["alpha"], ref["alpha"], rtol=0, atol=1e-13)
        np.testing.assert_allclose(fast["w"], ref["w"], rtol=1e-12, atol=1e-13)
        sizes.append(int(fast["active"][0]))
        flags.append(flag)
    assert min(sizes) < n / 2          # shrinking took place
    assert any(flags)                  # and a pass over all samples converged within eps


def test_shuffle_prefix_permutes_only_the_prefix_reproducibly():
    index = np.arange(1000, dtype=np.int64)
    state = np.array([7], dtype=np.uint64)
    shuffle_prefix(index, 600, state)
    assert sorted(index[:600]) == list(range(600))
    assert np.array_equal(index[600:], np.arange(600, 1000))
    assert not np.array_equal(index[:600], np.arange(600))
    again = np.arange(1000, dtype=np.int64)
    shuffle_prefix(again, 600, np.array([7], dtype=np.uint64))
    assert np.array_equal(index, again)


@pytest.mark.parametrize("data", ["cancer", "sparse_binary"])
@pytest.mark.parametrize("lam", [LAM, 1e-4])
def test_shrinking_reaches_tiny_gap_and_matches_sklearn(data, lam, request):
    X, y = request.getfixturevalue(data)
    result = sdca(X, y, loss="hinge", lam=lam, tol=1e-8, max_epochs=20000, shrinking=True)
    assert result.converged and result.gap <= 1e-8
    p_star, _ = reference_optimum(X, y, loss="hinge", lam=lam)
    assert result.history["primal"][-1] == pytest.approx(p_star, rel=1e-6)
    assert min(result.history["gap"]) >= -1e-12
    w = X.T @ result.dual_coef / (lam * X.shape[0])
    np.testing.assert_allclose(result.coef, w, atol=1e-12)
    beta = result.dual_coef * y
    assert beta.min() >= 0.0 and beta.max() <= 1.0


def test_shrinking_multiclass_matches_sklearn(digits_small):
    X, y = digits_small
    result = sdca(X, y, loss="hinge", lam=LAM, tol=1e-8, max_epochs=20000, shrinking=True)
    assert result.converged and result.coef.shape == (X.shape[1], 10)
    p_star, _ = reference_optimum(X, y, loss="hinge", lam=LAM)
    assert result.history["primal"][-1] == pytest.approx(p_star, rel=1e-6)


def test_shrinking_same_seed_same_bits_and_seed_matters(sparse_binary):
    X, y = sparse_binary
    kw = dict(loss="hinge", lam=1e-3, max_epochs=15, tol=0.0, shrinking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a, b, c = (sdca(X, y, random_state=s, **kw) for s in (5, 5, 6))
    assert np.array_equal(a.coef, b.coef) and np.array_equal(a.dual_coef, b.dual_coef)
    assert a.history == b.history
    assert not np.array_equal(a.coef, c.coef)
    assert np.array_equal(shrinking_seeds(5, 3), shrinking_seeds(5, 3))


def test_column_renumbering_changes_no_bit(sparse_binary, monkeypatch):
    X, y = sparse_binary
    kw = dict(loss="hinge", lam=1e-3, max_epochs=40, tol=0.0, shrinking=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = sdca(X, y, **kw)
        monkeypatch.setattr(ShrinkingHinge, "REORDER_MIN_FEATURES", 1)
        renumbered = sdca(X, y, **kw)
    assert np.array_equal(plain.coef, renumbered.coef)
    assert np.array_equal(plain.dual_coef, renumbered.dual_coef)
    assert plain.history == renumbered.history


def test_frequency_order_puts_frequent_columns_first(sparse_binary):
    X = as_csr(sparse_binary[0])
    perm, indices = frequency_order(X.indices, X.shape[1])
    counts = np.bincount(X.indices, minlength=X.shape[1])
    assert sorted(perm) == list(range(X.shape[1]))
    assert np.all(np.diff(counts[perm]) <= 0)
    assert indices.dtype == np.int32 and np.array_equal(perm[indices], X.indices)


def test_shrinking_solver_shrinks_the_active_set(cancer):
    X, Y, q = _hinge_state(*cancer)
    n, d = X.shape
    solver = ShrinkingHinge(X, Y[:, 0].copy(), np.zeros(n), np.zeros(d), q, LAM * n, 1.0,
                            shrinking_seeds(0, 1)[0])
    solver.run(10)
    assert solver.n_active < n / 2


@pytest.mark.parametrize("kwargs, message", [
    (dict(loss="logistic", shrinking=True), "shrinking=True needs loss='hinge'"),
    (dict(order="random", shrinking=True), "order='random' is not supported"),
])
def test_shrinking_bad_combinations_are_named(cancer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sdca(*cancer, **kwargs)


def test_cached_optimum_is_the_solved_one_and_the_key_covers_the_problem(sparse_binary,
                                                                          tmp_path,
                                                                          monkeypatch):
    """A cache hit gives the solved bits without solving; any change of the problem (one
    label, lam, the loss) misses."""
    import solvers._reference as reference

    X, y = sparse_binary
    solved = centralized_solution(X, y, loss="hinge", lam=LAM)
    first = centralized_solution(X, y, loss="hinge", lam=LAM, cache_dir=tmp_path)
    assert first[0] == solved[0] and np.array_equal(first[1], solved[1])
    assert len(list(tmp_path.glob("optimum-*.npz"))) == 1

    def no_solving(*args):
        raise AssertionError("solved again although the answer is cached")

    monkeypatch.setattr(reference, "_solve", no_solving)
    again = centralized_solution(X, y, loss="hinge", lam=LAM, cache_dir=tmp_path)
    assert again[0] == solved[0] and np.array_equal(again[1], solved[1])
    flipped = np.array(y, dtype=np.float64)
    flipped[0] = -flipped[0]
    for changed in (dict(X=X, y=flipped, loss="hinge", lam=LAM),
                    dict(X=X, y=y, loss="hinge", lam=2 * LAM),
                    dict(X=X, y=y, loss="logistic", lam=LAM)):
        with pytest.raises(AssertionError, match="solved again"):
            centralized_solution(changed.pop("X"), changed.pop("y"), cache_dir=tmp_path,
                                 **changed)
