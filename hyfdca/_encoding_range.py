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
  y), multiplied by a line-search step of ``step_bits`` fractional bits; and q_i, which
  the set-up exchange encodes.

A run outside this range is refused with :class:`FixedPointRangeError`, which says which
bound fails and the fix (rescale, or the ``frac_bits`` range that would work). Margins
can grow further along a run; a value that leaves the lane later is reported as a
fixed-point overflow by every backend, never wrapped.
"""

import math

STEP_PRECISION_BITS = 4  # the largest-norm row's unit step keeps at least 1/16 resolution
LANE_BITS = 62


class FixedPointRangeError(ValueError):
    """The data, lam and frac_bits need values the fixed-point encoding cannot hold."""


def check_encoding_range(settings, max_sq_norm, max_abs_y, frac_bits, n_parts, step_bits):
    """FixedPointRangeError unless both values fit ``frac_bits`` (``settings`` bound;
    ``max_sq_norm``, ``max_abs_y``: over the rows checked; ``n_parts``: the most parts a
    sum adds, the clients). Each client checks its own rows at set-up; the batched engine
    checks all rows."""
    smallest = (math.inf if max_sq_norm == 0.0
                else settings.lam_n / (settings.sigma_bound * max_sq_norm))
    largest = max(max(1.0, max_abs_y) * 2.0 ** step_bits, max_sq_norm)
    capacity = LANE_BITS - math.ceil(math.log2(max(n_parts, 1)))
    f_min = (-math.inf if smallest == math.inf
             else math.ceil(STEP_PRECISION_BITS - math.log2(smallest)))
    f_max = math.floor(capacity - math.log2(largest)) - 1
    fix = (f"frac_bits between {max(f_min, 1)} and {f_max} would hold this run"
           if f_min <= f_max else "no frac_bits holds both: rescale the rows (e.g. to unit "
           "norm) and the targets, or raise lam")
    if frac_bits < f_min:
        raise FixedPointRangeError(
            f"fixed-point range: with frac_bits={frac_bits} the dual updates of the rows "
            f"with the largest norms would round to 0 (their unit step lam N / (sigma "
            f"max q_i) = {smallest:.3g} needs frac_bits >= {f_min}; max ||x_i|| = "
            f"{math.sqrt(max_sq_norm):.3g}, lam N = {settings.lam_n:.3g}, sigma = "
            f"{settings.sigma_bound:.3g}); {fix}")
    if frac_bits > f_max:
        raise FixedPointRangeError(
            f"fixed-point range: with frac_bits={frac_bits} the values every run needs "
            f"(alpha up to {max(1.0, max_abs_y):.3g} times a line-search step of "
            f"{step_bits} fractional bits, and q_i up to {max_sq_norm:.3g}) would overflow "
            f"the {capacity}-bit lane of a sum of {n_parts} parts; {fix}")
