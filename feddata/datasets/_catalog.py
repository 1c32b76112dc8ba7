"""The named data sets, where each comes from, and whether this machine has it."""

from dataclasses import dataclass
from typing import Callable

from feddata.datasets import _synthetic
from feddata.datasets._base import find_data_file
from feddata.datasets._bundled import load_breast_cancer, load_digits
from feddata.datasets._idx import FASHION_MNIST_DIR, load_fashion_mnist
from feddata.datasets._libsvm import LIBSVM_FILES, load_libsvm_named
from feddata.datasets._text import load_sms_spam


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    shape: str
    description: str
    load: Callable
    locate: Callable  # () -> where it comes from; raises FileNotFoundError if absent


def _libsvm(name):
    return lambda **kw: load_libsvm_named(name, **kw)


def _file(names):
    return lambda: str(find_data_file(names))


def _fashion_dir():
    images = [FASHION_MNIST_DIR / f"train-images-idx3-ubyte{suffix}" for suffix in ("", ".gz")]
    if not any(path.is_file() for path in images):
        raise FileNotFoundError(
            f"{FASHION_MNIST_DIR}/train-images-idx3-ubyte[.gz] (apt-get install -y "
            f"dataset-fashion-mnist)")
    return str(FASHION_MNIST_DIR)


CATALOG = {e.name: e for e in [
    CatalogEntry("breast_cancer", "569 x 30 dense, 2 classes",
                 "Wisconsin breast cancer, z-scored (embedded default)",
                 load_breast_cancer, lambda: "scikit-learn (bundled)"),
    CatalogEntry("digits", "1,797 x 64 dense, 10 classes", "8x8 handwritten digits",
                 load_digits, lambda: "scikit-learn (bundled)"),
    CatalogEntry("a9a", "48,842 x 123 sparse, 2 classes", "UCI Adult, LIBSVM a9a",
                 _libsvm("a9a"), _file(LIBSVM_FILES["a9a"][0])),
    CatalogEntry("news20.binary", "19,996 x 1,355,191 sparse, 2 classes",
                 "20 newsgroups, LIBSVM binary version", _libsvm("news20.binary"),
                 _file(LIBSVM_FILES["news20.binary"][0])),
    CatalogEntry("covtype.binary", "581,012 x 54, 2 classes",
                 "forest cover type, LIBSVM binary version", _libsvm("covtype.binary"),
                 _file(LIBSVM_FILES["covtype.binary"][0])),
    CatalogEntry("mnist", "60,000 x 784 sparse, 10 classes",
                 "MNIST digits, LIBSVM's training file (mnist.scale, in [0, 1], first)",
                 _libsvm("mnist"), _file(LIBSVM_FILES["mnist"][0])),
    CatalogEntry("fashion-mnist", "70,000 x 784 sparse, 10 classes",
                 "Fashion-MNIST, IDX files", load_fashion_mnist, _fashion_dir),
    CatalogEntry("sms-spam", "5,574 x n-grams sparse, 2 classes",
                 "SMS Spam Collection as TF-IDF word 1-2 grams", load_sms_spam,
                 _file(("SMSSpamCollection",))),
    CatalogEntry("news20-like", "19,996 x 1,355,191 sparse, 2 classes",
                 "synthetic, news20.binary's shape and sparsity", _synthetic.make_news20_like,
                 lambda: "generated (seeded)"),
    CatalogEntry("covtype-like", "581,012 x 54 dense, 2 classes",
                 "synthetic, covtype.binary's shape and layout", _synthetic.make_covtype_like,
                 lambda: "generated (seeded)"),
    CatalogEntry("mnist-like", "70,000 x 784 sparse, 10 classes",
                 "synthetic, MNIST's shape and sparsity", _synthetic.make_mnist_like,
                 lambda: "generated (seeded)"),
]}


def dataset_names():
    return list(CATALOG)


def locate_dataset(name):
    """Where ``name`` comes from on this machine, or None when it is not available."""
    try:
        return _entry(name).locate()
    except FileNotFoundError:
        return None


def load_dataset(name, **kwargs):
    """Load a catalogued data set by name (keyword arguments go to its loader)."""
    return _entry(name).load(**kwargs)


def _entry(name):
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(f"unknown data set {name!r}; known: {dataset_names()}") from None
