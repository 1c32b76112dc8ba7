"""Convergence-rate experiments: HyFDCA against its baselines as in the paper's section 5.2
(hyperparameters by random search and Grey Relational Analysis, equal outer iterations and
equal wall time, Figure 3 style plots, the verdict table)."""

from hyfdca.experiments._compare import (Comparison, compare, final_values, winners,
                                         with_defaults)
from hyfdca.experiments._gra import grey_relational_grades, select_by_gra
from hyfdca.experiments._methods import (ALL_METHODS, METHODS, REFERENCE_COSTS,
                                         SECONDS_PER_OP, SPACES, Problem, encryption_seconds,
                                         run_method)
from hyfdca.experiments._metrics import (METRIC_NAMES, moving_average, selection_metrics,
                                         smoothing_window)
from hyfdca.experiments._search import Tuning, tune
from hyfdca.experiments._report import verdict_table
from hyfdca.experiments._suite import (FULL, QUICK, check_config, data_digest, prepare,
                                       run_suite, source_digest)

__all__ = ["ALL_METHODS", "FULL", "METHODS", "METRIC_NAMES", "QUICK", "REFERENCE_COSTS",
           "SECONDS_PER_OP", "SPACES", "Comparison", "Problem", "Tuning", "check_config",
           "compare", "data_digest", "encryption_seconds", "final_values",
           "grey_relational_grades", "moving_average", "prepare", "run_method", "run_suite",
           "select_by_gra", "selection_metrics", "smoothing_window", "source_digest", "tune",
           "verdict_table", "winners", "with_defaults"]
