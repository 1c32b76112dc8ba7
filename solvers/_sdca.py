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

from solvers._losses import CLASSIFICATION_LOSSES, loss_code
from solvers.kernels import (
    column_counts,
    hinge_pass_binary,
    hinge_shrinking_epochs,
    hinge_steps,
    objective_sums,
    renumber_columns,
    row_sq_norms,
    sdca_pass,
)
from solvers._validation import (as_csr, check_classification_labels, check_finite,
                                 check_labels, check_positive, check_whole, is_number)

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


def sign_labels(scores):
    """+-1 labels of scores: +1 where the score is > 0; a score of exactly 0 is -1, as in
    scikit-learn's linear classifiers (``classes_[scores > 0]``)."""
    return np.where(np.asarray(scores) > 0, 1.0, -1.0)


def objectives(X, Y, W, alpha, *, loss, lam, smoothing=1.0):
    """(primal, dual) per one-vs-rest problem, each of shape (C,).

    The primal is evaluated at ``W``, the dual at ``alpha`` with w(alpha) taken to be
    ``W`` (callers keep the invariant W = X^T alpha / (lam N)).
    """
    n, d = X.shape
    if Y.shape[0] != n or alpha.shape != Y.shape or W.shape != (d, Y.shape[1]):
        raise ValueError(f"objectives of X {X.shape}: Y {Y.shape}, alpha {alpha.shape} and W "
                         f"{W.shape} must be (N, C), (N, C) and (d, C)")
    sums = objective_sums(X.data, X.indices, X.indptr, Y, alpha, W, loss_code(loss),
                          smoothing)
    reg = 0.5 * lam * np.einsum("jc,jc->c", W, W)
    return reg + sums[0] / n, -reg + sums[1] / n


def primal_objective(X, y, w, *, loss, lam, smoothing=1.0):
    """P(w) for one problem with 1-D targets ``y`` (+-1 for classification); not finite
    for a w that is not (a diverged method's: ``baselines.run_baseline`` stops on it)."""
    X = as_csr(X)
    loss_code(loss)
    y = check_labels(y, X.shape[0]).astype(np.float64)
    check_classification_labels(y, loss)
    w = np.asarray(w, dtype=np.float64)
    if w.shape != (X.shape[1],):
        raise ValueError(f"w has shape {w.shape}, X has {X.shape[1]} features")
    lam = check_positive(lam, "lam")
    smoothing = check_positive(smoothing, "smoothing")
    Y = np.ascontiguousarray(y.reshape(-1, 1))
    W = np.ascontiguousarray(w.reshape(-1, 1))
    zeros = np.zeros_like(Y)
    return float(objectives(X, Y, W, zeros, loss=loss, lam=lam, smoothing=smoothing)[0][0])


def _starting_dual(dual_init, Y, loss):
    """A copy of ``dual_init`` as alpha (the caller's array is never written), of shape
    (N,) or (N, C), finite and inside the dual box of the loss."""
    alpha = np.array(dual_init, dtype=np.float64, copy=True)
    if alpha.shape not in (Y.shape, Y.shape[:1]) or (alpha.ndim == 1 and Y.shape[1] != 1):
        raise ValueError(f"dual_init has shape {alpha.shape}; this problem's alpha has shape "
                         f"{Y.shape if Y.shape[1] > 1 else Y.shape[:1]}")
    check_finite(alpha, "dual_init")
    alpha = np.ascontiguousarray(alpha.reshape(Y.shape))
    if loss != "squared":
        beta = alpha * Y   # the domain of the conjugate: beta in [0, 1] ([0, inf) for
        upper = np.inf if loss == "squared_hinge" else 1.0   # the squared hinge)
        outside = np.flatnonzero(((beta < 0) | (beta > upper)).any(axis=1))
        if outside.size:
            raise ValueError(f"dual_init lies outside the domain of loss {loss!r} at "
                             f"{outside.size} sample(s) (first: {outside[0]}): alpha_i y_i "
                             f"must be in [0, {upper:g}]")
    return alpha


