"""Input checks shared by every solver and data loader: clear errors, no silent changes."""

import numpy as np
import scipy.sparse as sp

from solvers._losses import CLASSIFICATION_LOSSES


def _first_bad(values):
    bad = np.flatnonzero(~np.isfinite(values))
    return bad.size, (bad[0] if bad.size else None)


def check_finite(values, name):
    """Raise ValueError naming ``name`` if ``values`` holds NaN or inf."""
    count, first = _first_bad(np.asarray(values).ravel())
    if count:
        raise ValueError(
            f"{name} contains {count} NaN or infinite value(s) "
            f"(first at flat position {first})"
        )


def as_csr(X, name="X"):
    """X as canonical CSR float64 with int32 indices, checked for NaN/inf.

    Dense input is converted; sparse input is copied only when its dtype, index type or
    format differs. Duplicate entries are summed, as scipy defines their meaning. Bools
    become 0 and 1; complex values, and integers float64 cannot hold exactly (beyond
    2^53), are refused; a long double is rounded to float64.
    """
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        _check_representable(X.data, X.dtype, name)
    else:
        arr = np.asarray(X)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be 2-D (samples x features), got shape {arr.shape}")
        _check_representable(arr, arr.dtype, name)
        X = sp.csr_matrix(arr.astype(np.float64, copy=False))
    if X.dtype != np.float64:
        X = X.astype(np.float64)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    if X.indices.dtype != np.int32 or X.indptr.dtype != np.int32:
        if X.nnz > np.iinfo(np.int32).max or max(X.shape) > np.iinfo(np.int32).max:
            raise ValueError(f"{name} has {X.nnz} non-zeros: too many for int32 indices")
        X = sp.csr_matrix(
            (X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)), shape=X.shape
        )
    check_finite(X.data, name)
    return X


def _check_representable(values, dtype, name):
    """ValueError unless float64 holds every value of this dtype (bools as 0 and 1)."""
    if dtype == bool:
        return
    if dtype == object or not np.issubdtype(dtype, np.number):
        raise ValueError(f"{name} must be numeric, got dtype {dtype}")
    if np.issubdtype(dtype, np.complexfloating):
        raise ValueError(f"{name} is complex ({dtype}): the solvers take real values")
    if np.issubdtype(dtype, np.integer) and values.size:
        largest = int(np.abs(values.astype(np.float64)).max())
        if np.abs(values).max() > 2**53 or largest > 2**53:
            raise ValueError(f"{name} holds integers up to {largest:.3g}, beyond 2^53: "
                             f"float64 would change them (rescale, or pass floats)")


def check_labels(y, n_samples, name="y"):
    """y as a 1-D float64 array of length n_samples, free of NaN/inf."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {y.shape}")
    if y.shape[0] != n_samples:
        raise ValueError(
            f"{name} has {y.shape[0]} entries but X has {n_samples} samples"
        )
    if np.issubdtype(y.dtype, np.number):
        check_finite(y, name)
    return y


def is_number(value):
    """Whether ``value`` is an int, a float or a NumPy number, not a bool (nor a string):
    a step, a rate, a tolerance."""
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def is_whole(value):
    """Whether ``value`` is an int (NumPy's too), not a bool: a count, an id, a seed."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_whole(value, name, least):
    """``value`` as an int, or ValueError naming ``name`` unless it is a whole number (not
    a bool) >= ``least``."""
    if not (is_whole(value) and value >= least):
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return int(value)


def check_positive(value, name):
    """``value`` as a float, or ValueError naming ``name`` unless it is a finite number
    > 0 (a bool or a string is not a number here)."""
    if not (is_number(value) and np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def check_classification_labels(y, loss):
    """A classification loss reads labels as -1 and +1 (the estimators encode theirs);
    other losses take any label. HyFDCA's clients check their own labels at set-up, its
    batched engine and the baselines check them all."""
    if loss not in CLASSIFICATION_LOSSES:
        return
    bad = np.flatnonzero((y != 1.0) & (y != -1.0))
    if bad.size:
        found = np.unique(y)
        shown = ", ".join(f"{v:g}" if is_number(v) else repr(v)
                          for v in found[:10].tolist()) + (" ..." if found.size > 10 else "")
        raise ValueError(
            f"loss {loss!r} needs labels -1 and +1, but {bad.size} sample(s) (first: sample "
            f"{bad[0]}) have other values; labels found: {shown}. Map them first (0/1 "
            f"labels: y = 2 y - 1), or fit HyFDCAClassifier, which encodes any two classes")


def check_validation_set(validation, n_features, loss):
    """A validation set (X_val, y_val) that fits the training problem: n_features
    columns, one finite label per row, -1 and +1 under a classification loss (its
    accuracy is sign(X_val w) == y_val: 0/1 labels read every 0 as a miss). ValueError
    naming the problem; None passes."""
    if validation is None:
        return
    X, y = validation
    if X.ndim != 2 or X.shape[1] != n_features:
        raise ValueError(f"the validation set has {X.shape[1] if X.ndim == 2 else X.shape} "
                         f"features, the training data {n_features}")
    y = check_labels(y, X.shape[0], name="the validation labels")
    try:
        check_classification_labels(y, loss)
    except ValueError as err:
        raise ValueError(f"the validation set: {err}") from None
