"""Fixed-point encoding shared by every backend.

A real x is carried as the integer round(x * 2^f) (f fractional bits). Products with an
integer-encoded scalar m / 2^b carry f + b fractional bits; callers track the scale.
Values whose encoding would not fit ``max_bits`` raise OverflowError, never wrap.
"""

import numpy as np

DEFAULT_FRACTIONAL_BITS = 32


class FixedPoint:
    """round(x * 2^frac_bits) as int64, with an overflow check against ``max_bits``."""

    def __init__(self, frac_bits=DEFAULT_FRACTIONAL_BITS, max_bits=62):
        for name, value in (("frac_bits", frac_bits), ("max_bits", max_bits)):
            if isinstance(value, bool) or not float(value).is_integer():
                raise ValueError(f"{name} must be a whole number of bits, got {value!r}")
        if not 0 < int(frac_bits) < int(max_bits) <= 62:
            raise ValueError(f"need 0 < frac_bits < max_bits <= 62 (encodings are int64), "
                             f"got {frac_bits}, {max_bits}")
        self.frac_bits = int(frac_bits)
        self.max_bits = int(max_bits)

    def encode(self, values, extra_bits=0, max_bits=None):
        """int64 array of round(x * 2^(frac_bits + extra_bits)), each below 2^max_bits in
        magnitude (default and at most the codec's max_bits; a caller may declare a
        narrower range)."""
        bits = self.max_bits if max_bits is None else int(max_bits)
        if not 0 < bits <= self.max_bits:
            raise ValueError(f"a declared range of {bits} bits is outside 1..{self.max_bits}")
        values = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            raise ValueError("cannot encode NaN or infinite values")
        scaled = np.round(np.ldexp(values, self.frac_bits + extra_bits))
        limit = 2.0 ** bits
        if scaled.size and np.max(np.abs(scaled)) >= limit:
            raise OverflowError(
                f"fixed-point overflow: |x| = {np.max(np.abs(values)):.6g} needs more than "
                f"{bits} bits at {self.frac_bits + extra_bits} fractional bits"
            )
        return scaled.astype(np.int64)

    def decode(self, integers, extra_bits=0):
        """x = n / 2^(frac_bits + extra_bits) for integer (int64 or Python int) input."""
        return np.ldexp(np.asarray(integers, dtype=np.float64), -(self.frac_bits + extra_bits))

    def check(self, integers):
        """OverflowError if any integer reaches 2^max_bits in magnitude."""
        if integers.size and np.max(np.abs(integers.astype(np.float64))) >= 2.0 ** self.max_bits:
            raise OverflowError(f"fixed-point overflow: a result needs more than "
                                f"{self.max_bits} bits")
        return integers
