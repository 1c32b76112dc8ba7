"""The fixed-point range is checked at set-up, for every backend and both engines."""

import numpy as np
import pytest

from feddata import partition as P
from hyfdca import (BatchedHyFDCA, FixedPointRangeError, HyFDCAClassifier, HyFDCARun,
                    HyFDCASettings)
from solvers import centralized_solution


@pytest.fixture(scope="module")
def huge_rows(cancer):
    """The breast-cancer rows scaled to norms between 1e6 and 1e15."""
    X, y = cancer
    X, y = X[:240], y[:240]
    scale = np.logspace(6, 15, X.shape[0]) / np.linalg.norm(X, axis=1)
    return X * scale[:, None], y


def settings(loss="hinge", lam=1e-3):
    return HyFDCASettings.from_variant("auto", loss=loss, lam=lam)


@pytest.mark.parametrize("crypto", ["plain", "mask", "paillier"])
def test_rows_too_large_for_the_encoding_are_refused_before_training(huge_rows, crypto):
    fed = P.hybrid_grid(*huge_rows, 2, 2)
    options = dict(n_length=512, insecure=True) if crypto == "paillier" else None
    with pytest.raises(FixedPointRangeError, match=r"would round to 0.*frac_bits >= \d+.*"
                                                   r"rescale the rows"):
        HyFDCARun(fed, settings(), crypto=crypto, crypto_options=options)
    with pytest.raises(FixedPointRangeError, match="would round to 0"):
        BatchedHyFDCA(fed, settings())


def test_the_estimator_refuses_them_too_where_the_centralized_solver_learns(huge_rows):
    X, y = huge_rows
    assert np.isfinite(centralized_solution(X, y, lam=1e-3)[0])
    with pytest.raises(FixedPointRangeError, match="would round to 0"):
        HyFDCAClassifier(lam=1e-3, max_rounds=5).fit(X, y)


def test_the_error_names_a_frac_bits_that_works_and_it_does(cancer):
    X, y = cancer
    fed = P.hybrid_grid(X[:240] * 300, y[:240], 2, 2)  # norms up to ~6e3
    with pytest.raises(FixedPointRangeError, match=r"frac_bits between (\d+) and (\d+)") as err:
        HyFDCARun(fed, settings(), frac_bits=20)
    low = int(err.value.args[0].split("frac_bits between ")[1].split(" ")[0])
    HyFDCARun(fed, settings(), frac_bits=low)  # the set-up exchange passes
    run = BatchedHyFDCA(fed, settings(), frac_bits=low)
    for _ in range(3):
        run.step()
    assert np.count_nonzero(run.certificate()[2]) > 0


def test_too_many_fractional_bits_for_the_lane_are_refused(cancer):
    X, y = cancer
    fed = P.hybrid_grid(X[:240], y[:240], 2, 2)  # auto-full: line search, 16 step bits
    lane = "would overflow the 60-bit lane of a sum of 4 parts"
    with pytest.raises(FixedPointRangeError, match=lane):
        BatchedHyFDCA(fed, settings(), frac_bits=50)
    with pytest.raises(FixedPointRangeError, match=r"alpha up to 1e\+03"):
        HyFDCARun(P.hybrid_grid(X[:240], y[:240] * 1e3, 2, 2), settings("squared"),
                  frac_bits=40)
