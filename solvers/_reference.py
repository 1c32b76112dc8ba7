"""Reference optima from scikit-learn, to give P* for relative loss (P - P*) / P*.

Each reference solves the same problem as :func:`solvers.sdca` with C = 1 / (lam N) and no
intercept: liblinear's dual coordinate descent (LinearSVC) for hinge and squared hinge,
LogisticRegression (L-BFGS) for logistic, and the closed form for ridge. One-vs-rest
problems are solved one by one and their objectives summed, as SDCA sums them.
"""

import hashlib
import os
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from solvers._sdca import encode_targets, objectives, sdca
from solvers._validation import as_csr, check_labels, check_positive

REFERENCE_LOSSES = ("hinge", "squared_hinge", "logistic", "squared")


def _fit_one(X, y, loss, lam, tol, max_iter):
    # imported on use, not with the module (docs/architecture.md)
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    n = X.shape[0]
    C = 1.0 / (lam * n)
    if loss in ("hinge", "squared_hinge"):
        # liblinear shuffles its coordinates: seeded, so that P* is the same bits every time
        model = LinearSVC(loss=loss, dual=True, C=C, fit_intercept=False, tol=tol,
                          max_iter=max_iter, random_state=0)
        return model.fit(X, y).coef_.ravel()
    if loss == "logistic":
        model = LogisticRegression(C=C, fit_intercept=False, tol=tol, max_iter=max_iter)
        return model.fit(X, y).coef_.ravel()
    return ridge_closed_form(X, y, lam)


def ridge_closed_form(X, y, lam):
    """argmin (lam/2)||w||^2 + (1/2N)||Xw - y||^2.

    Solved in the smaller of the two spaces: (X^T X / N + lam I) w = X^T y / N when d <= N,
    else w = X^T a / (lam N) with (X X^T / (lam N) + I) a = y.
    """
    n, d = X.shape
    if min(n, d) <= 5000:   # the Gram matrix of the smaller side, dense; X stays sparse
        if d <= n:
            gram = _dense(X.T @ X)
            return np.linalg.solve(gram / n + lam * np.eye(d), X.T @ y / n)
        a = np.linalg.solve(_dense(X @ X.T) / (lam * n) + np.eye(n), y)
        return X.T @ a / (lam * n)
    op = spla.LinearOperator((d, d), matvec=lambda v: X.T @ (X @ v) / n + lam * v)
    w, info = spla.cg(op, X.T @ y / n, rtol=1e-12, maxiter=10 * d)
    if info != 0:
        raise RuntimeError(f"conjugate gradients did not converge for ridge (info={info})")
    return w


def _dense(matrix):
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def reference_optimum(X, y, *, loss="hinge", lam=1e-4, tol=1e-10, max_iter=1_000_000):
    """(P*, W*) from scikit-learn for the problem :func:`solvers.sdca` solves.

    P* is summed over one-vs-rest problems; W* is (d,) or (d, C).
    """
    if loss not in REFERENCE_LOSSES:
        raise ValueError(
            f"no scikit-learn reference for loss {loss!r}; available: {REFERENCE_LOSSES}"
        )
    X = as_csr(X)
    y = check_labels(y, X.shape[0])
    lam = check_positive(lam, "lam")
    Y, _ = encode_targets(y, loss)
    # imported on use, not with the module (docs/architecture.md)
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        W = np.column_stack([_fit_one(X, Y[:, c], loss, lam, tol, max_iter)
                             for c in range(Y.shape[1])])
    for other in caught:   # everything but the solver's own non-convergence, as it came
        if not issubclass(other.category, ConvergenceWarning):
            warnings.warn_explicit(other.message, other.category, other.filename,
                                   other.lineno)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        warnings.warn(f"the reference optimum did not converge (scikit-learn stopped at "
                      f"max_iter={max_iter}, tol={tol:g}): P* may lie above the optimum, and "
                      f"relative losses measured against it read too low; raise max_iter",
                      ConvergenceWarning, stacklevel=2)
    W = np.ascontiguousarray(W)
    primal, _ = objectives(X, Y, W, np.zeros_like(Y), loss=loss, lam=lam)
    return float(primal.sum()), (W[:, 0] if W.shape[1] == 1 else W)


def centralized_solution(X, y, *, loss="hinge", lam=1e-4, smoothing=1.0, cache_dir=None):
    """(P*, w*) of the pooled problem, the yardstick of a federated run: the scikit-learn
    reference where there is one (:data:`REFERENCE_LOSSES`), else SDCA to a duality gap
    of 1e-10 (the smoothed hinge).

    With ``cache_dir`` the answer is kept there in a file named by a SHA-256 of the
    problem (every bit of X and y, the loss, lam, smoothing) and read back on the next
    call with the same problem: the same bits as solving again (both solvers are
    deterministic), without the minutes a large problem takes."""
    if cache_dir is None:
        return _solve(X, y, loss, lam, smoothing)
    path = Path(cache_dir) / f"optimum-{problem_digest(X, y, loss, lam, smoothing)}.npz"
    if path.exists():
        with np.load(path) as stored:
            return float(stored["primal"]), stored["coef"]
    primal, coef = _solve(X, y, loss, lam, smoothing)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(partial, primal=primal, coef=coef)
    os.replace(partial, path)  # whole or absent, even with several processes writing
    return primal, coef


def default_cache_dir():
    """Where the benchmarks keep optima: ``$HYFDCA_CACHE``, else
    ``$XDG_CACHE_HOME/hyfdca``, else ``~/.cache/hyfdca``."""
    if os.environ.get("HYFDCA_CACHE"):
        return Path(os.environ["HYFDCA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hyfdca"


def problem_digest(X, y, loss, lam, smoothing):
    """SHA-256 (hex) of the pooled problem: X's CSR arrays and shape, the targets as the
    solvers read them (``encode_targets``: any two class labels, as +-1), loss, lam and
    smoothing."""
    X = as_csr(X)
    digest = hashlib.sha256(repr((X.shape, str(X.dtype), loss, float(lam),
                                  float(smoothing))).encode())
    for array in (X.data, X.indices, X.indptr, encode_targets(y, loss)[0]):
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def _solve(X, y, loss, lam, smoothing):
    if loss in REFERENCE_LOSSES:
        return reference_optimum(X, y, loss=loss, lam=lam)
    result = sdca(X, y, loss=loss, lam=lam, tol=1e-10, max_epochs=10_000, smoothing=smoothing)
    return result.history["primal"][-1], result.coef
