"""scikit-learn estimators trained by HyFDCA.

.. code-block:: text

    min_w  (lam/2)||w||^2 + (1/N) sum_i l(x_i . w, y_i)

with X split among clients: ``fit(X, y)`` simulates the split given by ``partition``;
``fit_federated(dataset)`` trains on a FederatedDataset as it is.
"""

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from crypto import DEFAULT_FRACTIONAL_BITS
from feddata import partition as P
from hyfdca._batched import runs_on_batched_engine
from hyfdca._encoding_range import FixedPointRangeError, frac_bits_range
from hyfdca._round import step_bits
from hyfdca._run import run_converged, run_hyfdca, run_rounding
from hyfdca._settings import HyFDCASettings
from solvers import as_csr, is_number

def split(X, y, partition, seed):
    """FederatedDataset from pooled data: a partition spec (grid sizes capped at the
    data's size) or a callable (X, y) -> FederatedDataset."""
    if callable(partition):
        return partition(X, y)
    if isinstance(partition, str) and partition.strip().startswith("quadrants"):
        raise ValueError(f"partition {partition!r} cuts images into quadrants and adds its "
                         "own bias feature, which fit's intercept column would break: "
                         "build the dataset with feddata.partition.mnist_quadrants and "
                         "call fit_federated")
    return P.partition_from_spec(X, y, partition, seed=seed, cap=True)


def run_seed(random_state):
    """The one seed of a fit: random_state, None meaning 0 (fits are reproducible by
    default)."""
    if random_state is None:
        return 0
    if (isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool)
            and random_state >= 0):
        return int(random_state)
    raise ValueError(f"random_state must be a whole number >= 0 or None, got "
                     f"{random_state!r} (every random choice of a fit flows from one seed)")


