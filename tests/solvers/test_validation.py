"""solvers' input checks: values float64 cannot hold are refused by name, never changed."""

import re

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import as_csr, check_classification_labels, check_positive, is_number


@pytest.mark.parametrize("X, message", [
    (np.array([[1 + 2j, 0], [0, 3j]]), r"X is complex \(complex128\)"),
    (sp.csr_matrix(np.array([[1 + 2j, 0]])), r"X is complex \(complex128\)"),
    (np.array([[2**53 + 1, 0]], dtype=np.int64),
     r"X holds integers up to 9.01e\+15, beyond 2\^53"),
    (np.array([[np.iinfo(np.int64).min, 0]]), r"beyond 2\^53"),
    (np.array([["a", "b"]]), "X must be numeric, got dtype <U1"),
])
def test_values_float64_cannot_hold_are_refused(X, message):
    with pytest.raises(ValueError, match=message):
        as_csr(X)


def test_bools_are_zeros_and_ones_dense_or_sparse():
    dense = np.array([[True, False], [False, True]])
    for X in (dense, sp.csr_matrix(dense)):
        np.testing.assert_array_equal(as_csr(X).toarray(), dense.astype(float))
    np.testing.assert_array_equal(as_csr(np.array([[2**53, -3]])).toarray(), [[2.0**53, -3]])


def test_a_label_error_names_labels_that_are_not_numbers():
    with pytest.raises(ValueError, match="labels found: 'ham', 'spam'"):
        check_classification_labels(np.array(["spam", "ham"]), "hinge")


@pytest.mark.parametrize("value, number", [
    (1, True), (1.5, True), (np.float32(0.5), True), (np.int64(2), True),
    (True, False), (np.bool_(True), False), ("1", False), (None, False),
])
def test_a_number_is_an_int_float_or_numpy_number_never_a_bool(value, number):
    assert is_number(value) is number


@pytest.mark.parametrize("value", [True, "1", 0, -1.0, np.inf, np.nan])
def test_check_positive_names_what_is_not_a_positive_number(value):
    with pytest.raises(ValueError, match=f"step must be a positive finite number, got "
                                         f"{re.escape(repr(value))}"):
        check_positive(value, "step")