def epoch_order(rng, n_samples, order):
    """One epoch's sample indices: N i.i.d. uniform draws or a fresh permutation."""
    if order == "random":
        return rng.integers(0, n_samples, size=n_samples, dtype=np.int64)
    return rng.permutation(n_samples).astype(np.int64)


class ShrinkingHinge:
    """Binary hinge SDCA with liblinear's shrinking, for one problem, state kept between calls.

    ``y`` (+-1), ``alpha`` and ``w`` are 1-D float64 arrays; :meth:`run` updates ``alpha``
    in place and :meth:`sync` writes the current w into ``w`` (w = X^T alpha / (lam N)).
    Each epoch shuffles the active samples with a SplitMix64 generator seeded by ``seed``
    (same seed, same bits) and visits them; see
    :func:`solvers.kernels.hinge_shrinking_epochs`. ``eps`` is the spread of projected
    gradients at which the active set is reset to all samples; :meth:`tighten` divides it by
    10 once a pass over all samples is within it.

    With at least ``REORDER_MIN_FEATURES`` features (w larger than a core's L2 cache), the
    solver works on a copy of the column indices renumbered by decreasing column frequency
    (:func:`frequency_order`), so that the entries of w that most rows read share cache
    lines. The arithmetic is unchanged, so are the iterates, bit for bit.
    """

    EPS_START = 1e-2
    REORDER_MIN_FEATURES = 1 << 17

    def __init__(self, X, y, alpha, w, sq_norms, lam_n, sigma, seed):
        n, d = X.shape
        self.X, self.y, self.alpha, self.w = X, y, alpha, w
        self.lam_n = float(lam_n)
        self.step = hinge_steps(sq_norms, self.lam_n, float(sigma))
        if d >= self.REORDER_MIN_FEATURES:
            self.perm, self.indices = frequency_order(X.indices, d)
            self.w_work = w[self.perm]
        else:
            self.perm, self.indices, self.w_work = None, X.indices, w
        self.index = np.arange(n, dtype=np.int64)
        self.bounds = np.array([np.inf, -np.inf])
        self.active = np.array([n], dtype=np.int64)
        self.rng_state = np.array([seed], dtype=np.uint64)
        self.eps = self.EPS_START

    @property
    def n_active(self):
        return int(self.active[0])

    def run(self, n_epochs):
        """Up to ``n_epochs`` epochs; (epochs done, converged within ``eps`` on all samples)."""
        X = self.X
        done, converged = hinge_shrinking_epochs(
            X.data, self.indices, X.indptr, self.y, self.alpha, self.w_work, self.step,
            self.lam_n, self.index, self.bounds, self.active, self.rng_state, int(n_epochs),
            self.eps)
        return int(done), bool(converged)

    def sync(self):
        """Write the current w into the ``w`` given at construction; returns it."""
        if self.perm is not None:
            self.w[self.perm] = self.w_work
        return self.w

    def tighten(self):
        self.eps *= 0.1


def frequency_order(indices, n_features):
    """Columns by decreasing number of non-zeros: (perm, renumbered indices).

    ``perm[k]`` is the column placed at position k; the renumbered indices are int32.
    Counts are capped at 32767 so that the stable sort is numpy's radix sort on int16
    (ties, and the order among columns that frequent, keep column order).
    """
    counts = column_counts(indices, n_features)
    key = -np.minimum(counts, 32767).astype(np.int16)
    perm = np.argsort(key, kind="stable")
    rank = np.empty(n_features, dtype=np.int32)
    rank[perm] = np.arange(n_features, dtype=np.int32)
    return perm, renumber_columns(indices, rank)


def shrinking_seeds(random_state, n_problems):
    """One uint64 generator seed per one-vs-rest problem, all drawn from ``random_state``."""
    rng = np.random.default_rng(random_state)
    return rng.integers(0, 2**63, size=n_problems, dtype=np.int64).astype(np.uint64)


