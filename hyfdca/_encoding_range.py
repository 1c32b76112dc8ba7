"""The fixed-point range of a run, checked at set-up (before any round).

Every value crosses the protocol as round(x 2^f) in a signed 64-bit lane (f =
``frac_bits``; a sum of K parts keeps ceil(log2 K) bits of headroom, so values need
|x| 2^f < 2^(62 - ceil(log2 K))). Two values of the problem must be representable
(docs/algorithm.md section 1 for the symbols):

* the smallest step: SDCA's coordinate step at a unit margin violation is about
  lam N / (sigma q_i); for the row of largest norm it must keep STEP_PRECISION_BITS
  significant bits, or the dual updates of the rows with the largest norms round to 0
  and those rows are silently left out of the model;
* the largest value every run needs: alpha of size max(1, max |y_i|) (|alpha| <= 1 for
  the classification losses; the squared loss's alpha* = y - x . w* and its margins reach
  y), multiplied by a line-search step of ``step_bits`` fractional bits.

A run outside this range is refused with :class:`FixedPointRangeError`, which says which
bound fails and the fix (rescale, or the ``frac_bits`` range that would work). Margins
can grow further along a run; a value that leaves the lane later is reported as a
fixed-point overflow by every backend, never wrapped.
"""

import math

import numpy as np

STEP_PRECISION_BITS = 4  # the largest-norm row's unit step keeps at least 1/16 resolution
LANE_BITS = 62


class FixedPointRangeError(ValueError):
    """The data, lam and frac_bits need values the fixed-point encoding cannot hold."""


def encoding_bounds(dataset, settings, step_bits):
    """(smallest step, largest required value) of a run on ``dataset`` with bound
    ``settings`` (see the module docstring); the smallest is inf on all-zero data."""
    q_max = float(np.max(dataset.sq_row_norms, initial=0.0))
    smallest = math.inf if q_max == 0.0 else settings.lam_n / (settings.sigma_bound * q_max)
    alpha = max(1.0, float(np.max(np.abs(dataset.labels), initial=0.0)))
    return smallest, alpha * 2.0 ** step_bits


def check_encoding_range(dataset, settings, frac_bits, n_parts, step_bits):
    """FixedPointRangeError unless both values fit ``frac_bits`` (``n_parts``: the most
    parts a sum adds, the clients)."""
    smallest, largest = encoding_bounds(dataset, settings, step_bits)
    capacity = LANE_BITS - math.ceil(math.log2(max(n_parts, 1)))
    f_min = (-math.inf if smallest == math.inf
             else math.ceil(STEP_PRECISION_BITS - math.log2(smallest)))
    f_max = math.floor(capacity - math.log2(largest)) - 1
    fix = (f"frac_bits between {max(f_min, 1)} and {f_max} would hold this run"
           if f_min <= f_max else "no frac_bits holds both: rescale the rows (e.g. to unit "
           "norm) and the targets, or raise lam")
    if frac_bits < f_min:
        q_max = float(np.max(dataset.sq_row_norms))
        raise FixedPointRangeError(
            f"fixed-point range: with frac_bits={frac_bits} the dual updates of the rows "
            f"with the largest norms would round to 0 (their unit step lam N / (sigma "
            f"max q_i) = {smallest:.3g} needs frac_bits >= {f_min}; max ||x_i|| = "
            f"{math.sqrt(q_max):.3g}, lam N = {settings.lam_n:.3g}, sigma = "
            f"{settings.sigma_bound:.3g}); {fix}")
    if frac_bits > f_max:
        raise FixedPointRangeError(
            f"fixed-point range: with frac_bits={frac_bits} the values every run needs "
            f"(alpha up to {largest / 2.0 ** step_bits:.3g} times a line-search step of "
            f"{step_bits} fractional bits) would overflow the {capacity}-bit lane of a sum "
            f"of {n_parts} parts; {fix}")
