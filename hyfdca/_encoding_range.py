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

import inspect
import math

from crypto import BACKENDS
from hyfdca._round import STEP_BITS, dual_update_range_bits

STEP_PRECISION_BITS = 4  # the largest-norm row's unit step keeps at least 1/16 resolution
LANE_BITS = 62
ACCUMULATED_STEPS_BITS = 32  # packed Enc(alpha) holds R K <= 2^32 holder steps
SUMMED_PARTS_BITS = 16  # packed sums hold up to 2^16 parts of the codec's range


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


def packing_options(crypto, settings, frac_bits, max_bits=LANE_BITS):
    """The ``headroom_bits`` of a packing backend (``crypto`` takes that option) that fit
    this run's values and no more (more values per ciphertext); {} where the codec's
    whole range must stay (the squared loss) or the backend does not pack.

    A slot holds encoded integers below 2^(max_bits + headroom). The server's Enc(alpha)
    adds, each round, m = g 2^s (s <= STEP_BITS, g <= 1) times the sum of the present
    holders' p_i^k dalpha_i, each declared below 2^(f + 1)
    (:func:`~hyfdca._round.dual_update_range_bits`): after R rounds with K holders it is
    below 2^(f + 1 + s) R K, which fits for R K <= 2^ACCUMULATED_STEPS_BITS; the margins
    and norms sum at most K parts of the codec's range, which fits for K <= 2^
    SUMMED_PARTS_BITS. A run beyond either is refused (OverflowError), never wrapped."""
    factory = BACKENDS.get(crypto)
    if factory is None or "headroom_bits" not in inspect.signature(factory).parameters:
        return {}
    dual_bits = dual_update_range_bits(settings, frac_bits)
    if dual_bits is None:
        return {}
    capacity = max(max_bits + SUMMED_PARTS_BITS,
                   dual_bits + STEP_BITS + ACCUMULATED_STEPS_BITS)
    return {"headroom_bits": capacity - max_bits}
