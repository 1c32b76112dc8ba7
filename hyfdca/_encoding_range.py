"""The fixed-point range of a run, checked at set-up (before any round), and the slot
width packed ciphertexts need for it (:func:`slot_capacity_bits`).

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
ACCUMULATED_STEPS_BITS = 32  # packed Enc(alpha) holds R rounds x K clients <= 2^32
SUMMED_PARTS_BITS = 16  # packed sums hold up to 2^16 parts of the codec's range


class FixedPointRangeError(ValueError):
    """The data, lam and frac_bits need values the fixed-point encoding cannot hold."""


def frac_bits_range(settings, max_sq_norm, max_abs_y, n_parts, step_bits):
    """(f_min, f_max): the frac_bits whose fixed point holds the run (``settings``
    bound; ``max_sq_norm``, ``max_abs_y``: over the rows; ``n_parts``: the most parts a
    sum adds, the clients): the rows' unit dual step lam N / (sigma max q_i) keeps
    STEP_PRECISION_BITS bits at f >= f_min, and alpha times a step of ``step_bits`` bits
    and q_i fit a sum's lane at f <= f_max. f_min is -inf for all-zero rows; f_min >
    f_max where no frac_bits holds both."""
    return _range(settings, max_sq_norm, max_abs_y, n_parts, step_bits)[3:]


def _range(settings, max_sq_norm, max_abs_y, n_parts, step_bits):
    """(smallest unit step, largest value, lane capacity in bits, f_min, f_max)."""
    smallest = (math.inf if max_sq_norm == 0.0
                else settings.lam_n / (settings.sigma_bound * max_sq_norm))
    largest = max(max(1.0, max_abs_y) * 2.0 ** step_bits, max_sq_norm)
    capacity = LANE_BITS - math.ceil(math.log2(max(n_parts, 1)))
    f_min = (-math.inf if smallest == math.inf
             else math.ceil(STEP_PRECISION_BITS - math.log2(smallest)))
    return smallest, largest, capacity, f_min, math.floor(capacity - math.log2(largest)) - 1


def check_encoding_range(settings, max_sq_norm, max_abs_y, frac_bits, n_parts, step_bits):
    """FixedPointRangeError unless both values fit ``frac_bits`` (:func:`frac_bits_range`).
    Each client checks its own rows at set-up; the batched engine checks all rows."""
    smallest, _, capacity, f_min, f_max = _range(settings, max_sq_norm, max_abs_y,
                                                 n_parts, step_bits)
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


def slot_capacity_bits(settings, frac_bits, max_bits=LANE_BITS):
    """The bits C a ciphertext slot must hold in this run: every encoded integer the
    server forms stays below 2^C.

    Enc(alpha) adds, each round, m = g 2^s (s <= STEP_BITS, g <= 1) times the sum of the
    dual updates of the K clients taking part, each declared below 2^b (b = f + 1 where
    the loss has a dual box, :func:`~hyfdca._round.dual_update_range_bits`, else the
    codec's max_bits); the evaluator tracks one bound per vector, so after R rounds it
    is below 2^(b + s) R K, which fits C = b + STEP_BITS + ACCUMULATED_STEPS_BITS for
    R K <= 2^ACCUMULATED_STEPS_BITS (K counted per round, R K summed over the rounds).
    The margins and norms sum at most K parts of the codec's range: C >= max_bits +
    SUMMED_PARTS_BITS holds them for K <= 2^SUMMED_PARTS_BITS. An operation beyond either
    is refused (OverflowError), never wrapped."""
    dual_bits = dual_update_range_bits(settings, frac_bits)
    accumulated = (max_bits if dual_bits is None else dual_bits) + STEP_BITS
    return max(max_bits + SUMMED_PARTS_BITS, accumulated + ACCUMULATED_STEPS_BITS)


def packing_options(crypto, settings, frac_bits, max_bits=LANE_BITS):
    """The ``headroom_bits`` of a packing backend (one that takes that option) whose slots
    hold :func:`slot_capacity_bits` and no more (more values per ciphertext: 24 per
    2048-bit modulus where the loss has a dual box, 18 for the squared loss); {} for the
    other backends."""
    factory = BACKENDS.get(crypto)
    if factory is None or "headroom_bits" not in inspect.signature(factory).parameters:
        return {}
    return {"headroom_bits": slot_capacity_bits(settings, frac_bits, max_bits) - max_bits}


def check_slot_capacity(evaluator, settings, frac_bits):
    """ValueError at set-up where the keys' ciphertexts cannot hold this run's sums
    (:func:`slot_capacity_bits`), e.g. keys made for a loss with a dual box used for the
    squared loss, instead of an OverflowError some rounds in."""
    capacity = evaluator.capacity
    needed = slot_capacity_bits(settings, frac_bits)
    if capacity is not None and capacity < 2 ** needed:
        raise ValueError(
            f"the keys' ciphertext slots hold integers below 2^{capacity.bit_length() - 1}, "
            f"but a {settings.loss} run at frac_bits={frac_bits} needs 2^{needed} (R K <= "
            f"2^{ACCUMULATED_STEPS_BITS} rounds x clients): make the keys for this loss "
            f"(hyfdca keys --loss {settings.loss}) or with more headroom_bits")