class _HyFDCABase(BaseEstimator):
    def __init__(self, loss="hinge", *, lam=1e-4, partition="3x3", variant="auto", H=None,
                 iic=None, participation="full", fraction=1.0, max_rounds=2000, tol=1e-3,
                 eval_every=10, fit_intercept=True, intercept_scaling=1.0, crypto="plain",
                 frac_bits="auto", random_state=0, verbose=False):
        self.loss = loss
        self.lam = lam
        self.partition = partition
        self.variant = variant
        self.H = H
        self.iic = iic
        self.participation = participation
        self.fraction = fraction
        self.max_rounds = max_rounds
        self.tol = tol
        self.eval_every = eval_every
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.crypto = crypto
        self.frac_bits = frac_bits
        self.random_state = random_state
        self.verbose = verbose

    def _settings(self):
        return HyFDCASettings.from_variant(
            self.variant, loss=self.loss, lam=self.lam, H=self.H, iic=self.iic,
            participation=self.participation, fraction=self.fraction)

    def _augment(self, X):
        """X with the bias column (value intercept_scaling) appended if fit_intercept."""
        X = as_csr(X)
        if not self.fit_intercept:
            return X
        scaling = self.intercept_scaling
        if not (is_number(scaling) and np.isfinite(scaling) and scaling > 0):
            raise ValueError(f"intercept_scaling must be a finite number > 0 (the bias "
                             f"column's value), got {scaling!r}")
        bias = sp.csr_matrix(np.full((X.shape[0], 1), float(self.intercept_scaling)))
        return as_csr(sp.hstack([X, bias]))

    def _train(self, dataset):
        """Run HyFDCA; return (w, history, rounds). A plaintext run goes to the batched
        engine (the same iterates, every client of a round in one Numba call) unless it
        is the logistic loss with the line search, which only the message engine runs."""
        seed = run_seed(self.random_state)
        settings = self._settings()
        bound = settings.bind(dataset)
        batched = self.crypto == "plain" and runs_on_batched_engine(bound)
        try:
            run, history = run_hyfdca(dataset, settings, max_rounds=self.max_rounds,
                                      rel_tol=self.tol, eval_every=self.eval_every,
                                      crypto=self.crypto, seed=seed, progress=self.verbose,
                                      engine="batched" if batched else "protocol",
                                      frac_bits=self._frac_bits(dataset, bound))
        except FixedPointRangeError as err:
            raise FixedPointRangeError(
                f"{err} (the estimator's frac_bits={self.frac_bits!r}; standardising the "
                f"features, e.g. with sklearn.preprocessing.StandardScaler, and scaling "
                f"the targets puts any data in range)") from None
        primal, dual = history.certified()
        if not np.isfinite(primal - dual):
            warnings.warn(f"HyFDCA stopped at round {run.round}: its certificate diverged "
                          f"(primal {primal:.3g}, dual {dual:.3g}); coef_ is the certified "
                          f"point with the smallest primal", ConvergenceWarning)
        elif self.tol is not None and not run_converged(run, primal - dual, primal,
                                                        rel_tol=self.tol):
            relative = (f"relative duality gap {(primal - dual) / dual:.3g}" if dual > 0
                        else f"duality gap {primal - dual:.3g} and no relative bound (the "
                             f"best dual {dual:.3g} is not positive)")
            rounding = (f"the fixed point's rounding moves the gap by up to "
                        f"{run_rounding(run, primal):.3g} at frac_bits={run.frac_bits}")
            if not run_converged(run, 0.0, primal, rel_tol=self.tol):  # P* <= P: certain
                advice = f"no gap can certify it: {rounding}; raise tol or frac_bits"
            elif dual > 0 and not run_converged(run, 0.0, dual, rel_tol=self.tol):
                advice = (f"raise max_rounds; but near P* (>= the dual) no gap may certify "
                          f"it: {rounding}")
            else:
                advice = "raise max_rounds"
            warnings.warn(f"HyFDCA stopped after {run.round} rounds with {relative} > "
                          f"tol={self.tol:g}; {advice}", ConvergenceWarning)
        return run.model, history, run.round

    def _frac_bits(self, dataset, bound):
        """frac_bits as given, or for "auto" the fixed point's default 32 where the data
        fits it, else the feasible value nearest to 32 (``frac_bits_range`` over every
        row, ``bound`` the settings bound to ``dataset``); where none is feasible, 32, and
        the run names the problem."""
        if self.frac_bits != "auto":
            return self.frac_bits
        low, high = frac_bits_range(
            bound, float(np.max(dataset.sq_row_norms, initial=0.0)),
            float(np.max(np.abs(dataset.labels), initial=0.0)), dataset.n_clients,
            step_bits(bound))
        if low > high or high < 1:
            return DEFAULT_FRACTIONAL_BITS
        return int(min(max(DEFAULT_FRACTIONAL_BITS, low, 1), high))

    def _forget_feature_names(self):
        """A fit on a FederatedDataset has no feature names: drop an earlier fit's."""
        if hasattr(self, "feature_names_in_"):
            del self.feature_names_in_

    def _split_coef(self, W):
        if self.fit_intercept:
            return W[..., :-1], W[..., -1] * self.intercept_scaling
        return W, np.zeros(W.shape[:-1]) if W.ndim > 1 else 0.0

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class HyFDCAClassifier(ClassifierMixin, _HyFDCABase):
    """Linear classifier (hinge, smoothed hinge, squared hinge, logistic) trained by
    HyFDCA, with one-vs-rest for more than two classes.

    Parameters
    ----------
    loss : {"hinge", "smoothed_hinge", "squared_hinge", "logistic"}, default="hinge"
    lam : float, default=1e-4
        L2 weight lambda (scikit-learn's C is 1 / (lam N)).
    partition : str or callable, default="3x3"
        How ``fit`` splits pooled data: "PxQ" (sample groups x feature groups),
        "horizontal:K", "vertical:K", "dealt:PxQ", or a callable (X, y) ->
        FederatedDataset ("quadrants:K" needs images: use ``fit_federated``).
    variant : str, default="auto"
        "auto" (chosen by participation, docs/algorithm.md section 4) or a named
        variant: "paper", "sigma-safe", "rho", "line-search", "combined", "auto-full",
        "auto-partial", "scaled-line-search", "capped-line-search".
    H, iic : int or float, optional
        Inner steps per round, directly or as iic x local samples (variant default).
    participation : {"full", "fraction", "cyclic"}, default="full"
    fraction : float, default=1.0
    max_rounds, tol, eval_every : default 2000, 1e-3, 10
        Stop after ``max_rounds`` or when the certified relative duality gap
        (P_best - D_best) / D_best, over the certificates evaluated every ``eval_every``
        rounds (smallest primal, largest dual), is at most ``tol``; it bounds the relative
        loss (P - P*) / P* of ``coef_``, the certified point with the smallest primal
        (docs/algorithm.md section 3). The
        defaults reach their tolerance on a9a's 3x3 split at full participation (round
        160 at lam 1e-4, 690 at 1e-5 when last measured; benchmarks/estimator_vs_linearsvc.py); a
        ConvergenceWarning says when a fit stopped at ``max_rounds`` instead.
    fit_intercept, intercept_scaling :
        The intercept is the weight of an appended constant feature held by one client
        per sample (liblinear's intercept_scaling, a finite number > 0; it is
        regularised). Unlike liblinear, a large value slows the fit: the bias column
        dominates every row's norm (hinge, standardised breast cancer, lam 1e-4: the
        relative gap after 2,000 rounds is 3.5e-2 at 10 and 0.92 at 100, against the
        tolerance at 1).
    crypto : {"plain", "paillier", "fast-paillier", "mask", "bfv"}, default="plain"
        Encryption backend of the simulated protocol (``crypto.BACKENDS``; Paillier keys
        are 2048 bits). The default is plaintext on purpose: ``fit`` splits pooled data
        that is already in one process, so no data crosses a boundary and encryption
        would protect nothing (it only measures its cost; a deployment across parties
        refuses plaintext, docs/deployment.md). "plain" runs on the batched engine (same
        iterates as the message protocol), except the logistic loss with the line
        search.
    frac_bits : int >= 1 or "auto", default="auto"
        Fractional bits of the fixed point every value is encoded in. "auto": 32 where
        the data fits it, else the nearest value that holds the run (rows of large norm
        at a small lam N need more bits, large targets fewer: docs/reliability.md,
        section 2); where none does, a FixedPointRangeError says so: standardise the
        features and scale the targets.
    random_state : int >= 0 or None, default=0
        The one seed of every random choice (the split, participation, draws); None
        means 0, so fits are reproducible by default.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    classes_ : ndarray
    n_iter_ : int (most rounds over the one-vs-rest problems)
    history_ : History or list of History (one per one-vs-rest problem)

    With ``loss="logistic"`` the classifier has ``predict_proba`` and
    ``predict_log_proba`` (sigma of the scores; one-vs-rest normalised over the classes).

    References
    ----------
    Overman, Blum, Klabjan. A Primal-Dual Algorithm for Hybrid Federated Learning (2024).
    """

    def fit(self, X, y):
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.size < 2:
            raise ValueError(f"HyFDCAClassifier needs at least 2 classes, found only 1 class: "
                             f"{self.classes_.tolist()}")
        Xa = self._augment(X)
        targets = ([self.classes_[1]] if self.classes_.size == 2 else list(self.classes_))
        ws, self.history_, rounds = [], [], []
        seed = run_seed(self.random_state)
        for label in targets:
            yy = np.where(y == label, 1.0, -1.0)
            w, history, n = self._train(split(Xa, yy, self.partition, seed))
            ws.append(w)
            self.history_.append(history)
            rounds.append(n)
        if len(self.history_) == 1:
            self.history_ = self.history_[0]
        self.coef_, self.intercept_ = self._split_coef(np.array(ws))
        self.intercept_ = np.atleast_1d(self.intercept_)
        self.n_iter_ = max(rounds)
        return self

    def fit_federated(self, dataset, classes=None):
        """Train on a FederatedDataset whose labels are +-1 (binary), on its features as
        they are (no intercept column is added: ``intercept_`` is 0). ``classes``: the
        two labels -1 and +1 stand for (default: -1.0 and 1.0); ``classes_`` holds them
        sorted, the scores' sign turned where that swaps them."""
        labels = np.unique(dataset.labels)
        if not set(labels) <= {-1.0, 1.0} or labels.size != 2:
            raise ValueError(f"fit_federated needs labels -1 and +1, found {labels.tolist()}")
        if classes is not None and np.unique(np.asarray(classes)).size != 2:
            raise ValueError(f"classes must be two distinct labels (for -1 and +1), got "
                             f"{list(classes)!r}")
        w, self.history_, self.n_iter_ = self._train(dataset)
        self.classes_ = np.array([-1.0, 1.0]) if classes is None else np.asarray(classes)
        if self.classes_[0] > self.classes_[1]:   # classes_ sorted, as scikit-learn's:
            self.classes_, w = self.classes_[::-1], -w   # the score's sign follows
        self.coef_, self.intercept_ = w[None, :], np.zeros(1)
        self.n_features_in_ = dataset.n_features
        self._forget_feature_names()
        return self

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        scores = X @ self.coef_.T + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    def predict(self, X):
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    @available_if(lambda self: self.loss == "logistic")
    def predict_proba(self, X):
        """Class probabilities of the logistic loss (its model of P(y = +1 | x) is
        sigma(x.w + b)): [1 - p, p] for two classes; one-vs-rest's sigma of each score,
        normalised over the classes, as scikit-learn's one-vs-rest LogisticRegression."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            positive = expit(scores)
            return np.column_stack([1.0 - positive, positive])
        proba = expit(scores)
        return proba / proba.sum(axis=1, keepdims=True)

    @available_if(lambda self: self.loss == "logistic")
    def predict_log_proba(self, X):
        """log of :meth:`predict_proba`."""
        return np.log(self.predict_proba(X))


class HyFDCARegressor(RegressorMixin, _HyFDCABase):
    """Ridge regression (squared loss) trained by HyFDCA. Parameters as for
    :class:`HyFDCAClassifier`; ``coef_`` has shape (n_features,), ``intercept_`` is a
    float."""

    def __init__(self, *, lam=1e-4, partition="3x3", variant="auto", H=None, iic=None,
                 participation="full", fraction=1.0, max_rounds=2000, tol=1e-3,
                 eval_every=10, fit_intercept=True, intercept_scaling=1.0, crypto="plain",
                 frac_bits="auto", random_state=0, verbose=False):
        super().__init__("squared", lam=lam, partition=partition, variant=variant, H=H,
                         iic=iic, participation=participation, fraction=fraction,
                         max_rounds=max_rounds, tol=tol, eval_every=eval_every,
                         fit_intercept=fit_intercept, intercept_scaling=intercept_scaling,
                         crypto=crypto, frac_bits=frac_bits, random_state=random_state,
                         verbose=verbose)

    def fit(self, X, y):
        if np.asarray(y).dtype.kind in "US":
            raise ValueError(f"HyFDCARegressor needs numeric targets y, got dtype "
                             f"{np.asarray(y).dtype} (for class labels use "
                             f"HyFDCAClassifier)")
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64,
                             y_numeric=True)
        y = y.astype(np.float64)   # bool targets too, as Ridge takes them
        w, self.history_, self.n_iter_ = self._train(
            split(self._augment(X), y, self.partition, run_seed(self.random_state)))
        self.coef_, self.intercept_ = self._split_coef(w)
        self.intercept_ = float(self.intercept_)
        return self

    def fit_federated(self, dataset):
        """Train on a FederatedDataset (its labels are the targets), on its features as
        they are (no intercept column is added: ``intercept_`` is 0)."""
        w, self.history_, self.n_iter_ = self._train(dataset)
        self.coef_, self.intercept_ = w, 0.0
        self.n_features_in_ = dataset.n_features
        self._forget_feature_names()
        return self

    def predict(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        return X @ self.coef_ + self.intercept_
