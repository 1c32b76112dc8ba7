"""Numerics: convex losses, coordinate steps and centralized solvers.

The bottom layer: this package imports no other package of the project
(docs/architecture.md). Besides the solvers it exports the building blocks that other
packages' Numba kernels call (loss codes, coordinate steps, objective sums, the
counter-based random streams); the SDCA kernels themselves are :mod:`solvers.kernels`.
"""

from solvers._losses import (
    CLASSIFICATION_LOSSES,
    HINGE,
    LOGISTIC,
    LOSS_CODES,
    SMOOTHED_HINGE,
    SQUARED,
    SQUARED_HINGE,
    coordinate_step,
    loss_code,
    loss_derivative,
    loss_value,
    neg_conjugate,
    projected_dual,
    weighted_objective_sums,
)
from solvers._random import GAMMA, MUL1, MUL2, mix64, splitmix64
from solvers._reference import (
    REFERENCE_LOSSES,
    centralized_solution,
    default_cache_dir,
    reference_optimum,
    ridge_closed_form,
)
from solvers._sdca import (
    SDCAResult,
    ShrinkingHinge,
    encode_targets,
    epoch_order,
    objectives,
    primal_objective,
    sdca,
    shrinking_seeds,
    sign_labels,
)
from solvers._validation import (as_csr, check_classification_labels, check_finite,
                                 check_labels, check_positive, check_validation_set,
                                 check_whole, is_number, is_whole)

__all__ = [
    "CLASSIFICATION_LOSSES",
    "GAMMA",
    "HINGE",
    "LOGISTIC",
    "LOSS_CODES",
    "MUL1",
    "MUL2",
    "REFERENCE_LOSSES",
    "SDCAResult",
    "SMOOTHED_HINGE",
    "SQUARED",
    "SQUARED_HINGE",
    "ShrinkingHinge",
    "as_csr",
    "centralized_solution",
    "check_classification_labels",
    "check_finite",
    "check_labels",
    "check_positive",
    "check_validation_set",
    "check_whole",
    "coordinate_step",
    "default_cache_dir",
    "encode_targets",
    "epoch_order",
    "is_number",
    "is_whole",
    "loss_code",
    "loss_derivative",
    "loss_value",
    "mix64",
    "neg_conjugate",
    "projected_dual",
    "objectives",
    "primal_objective",
    "reference_optimum",
    "ridge_closed_form",
    "sdca",
    "shrinking_seeds",
    "sign_labels",
    "splitmix64",
    "weighted_objective_sums",
]
