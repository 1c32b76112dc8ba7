"""Index draws of HyFDCA clients: a counter-based generator shared by both engines.

Client k draws its H local sample positions of round t from a SplitMix64 stream keyed
by (its stream tuple, t): the message protocol (one call per client) and the batched
engine (all clients inside one Numba kernel) run the same code, so they draw the same
indices, and a key costs a few integer operations instead of a NumPy Generator (building
5,000 Generators per round would cost more than the rest of a round).

``draw="random"``: H independent uniform positions. ``draw="permuted"``: successive
random permutations of the candidates (forward Fisher-Yates), concatenated and cut to H,
so every candidate is drawn once per pass.
"""

import numpy as np
from numba import njit

from solvers import GAMMA, MUL1, MUL2, mix64

_S11 = np.uint64(11)
_TWO_M53 = 2.0 ** -53
_MASK64 = (1 << 64) - 1


@njit(cache=True)
def round_key(stream_key, round_):
    """The key of one client's draws in round ``round_``."""
    return mix64(stream_key + GAMMA * np.uint64(round_ + 1))


@njit(cache=True)
def _below(state, n):
    """(next state, a uniform integer in [0, n))."""
    state = state + GAMMA
    u = np.float64(mix64(state) >> _S11) * _TWO_M53
    j = np.int64(u * n)
    return state, min(j, n - 1)


@njit(cache=True)
def draw_into(stream_key, round_, n, H, permuted, out, scratch):
    """Write H positions in [0, n) into ``out[:H]``, for the stream key ``stream_key``
    (uint64) in round ``round_``. ``scratch``: at least n int64 slots holding the identity
    0, 1, ... (left so on return: each pass undoes its swaps, so a pass costs O(H), not
    O(n))."""
    state = round_key(stream_key, round_)
    if not permuted:
        for t in range(H):
            state, out[t] = _below(state, n)
        return
    filled = 0
    while filled < H:
        need = min(n, H - filled)
        swaps = min(need, n - 1)
        for i in range(swaps):  # forward Fisher-Yates; out keeps each swap's partner
            state, j = _below(state, n - i)
            j += i
            out[filled + i] = j
            tmp = scratch[i]
            scratch[i] = scratch[j]
            scratch[j] = tmp
        for i in range(swaps, need):
            out[filled + i] = scratch[i]
        for i in range(swaps - 1, -1, -1):  # position i is final after swap i; undo it
            j = out[filled + i]
            tmp = scratch[i]
            out[filled + i] = tmp
            scratch[i] = scratch[j]
            scratch[j] = tmp
        filled += need


def _mix_int(z):
    """mix64 on a Python int (mod 2^64)."""
    z = ((z ^ (z >> 30)) * int(MUL1)) & _MASK64
    z = ((z ^ (z >> 27)) * int(MUL2)) & _MASK64
    return z ^ (z >> 31)


def stream_key(stream):
    """uint64 key of a stream tuple such as (seed, 1, group) (folded with SplitMix64)."""
    key = 0
    for value in stream:
        key = _mix_int((key + int(GAMMA) + (int(value) & _MASK64)) & _MASK64)
    return np.uint64(key)


def draw_positions(stream, round_, n, H, permuted):
    """H positions in [0, n) for the stream tuple ``stream`` in round ``round_``."""
    out = np.empty(H, dtype=np.int64)
    if n == 0:
        return out[:0]
    draw_into(stream_key(stream), round_, n, H, permuted, out,
              np.arange(n if permuted else 0, dtype=np.int64))
    return out
