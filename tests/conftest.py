"""Shared fixtures: small real data sets, dense and CSR, and the shared data folder."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.preprocessing import StandardScaler

SHARED_FILES = ("a9a", "SMSSpamCollection")


@pytest.fixture(scope="session")
def shared_data():
    """The first folder of the data search path ($HYFDCA_DATA, then the development
    checkout's ../shared/data, then ~/hyfdca_data) that holds a9a and the SMS collection.
    Tests that need it skip with a message where none does."""
    from feddata.datasets import data_search_path

    folders = data_search_path()
    for folder in folders:
        if all((folder / name).is_file() for name in SHARED_FILES):
            return folder
    pytest.skip(f"no folder of the data search path {[str(f) for f in folders]} holds "
                f"{' and '.join(SHARED_FILES)} (the shared data is only in the dev checkout)")


@pytest.fixture(scope="session")
def cancer():
    """Breast cancer, standardised, labels +-1 (569 x 30, dense)."""
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), np.where(y == 1, 1.0, -1.0)


@pytest.fixture(scope="session")
def sparse_binary():
    """A small seeded sparse problem (300 x 80, ~10% dense) with +-1 labels."""
    rng = np.random.default_rng(7)
    X = sp.random(300, 80, density=0.1, random_state=rng, format="csr")
    X.data = rng.normal(size=X.nnz)
    w = rng.normal(size=80)
    y = np.where(X @ w + 0.3 * rng.normal(size=300) > 0, 1.0, -1.0)
    return X, y


@pytest.fixture(scope="session")
def sparse_non_negative():
    """make(n, d, density) -> (X, y): seeded sparse non-negative rows that share little
    direction (coherence about 0.01-0.02), an identity block so that no row is empty, and
    random +-1 labels."""
    def make(n, d, density, seed=5):
        rng = np.random.default_rng(seed)
        X = (sp.random(n, d, density=density, random_state=rng, format="csr")
             + sp.eye(n, d, format="csr")).tocsr()
        return X, np.where(rng.random(n) < 0.5, 1.0, -1.0)
    return make


@pytest.fixture(scope="session")
def digits_small():
    """First 400 digits scaled to [0, 1], 10 classes (multi-class, dense)."""
    X, y = load_digits(return_X_y=True)
    return X[:400] / 16.0, y[:400]
