"""Losses: conjugates against brute force, coordinate steps against brute force."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solvers import CLASSIFICATION_LOSSES, LOSS_CODES, coordinate_step, loss_code
from solvers import loss_value, neg_conjugate

ALL_LOSSES = sorted(LOSS_CODES)
SMOOTHING = 0.7
Z_GRID = np.linspace(-60.0, 60.0, 240_001)


def _loss_on_grid(code, y):
    return np.array([loss_value(code, z, y, SMOOTHING) for z in Z_GRID])


@pytest.mark.parametrize("loss", ALL_LOSSES)
@pytest.mark.parametrize("y", [-1.0, 1.0])
def test_conjugate_matches_brute_force_supremum(loss, y):
    """-l*(-a) = -sup_z(-a z - l(z)) = inf_z (a z + l(z))."""
    code = loss_code(loss)
    values = _loss_on_grid(code, y)
    for beta in [0.0, 0.1, 0.37, 0.5, 0.9, 1.0] + ([1.7] if loss == "squared_hinge" else []):
        a = beta * y
        brute = np.min(a * Z_GRID + values)
        assert neg_conjugate(code, a, y, SMOOTHING) == pytest.approx(brute, abs=2e-6)


@pytest.mark.parametrize("loss", CLASSIFICATION_LOSSES)
def test_conjugate_is_minus_infinity_outside_domain(loss):
    code = loss_code(loss)
    assert neg_conjugate(code, -0.1, 1.0, SMOOTHING) == -np.inf
    if loss != "squared_hinge":
        assert neg_conjugate(code, 1.1, 1.0, SMOOTHING) == -np.inf


def _step_objective(code, alpha, z, y, s, delta):
    return neg_conjugate(code, alpha + delta, y, SMOOTHING) - z * delta - 0.5 * s * delta**2


@settings(max_examples=150, deadline=None)
@given(
    loss=st.sampled_from(ALL_LOSSES),
    beta=st.floats(0.0, 1.0),
    z=st.floats(-5.0, 5.0),
    y=st.sampled_from([-1.0, 1.0]),
    s=st.floats(1e-3, 50.0),
)
def test_coordinate_step_maximises_its_one_dimensional_objective(loss, beta, z, y, s):
    code = loss_code(loss)
    alpha = beta * y if loss != "squared" else beta * 3.0 - 1.0
    delta = coordinate_step(code, alpha, z, y, s, SMOOTHING)
    best = _step_objective(code, alpha, z, y, s, delta)
    assert np.isfinite(best)
    if loss == "squared":
        candidates = alpha + np.linspace(-20.0, 20.0, 40_001)
    elif loss == "squared_hinge":
        candidates = y * np.linspace(0.0, 20.0, 40_001)
    else:
        candidates = y * np.linspace(0.0, 1.0, 20_001)
    grid = np.array([_step_objective(code, alpha, z, y, s, c - alpha) for c in candidates])
    assert best >= grid.max() - 1e-9


def test_unknown_loss_is_named():
    with pytest.raises(ValueError, match="unknown loss 'hingee'"):
        loss_code("hingee")


@settings(max_examples=200, deadline=None)
@given(loss=st.sampled_from(ALL_LOSSES), y=st.sampled_from([-1.0, 1.0]),
       z=st.floats(-30.0, 30.0))
def test_derivative_matches_central_differences(loss, y, z):
    from solvers._losses import loss_derivative

    code, h = loss_code(loss), 1e-6
    kinks = [y, y * (1.0 - SMOOTHING)] if loss in ("hinge", "smoothed_hinge") else [y]
    if loss != "squared" and min(abs(z - k) for k in kinks) < 1e-4:
        return  # the subgradient is not a derivative at the kink
    numeric = (loss_value(code, z + h, y, SMOOTHING)
               - loss_value(code, z - h, y, SMOOTHING)) / (2 * h)
    assert loss_derivative(code, z, y, SMOOTHING) == pytest.approx(numeric, abs=1e-6)


@pytest.mark.parametrize("loss", ALL_LOSSES)
@pytest.mark.parametrize("y", [-1.0, 1.0])
def test_coordinate_step_on_an_empty_row(loss, y):
    """q_i = 0 (a sample with no non-zero feature) gives curvature s = 0: the step must
    still maximise the 1-D objective, not divide by zero."""
    code = loss_code(loss)
    alpha, z = 0.3 * y, 0.0
    delta = coordinate_step(code, alpha, z, y, 0.0, SMOOTHING)
    grid = np.linspace(-3.0, 3.0, 60_001)
    values = np.array([neg_conjugate(code, alpha + d, y, SMOOTHING) - z * d for d in grid])
    best = np.max(values)
    assert neg_conjugate(code, alpha + delta, y, SMOOTHING) - z * delta >= best - 1e-6
