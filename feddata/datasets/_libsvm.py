"""LIBSVM text files: a9a, news20.binary, covtype.binary, mnist."""

from pathlib import Path

import numpy as np

from feddata.datasets._base import find_data_file, make_dataset
from feddata.datasets._idx import corrupt_stream_named, open_maybe_compressed


INDEX_MAX = np.iinfo(np.int32).max


def _first_bad_line(path, n_features):
    """(line number, reason) of the first line that is not valid LIBSVM, or None."""
    with open_maybe_compressed(path) as handle:
        for lineno, raw in enumerate(handle, start=1):
            line = raw.decode("utf-8", errors="replace").split("#", 1)[0].strip()
            if not line:
                continue
            tokens = line.split()
            try:
                label = float(tokens[0])
            except ValueError:
                return lineno, f"label {tokens[0]!r} is not a number"
            if not np.isfinite(label):
                return lineno, f"label {tokens[0]!r} is not finite"
            previous = 0
            for token in tokens[1:]:
                if token.startswith("qid:"):
                    continue
                index, sep, value = token.partition(":")
                try:
                    index, value = int(index), float(value)
                except ValueError:
                    return lineno, f"token {token!r} is not index:value"
                if not sep:
                    return lineno, f"token {token!r} is not index:value"
                if not np.isfinite(value):
                    return lineno, f"feature {index} has non-finite value {value}"
                if index < 1 or index <= previous:
                    return lineno, (f"feature indices must be 1-based, ascending and "
                                    f"unique ({token!r})")
                if index > INDEX_MAX:
                    return lineno, (f"feature index {index} is beyond {INDEX_MAX}, the "
                                    f"largest index a sparse matrix holds")
                if n_features is not None and index > n_features:
                    return lineno, f"feature index {index} exceeds n_features={n_features}"
                previous = index
    return None


def load_libsvm(path, *, n_features=None, name=None, normalize=False, task="classification"):
    """Read a LIBSVM/svmlight file (plain, .gz or .bz2) into a Dataset.

    Feature indices are 1-based as in the LIBSVM collection. A malformed file raises
    ValueError naming the file and the first bad line.
    """
    # imported on use, not with the module (docs/architecture.md)
    from sklearn.datasets import load_svmlight_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LIBSVM file {path} does not exist")
    with corrupt_stream_named(f"LIBSVM file {path}"):
        try:
            with open_maybe_compressed(path) as handle:   # by magic bytes, not the name
                X, y = load_svmlight_file(handle, n_features=n_features, dtype=np.float64,
                                          zero_based=False)
            error = None if np.isfinite(X.data).all() and np.isfinite(y).all() else "non-finite"
            if error is None and X.shape[1] > INDEX_MAX:
                error = "index"
        except (ValueError, RuntimeError, OverflowError) as err:
            error = err
        bad = _first_bad_line(path, n_features) if error is not None else None
    if error is not None:
        where = f"line {bad[0]}: {bad[1]}" if bad else str(error)
        raise ValueError(f"cannot read LIBSVM file {path}, {where}") from (
            error if isinstance(error, Exception) else None)
    return make_dataset(X, y, name=name or path.name, source=str(path), task=task,
                        normalize=normalize)


# name -> (file names tried, n_features); shapes as in the LIBSVM collection
LIBSVM_FILES = {
    "a9a": (("a9a", "a9a.txt", "a9a.bz2"), 123),
    "news20.binary": (("news20.binary", "news20.binary.bz2"), 1355191),
    "covtype.binary": (("covtype.libsvm.binary", "covtype.binary", "covtype.libsvm.binary.bz2",
                        "covtype.libsvm.binary.scale", "covtype.libsvm.binary.scale.bz2"), 54),
    # LIBSVM's mnist lists 780 features (trailing blank pixels never occur); 784 keeps the
    # 28 x 28 image layout that the quadrant partition needs. Its training file only
    # (60,000 rows; mnist.t is the test set), the [0, 1]-scaled copy first.
    "mnist": (("mnist.scale", "mnist.scale.bz2", "mnist", "mnist.bz2"), 784),
}


def load_libsvm_named(name, *, data_home=None, normalize=False):
    """Load one of the paper's LIBSVM data sets by name from the data search path."""
    files, n_features = LIBSVM_FILES[name]
    path = find_data_file(files, data_home)
    dataset = load_libsvm(path, n_features=n_features, name=name, normalize=normalize)
    if name == "mnist":
        dataset.image_shape = (28, 28)
    return dataset


def load_a9a(data_home=None, *, normalize=False):
    """UCI Adult as LIBSVM's a9a (48,842 x 123 binary features in the shared copy)."""
    return load_libsvm_named("a9a", data_home=data_home, normalize=normalize)
