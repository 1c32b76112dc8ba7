"""Grey Relational Analysis (Wang and Rangaiah 2017): pick one candidate from several
that trade off competing metrics, as the paper selects hyperparameters.

For candidate c and metric m with value x_cm, each metric is normalised to [0, 1] so that 1
is best (larger-is-better: (x - min)/(max - min); smaller-is-better: (max - x)/(max - min)),
the deviation from the ideal is D_cm = 1 - normalised, the grey relational coefficient is

    xi_cm = (D_min + zeta D_max) / (D_cm + zeta D_max),   zeta = 0.5 (distinguishing coeff.)

with D_min, D_max over all candidates and metrics, and the grey relational grade is the
mean of xi_cm over metrics. The candidate with the largest grade is chosen. A metric on
which all candidates agree carries no information and gets normalised value 1. A metric's
``resolution`` r widens its span to at least r max |x| (normalised: 1 - |x - best| / span):
min-max normalisation would otherwise stretch a difference below what the metric can
resolve (a time model's 0.01%) to the full range and let it decide; with the wider span
such a difference moves the grade by as little as it is.
"""

import numpy as np


def grey_relational_grades(values, larger_is_better, zeta=0.5, resolution=None):
    """Grades (one per row of ``values``, candidates x metrics); ``larger_is_better`` is one
    bool per metric, ``resolution`` one relative resolution >= 0 per metric (None: 0, only
    equal values agree). Values must be finite (exclude divergent runs first)."""
    values = np.asarray(values, dtype=np.float64)
    better = np.asarray(larger_is_better, dtype=bool)
    resolution = np.zeros(better.size) if resolution is None else \
        np.asarray(resolution, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != better.size:
        raise ValueError(f"values must be candidates x {better.size} metrics, "
                         f"got shape {values.shape}")
    if resolution.shape != better.shape or not np.all(resolution >= 0):
        raise ValueError(f"resolution must be {better.size} numbers >= 0, got {resolution}")
    if values.shape[0] == 0:
        raise ValueError("no candidates to rank (were all runs divergent?)")
    if not np.all(np.isfinite(values)):
        raise ValueError("metric values must be finite; exclude divergent runs first")
    low, high = values.min(axis=0), values.max(axis=0)
    span = np.maximum(high - low, resolution * np.maximum(np.abs(high), np.abs(low)))
    with np.errstate(invalid="ignore", divide="ignore"):
        normalised = 1.0 - np.where(better, high - values, values - low) / span
    normalised[:, span == 0] = 1.0
    deviation = 1.0 - normalised
    d_min, d_max = deviation.min(), deviation.max()
    if d_max == 0.0:
        return np.ones(values.shape[0])
    coefficients = (d_min + zeta * d_max) / (deviation + zeta * d_max)
    return coefficients.mean(axis=1)


def select_by_gra(values, larger_is_better, zeta=0.5, resolution=None):
    """Index of the candidate with the largest grade (the first on ties)."""
    return int(np.argmax(grey_relational_grades(values, larger_is_better, zeta, resolution)))