def sdca(X, y, *, loss="hinge", lam=1e-4, tol=1e-6, max_epochs=200, order="permuted",
         random_state=0, smoothing=1.0, sigma=1.0, eval_every=1, dual_init=None,
         shrinking=False):
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
    shrinking : bool, default=False
        Hinge loss only: liblinear's shrinking (Hsieh et al. 2008, see
        :class:`ShrinkingHinge`). Each epoch visits a fresh permutation of the samples not
        yet shrunk, drawn inside Numba from ``random_state``, so the iterates differ from
        the default path's; an epoch of the history counts one such pass, which can be
        much shorter than N steps. One-vs-rest problems are solved side by side, one pass
        each per epoch. A gap evaluation also starts whenever the active set has converged
        on all samples; as each evaluation costs a full pass over X while shrunk epochs
        are cheap, a larger ``eval_every`` (say 10) pays off. Without shrinking, the
        iterates are those of ``sdca_pass`` (binary hinge uses a 1-D kernel that takes the
        same steps bit for bit).
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
    check_whole(eval_every, "eval_every", 1)
    check_whole(max_epochs, "max_epochs", 0)
    if not (is_number(tol) and np.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}")
    if shrinking and loss != "hinge":
        raise ValueError(f"shrinking=True needs loss='hinge', got loss={loss!r}")
    if shrinking and order != "permuted":
        raise ValueError(f"shrinking=True visits permutations; order={order!r} is not "
                         "supported with it")
    Y, classes = encode_targets(y, loss)
    lam_n = lam * n_samples

    alpha = np.zeros_like(Y) if dual_init is None else _starting_dual(dual_init, Y, loss)
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
    if shrinking:
        epoch, converged = _run_shrinking(X, Y, alpha, W, sq_norms, lam_n, sigma,
                                          random_state, max_epochs, int(eval_every), record,
                                          converged)
    else:
        epoch = 0
        binary_hinge = loss == "hinge" and Y.shape[1] == 1
        while not converged and epoch < max_epochs:
            epoch += 1
            idx = epoch_order(rng, n_samples, order)
            if binary_hinge:
                hinge_pass_binary(X.data, X.indices, X.indptr, Y[:, 0], alpha[:, 0], W[:, 0],
                                  sq_norms, idx, lam_n, sigma)
            else:
                sdca_pass(X.data, X.indices, X.indptr, Y, alpha, W, sq_norms, idx, code,
                          lam_n, sigma, smoothing)
            if epoch % eval_every == 0 or epoch == max_epochs:
                converged = record(epoch)

    if not converged:
        # imported on use, not with the module (docs/architecture.md)
        from sklearn.exceptions import ConvergenceWarning

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


def _run_shrinking(X, Y, alpha, W, sq_norms, lam_n, sigma, random_state, max_epochs,
                   eval_every, record, converged):
    """The epoch loop of ``sdca(shrinking=True)``: (epochs run, converged).

    Each problem runs on contiguous 1-D copies of its columns; ``alpha`` and ``W`` are
    written back before every gap evaluation.
    """
    n_problems = Y.shape[1]
    ys = [np.ascontiguousarray(Y[:, c]) for c in range(n_problems)]
    alphas = [np.ascontiguousarray(alpha[:, c]) for c in range(n_problems)]
    ws = [np.ascontiguousarray(W[:, c]) for c in range(n_problems)]
    solvers = [ShrinkingHinge(X, ys[c], alphas[c], ws[c], sq_norms, lam_n, sigma, seed)
               for c, seed in enumerate(shrinking_seeds(random_state, n_problems))]
    epoch = 0
    while not converged and epoch < max_epochs:
        # epochs up to the next evaluation; stop early once every problem has converged
        # within its eps on all samples since the last evaluation
        reached = [False] * n_problems
        for done in range(1, min(eval_every, max_epochs - epoch) + 1):
            for c, solver in enumerate(solvers):
                reached[c] |= solver.run(1)[1]
            if all(reached):
                break
        epoch += done
        for c in range(n_problems):
            alpha[:, c] = alphas[c]
            W[:, c] = solvers[c].sync()
        converged = record(epoch)
        if not converged:
            for c, solver in enumerate(solvers):
                if reached[c]:
                    solver.tighten()
    return epoch, converged
