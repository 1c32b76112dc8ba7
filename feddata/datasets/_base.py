"""The Dataset record every loader returns, and the checks and label mapping they share."""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

from solvers import as_csr, check_finite

_REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Dataset:
    """A data matrix with its labels and where it came from.

    ``X`` is CSR float64 with int32 indices, or a dense float64 array where that is the
    natural form (small or dense data). For two classes ``y`` is +-1 and ``classes`` holds
    the original labels in order ``[label mapped to -1, label mapped to +1]``; for more
    classes ``y`` keeps the original labels (one-vs-rest later); for regression ``classes``
    is None.

    ``refit``, where X holds statistics fitted on the data (TF-IDF's vocabulary and
    inverse document frequencies, z-scores' means and standard deviations), rebuilds X
    for every sample with those statistics learned from the given rows only:
    ``refit(rows) -> X``, so that a held-out part shapes nothing of the features a model
    trains on (``federated_problem``). None where X is the data as read.
    """

    X: object
    y: np.ndarray
    name: str
    source: str
    classes: np.ndarray | None
    image_shape: tuple | None = None
    refit: Callable | None = field(default=None, repr=False, compare=False)

    @property
    def n_samples(self):
        return self.X.shape[0]

    @property
    def n_features(self):
        return self.X.shape[1]

    @property
    def label_map(self):
        """Original label -> value in ``y`` (binary: -1/+1; multi-class: identity)."""
        if self.classes is None:
            return None
        if len(self.classes) == 2:
            return {self.classes[0].item(): -1.0, self.classes[1].item(): 1.0}
        return {c.item(): c.item() for c in self.classes}

    def __repr__(self):
        kind = "sparse CSR" if sp.issparse(self.X) else "dense"
        n_classes = "regression" if self.classes is None else f"{len(self.classes)} classes"
        return (f"Dataset({self.name!r}, {self.n_samples} x {self.n_features} {kind}, "
                f"{n_classes}, source={self.source!r})")


def normalize_rows(X):
    """Scale every non-zero row to unit L2 norm (zero rows stay zero)."""
    if sp.issparse(X):
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        return as_csr(sp.diags(scale) @ X)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)


TASKS = ("classification", "regression")


def make_dataset(X, y, *, name, source, task="classification", normalize=False,
                 image_shape=None, refit=None):
    """Validate X and y, map binary labels to +-1 and build the Dataset (``refit``: as
    :class:`Dataset`'s, its X validated and normalised as X is).

    Errors name the problem: an unknown task, no samples, NaN/inf in X or y, mismatched
    lengths, fewer than 2 classes.
    """
    if task not in TASKS:
        raise ValueError(f"{name}: task must be one of {TASKS}, got {task!r}")
    X = _checked_matrix(X, f"{name}: X")
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"{name}: y has shape {y.shape} but X has {X.shape[0]} rows")
    if X.shape[0] == 0:
        raise ValueError(f"{name}: no samples (X has 0 rows)")
    if normalize:
        X = normalize_rows(X)
    if refit is not None:
        refit = _CheckedRefit(refit, name=name, n_samples=X.shape[0], normalize=normalize)
    if task == "regression":
        y = y.astype(np.float64)
        check_finite(y, f"{name}: y")
        return Dataset(X, y, name, source, None, image_shape, refit)
    if np.issubdtype(y.dtype, np.floating):
        check_finite(y, f"{name}: y")
    classes = np.unique(y)
    if classes.size < 2:
        raise ValueError(f"{name}: needs at least 2 classes, found only {classes.tolist()}")
    if classes.size == 2:
        y = np.where(y == classes[1], 1.0, -1.0)
    return Dataset(X, y, name, source, classes, image_shape, refit)


def _checked_matrix(X, what):
    """X as CSR (sparse input) or C-contiguous float64, 2-D and finite."""
    if sp.issparse(X):
        return as_csr(X, name=what)
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{what} must be 2-D, got shape {X.shape}")
    check_finite(X, what)
    return X


class _CheckedRefit:
    """``refit`` whose rows are checked (whole numbers in range, at least one) and whose
    X gets the checks and normalisation of :func:`make_dataset` (a class, not a closure,
    so that a Dataset pickles)."""

    def __init__(self, refit, *, name, n_samples, normalize):
        self.refit, self.name, self.n_samples = refit, name, n_samples
        self.normalize = normalize

    def __call__(self, rows):
        name, n_samples = self.name, self.n_samples
        rows = np.asarray(rows)
        if rows.ndim != 1 or rows.size == 0 or not np.issubdtype(rows.dtype, np.integer):
            raise ValueError(f"{name}: refit needs a non-empty 1-D array of row indices, "
                             f"got {rows.dtype} of shape {rows.shape}")
        if rows.min() < 0 or rows.max() >= n_samples:
            raise ValueError(f"{name}: refit's row indices must lie in [0, {n_samples}), "
                             f"got {rows.min()} to {rows.max()}")
        X = _checked_matrix(self.refit(rows), f"{name}: refitted X")
        if X.shape[0] != n_samples:
            raise ValueError(f"{name}: refit returned {X.shape[0]} rows for {n_samples} "
                             f"samples")
        return normalize_rows(X) if self.normalize else X


def data_search_path(data_home=None):
    """Folders searched for data files, in order.

    ``data_home`` if given; else the folders in $HYFDCA_DATA (os.pathsep-separated), the
    development checkout's ``../shared/data`` and ``~/hyfdca_data``.
    """
    if data_home is not None:
        return [Path(data_home)]
    env = os.environ.get("HYFDCA_DATA", "")
    folders = [Path(p) for p in env.split(os.pathsep) if p]
    folders += [_REPO_ROOT.parent / "shared" / "data", Path.home() / "hyfdca_data"]
    return folders


def find_data_file(names, data_home=None):
    """First existing file among ``names`` in the search path, or FileNotFoundError."""
    folders = data_search_path(data_home)
    for folder in folders:
        for name in names:
            if (folder / name).is_file():
                return folder / name
    raise FileNotFoundError(
        f"none of {list(names)} found in {[str(f) for f in folders]}; put the file in one "
        f"of these folders, set HYFDCA_DATA, or pass data_home"
    )
