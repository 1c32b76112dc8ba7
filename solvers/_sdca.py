"""Centralized SDCA (Shalev-Shwartz & Zhang 2013) for L2-regularised convex losses.

Solves, for each one-vs-rest problem c::

    min_w  P(w) = (lam/2) ||w||^2 + (1/N) sum_i l(x_i . w, y_ic)

through its dual  D(alpha) = -(lam/2) ||w(alpha)||^2 + (1/N) sum_i -l*(-alpha_ic),
w(alpha) = X^T alpha / (lam N), and stops when the duality gap P - D (summed over the
one-vs-rest problems) is at most ``tol``. This is the reference the federated algorithm
must reproduce: with one client holding everything, HyFDCA takes exactly these steps.
"""

import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from solvers._losses import CLASSIFICATION_LOSSES, loss_code
from solvers._sdca_kernels import objective_sums, row_sq_norms, sdca_pass
from solvers._validation import as_csr, check_labels, check_positive

ORDERS = ("random", "permuted")


@dataclass
class SDCAResult:
    """Outcome of :func:`sdca`.

    ``coef`` is (d,) for one problem and (d, C) for C one-vs-rest problems; ``dual_coef``
    is (N,) or (N, C). ``history`` maps "epoch", "primal", "dual" and "gap" to lists,
    one entry per evaluation (epoch 0 is the starting point).
    """

    coef: np.ndarray
    dual_coef: np.ndarray
    classes: np.ndarray | None
    n_epochs: int
    converged: bool
    history: dict = field(default_factory=dict)

    @property
    def gap(self):
        return self.history["gap"][-1]


def encode_targets(y, loss):
    """Targets as an (N, C) float64 matrix and the classes they stand for.

    Regression (squared loss): C = 1, classes None. Classification: two classes become one
    problem with the larger class as +1; more become one-vs-rest columns of +-1.
    """
    if loss not in CLASSIFICATION_LOSSES:
        y = np.asarray(y, dtype=np.float64)
        return y.reshape(-1, 1).copy(), None
    classes = np.unique(y)
    if classes.size < 2:
        raise ValueError(
            f"classification needs at least 2 classes in y, found only {classes.size} class: "
            f"{classes.tolist()}"
        )
    if classes.size == 2:
        Y = np.where(y == classes[1], 1.0, -1.0).reshape(-1, 1)
    else:
        Y = np.where(y[:, None] == classes[None, :], 1.0, -1.0)
    return np.ascontiguousarray(Y), classes


def objectives(X, Y, W, alpha, *, loss, lam, smoothing=1.0):
    """(primal, dual) per one-vs-rest problem, each of shape (C,).

    The primal is evaluated at ``W``, the dual at ``alpha`` with w(alpha) taken to be
    ``W`` (callers keep the invariant W = X^T alpha / (lam N)).
    """
    n = X.shape[0]
    sums = objective_sums(X.data, X.indices, X.indptr, Y, alpha, W, loss_code(loss),
                          smoothing)
    reg = 0.5 * lam * np.einsum("jc,jc->c", W, W)
    return reg + sums[0] / n, -reg + sums[1] / n


def primal_objective(X, y, w, *, loss, lam, smoothing=1.0):
    """P(w) for one problem with 1-D targets ``y`` (+-1 for classification)."""
    X = as_csr(X)
    Y = np.ascontiguousarray(np.asarray(y, dtype=np.float64).reshape(-1, 1))
    W = np.ascontiguousarray(np.asarray(w, dtype=np.float64).reshape(-1, 1))
    zeros = np.zeros_like(Y)
    return float(objectives(X, Y, W, zeros, loss=loss, lam=lam, smoothing=smoothing)[0][0])


def epoch_order(rng, n_samples, order):
    """One epoch's sample indices: N i.i.d. uniform draws or a fresh permutation."""
    if order == "random":
        return rng.integers(0, n_samples, size=n_samples, dtype=np.int64)
    return rng.permutation(n_samples).astype(np.int64)


def sdca(X, y, *, loss="hinge", lam=1e-4, tol=1e-6, max_epochs=200, order="permuted",
         random_state=0, smoothing=1.0, sigma=1.0, eval_every=1, dual_init=None):
    """Run SDCA until the duality gap is at most ``tol`` or ``max_epochs`` have passed.

    Parameters
    ----------
    X : array or sparse matrix, shape (N, d)
    y : array, shape (N,)
        Real targets for ``loss="squared"``; class labels otherwise.
    loss : {"hinge", "smoothed_hinge", "squared_hinge", "logistic", "squared"}
    lam : float
        L2 regularisation weight lambda.
    tol : float
        Stop when P(w) - D(alpha), summed over one-vs-rest problems, is <= tol.
    order : {"permuted", "random"}
        Fresh permutation per epoch, or N i.i.d. uniform draws per epoch.
    random_state : int or numpy Generator
        The one seed behind every index drawn.
    smoothing : float
        Smoothing g of the smoothed hinge.
    sigma : float
        Curvature factor: the step at sample i uses s = sigma q_i / (lam N).
    eval_every : int
        Epochs between gap evaluations (each costs one pass over X).
    dual_init : array, shape (N,) or (N, C), optional
        Starting alpha (w is recomputed from it).
    """
    code = loss_code(loss)
    X = as_csr(X)
    n_samples = X.shape[0]
    if n_samples == 0:
        raise ValueError("X has no samples")
    y = check_labels(y, n_samples)
    lam = check_positive(lam, "lam")
    smoothing = check_positive(smoothing, "smoothing")
    sigma = check_positive(sigma, "sigma")
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; expected one of {ORDERS}")
    if int(eval_every) < 1:
        raise ValueError(f"eval_every must be >= 1, got {eval_every}")
    Y, classes = encode_targets(y, loss)
    lam_n = lam * n_samples

    if dual_init is None:
        alpha = np.zeros_like(Y)
    else:
        alpha = np.ascontiguousarray(np.asarray(dual_init, dtype=np.float64).reshape(Y.shape))
    W = np.ascontiguousarray((X.T @ alpha) / lam_n)
    sq_norms = row_sq_norms(X.data, X.indptr)
    rng = np.random.default_rng(random_state)

    history = {"epoch": [], "primal": [], "dual": [], "gap": []}

    def record(epoch):
        primal, dual = objectives(X, Y, W, alpha, loss=loss, lam=lam, smoothing=smoothing)
        history["epoch"].append(epoch)
        history["primal"].append(float(primal.sum()))
        history["dual"].append(float(dual.sum()))
        history["gap"].append(float(primal.sum() - dual.sum()))
        return history["gap"][-1] <= tol

    converged = record(0)
    epoch = 0
    while not converged and epoch < max_epochs:
        epoch += 1
        sdca_pass(X.data, X.indices, X.indptr, Y, alpha, W, sq_norms,
                  epoch_order(rng, n_samples, order), code, lam_n, sigma, smoothing)
        if epoch % eval_every == 0 or epoch == max_epochs:
            converged = record(epoch)

    if not converged:
        warnings.warn(
            f"SDCA stopped after {epoch} epochs with duality gap {history['gap'][-1]:.3g} "
            f"> tol={tol:g}; raise max_epochs",
            ConvergenceWarning,
        )
    squeeze = Y.shape[1] == 1
    return SDCAResult(
        coef=W[:, 0].copy() if squeeze else W,
        dual_coef=alpha[:, 0].copy() if squeeze else alpha,
        classes=classes,
        n_epochs=epoch,
        converged=converged,
        history=history,
    )
