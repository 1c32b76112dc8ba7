"""np.sum of a float64 array, bit for bit, inside Numba kernels.

Where the message protocol sums with NumPy (``np.sum``: pairwise summation) and a Numba
kernel must give the same bits, the kernel calls :func:`pairwise_sum`.
"""

import numpy as np
from numba import njit


@njit(cache=True)
def _block_sum(a, lo, n):
    """NumPy's pairwise_sum for n <= 128: eight accumulators, then the rest in order."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - (n % 8):
        j = lo + i
        r0 += a[j]
        r1 += a[j + 1]
        r2 += a[j + 2]
        r3 += a[j + 3]
        r4 += a[j + 4]
        r5 += a[j + 5]
        r6 += a[j + 6]
        r7 += a[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True)
def pairwise_sum(a, lo, n):
    """np.sum(a[lo:lo + n]) for float64, bit for bit: NumPy's pairwise summation (halves
    cut at multiples of 8 down to blocks of 128), without recursion (a recursive kernel
    crashes when Numba loads it from its cache). One difference: a sum of no terms, or of
    -0.0 terms only, is -0.0 here and +0.0 in np.sum (both engines call this kernel, so
    they agree)."""
    if n <= 128:
        return _block_sum(a, lo, n)
    depth = 128
    f_lo = np.empty(depth, dtype=np.int64)
    f_n = np.empty(depth, dtype=np.int64)
    f_stage = np.empty(depth, dtype=np.int64)
    vals = np.empty(depth)
    sp = 0
    vp = 0
    f_lo[0], f_n[0], f_stage[0] = lo, n, 0
    sp = 1
    while sp > 0:
        top = sp - 1
        m = f_n[top]
        if m <= 128:
            vals[vp] = _block_sum(a, f_lo[top], m)
            vp += 1
            sp -= 1
            continue
        n2 = m // 2
        n2 -= n2 % 8
        if f_stage[top] == 0:
            f_stage[top] = 1
            f_lo[sp], f_n[sp], f_stage[sp] = f_lo[top], n2, 0
            sp += 1
        elif f_stage[top] == 1:
            f_stage[top] = 2
            f_lo[sp], f_n[sp], f_stage[sp] = f_lo[top] + n2, m - n2, 0
            sp += 1
        else:
            vals[vp - 2] = vals[vp - 2] + vals[vp - 1]
            vp -= 1
            sp -= 1
    return vals[0]
