"""The centralized reference solvers: ridge's closed form in both spaces."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import ridge_closed_form


@pytest.mark.parametrize("shape", [(60, 8), (8, 60)])
def test_ridge_closed_form_solves_the_normal_equations(shape):
    """Both spaces (d <= N and d > N) give the w of (X^T X / N + lam I) w = X^T y / N."""
    rng = np.random.default_rng(0)
    X = sp.random(*shape, density=0.5, random_state=rng, format="csr")
    y, lam, n = rng.normal(size=shape[0]), 1e-2, shape[0]
    Xd = X.toarray()
    expected = np.linalg.solve(Xd.T @ Xd / n + lam * np.eye(shape[1]), Xd.T @ y / n)
    np.testing.assert_allclose(ridge_closed_form(X, y, lam), expected, rtol=1e-9, atol=1e-12)


def test_ridge_on_a_wide_sparse_matrix_never_densifies_it():
    """40 samples x 1,000,000 features, 400 non-zeros (5 KB): X dense would be 320 MB;
    the solve needs the 40 x 40 Gram matrix and vectors of d values."""
    rng = np.random.default_rng(1)
    X = sp.random(40, 1_000_000, density=1e-5, random_state=rng, format="csr")
    y = rng.normal(size=40)
    tracemalloc.start()
    try:
        w = ridge_closed_form(X, y, 1e-3)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64e6
    residual = X.T @ (X @ w - y) / 40 + 1e-3 * w       # the gradient at the optimum
    assert np.max(np.abs(residual)) < 1e-10


def test_an_unconverged_reference_optimum_says_so(cancer):
    """liblinear stopped at max_iter: P* may lie above the optimum, so the reference
    warns (it used to silence scikit-learn's warning and return P* as if exact)."""
    from sklearn.exceptions import ConvergenceWarning

    from solvers import reference_optimum

    X, y = cancer
    with pytest.warns(ConvergenceWarning, match="the reference optimum did not converge"):
        reference_optimum(X, y, loss="hinge", lam=1e-5, max_iter=30)


def test_the_cached_optimum_takes_any_two_class_labels(cancer, tmp_path):
    """The cache names a problem by the targets as the solvers read them: string labels
    work, and 0/1 labels share the +-1 problem's file."""
    from solvers import centralized_solution

    X, y = cancer[0][:80], cancer[1][:80]
    words = np.where(y > 0, "spam", "ham")
    first = centralized_solution(X, words, loss="hinge", lam=1e-2, cache_dir=tmp_path)
    again = centralized_solution(X, (y > 0).astype(int), loss="hinge", lam=1e-2,
                                 cache_dir=tmp_path)
    assert len(list(tmp_path.glob("optimum-*.npz"))) == 1
    assert first[0] == again[0]
