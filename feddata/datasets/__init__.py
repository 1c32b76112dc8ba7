"""Data sets: LIBSVM and IDX files, SMS spam text, bundled and seeded synthetic data.

Every loader returns a :class:`Dataset` with X as CSR float64 (int32 indices) or, where
natural, dense float64; binary labels mapped to +-1 with the mapping kept.
"""

from feddata.datasets._base import Dataset, data_search_path, make_dataset, normalize_rows
from feddata.datasets._bundled import load_breast_cancer, load_digits
from feddata.datasets._catalog import CATALOG, dataset_names, load_dataset, locate_dataset
from feddata.datasets._idx import (load_fashion_mnist, load_idx_images, open_maybe_compressed,
                                   read_idx)
from feddata.datasets._libsvm import load_a9a, load_libsvm, load_libsvm_named
from feddata.datasets._synthetic import make_covtype_like, make_mnist_like, make_news20_like
from feddata.datasets._text import load_sms_spam

__all__ = [
    "CATALOG",
    "Dataset",
    "data_search_path",
    "dataset_names",
    "load_a9a",
    "load_breast_cancer",
    "load_dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_idx_images",
    "load_libsvm",
    "load_libsvm_named",
    "load_sms_spam",
    "locate_dataset",
    "make_covtype_like",
    "make_dataset",
    "make_mnist_like",
    "make_news20_like",
    "normalize_rows",
    "open_maybe_compressed",
    "read_idx",
]
