"""Numerics: convex losses, coordinate steps and centralized solvers.

This package never imports ``hyfdca``, ``crypto`` or ``baselines``.
"""

from solvers._losses import (
    CLASSIFICATION_LOSSES,
    LOSS_CODES,
    coordinate_step,
    loss_code,
    loss_value,
    neg_conjugate,
)
from solvers._reference import REFERENCE_LOSSES, reference_optimum, ridge_closed_form
from solvers._sdca import SDCAResult, encode_targets, objectives, primal_objective, sdca
from solvers._validation import as_csr, check_finite

__all__ = [
    "CLASSIFICATION_LOSSES",
    "LOSS_CODES",
    "REFERENCE_LOSSES",
    "SDCAResult",
    "as_csr",
    "check_finite",
    "coordinate_step",
    "encode_targets",
    "loss_code",
    "loss_value",
    "neg_conjugate",
    "objectives",
    "primal_objective",
    "reference_optimum",
    "ridge_closed_form",
    "sdca",
]
