"""Index draws of HyFDCA clients: a counter-based generator shared by both engines.

Client k draws its H local sample positions of round t from a SplitMix64 stream keyed
by (its stream tuple, t): the message protocol (one call per client) and the batched
engine (all clients inside one Numba kernel) run the same code, so they draw the same
indices, and a key costs a few integer operations instead of a NumPy Generator (building
5,000 Generators per round would cost more than the rest of a round).

``draw="random"``: H independent uniform positions. ``draw="permuted"``: successive
random permutations of the candidates (forward Fisher-Yates), concatenated and cut to H,
so every candidate is drawn once per pass.

A draw is a draw of *units* (``settings.draw_block`` = b): a unit is one ciphertext block
of the b-slot layout (``hyfdca._packing``: b samples of one holder set), drawn as a
sample is drawn above and taken whole until H positions are filled (of the last unit a
random part); the H positions are then put in a random order (a Fisher-Yates shuffle from
a second key of the round), the order in which the local dual method visits them. With
b = 1 a unit is a sample and the draws are the ones above (no shuffle: they are in
random order already). With b equal to a packed backend's slots, the round touches H / b ciphertexts
per vector instead of nearly all of them. Without the shuffle a block's samples would be
visited one after another every time it is drawn, which on coherent data costs up to 70%
more rounds (docs/algorithm.md section 5.4).
"""

import numpy as np
from numba import njit

from solvers import GAMMA, MUL1, MUL2, mix64

_S11 = np.uint64(11)
_ORDER_SALT = np.uint64(0x6F72646572)  # "order": keys the cut and the visiting order
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


@njit(cache=True)
def draw_units_into(stream_key, round_, units, cand, n_cand, all_units, H, permuted, out,
                    picks, scratch):
    """Write H positions into ``out[:H]``: units (rows of ``units``: positions in their
    first slots, -1 in the rest) drawn as :func:`draw_into` draws among ``n_cand``
    candidates (``cand[:n_cand]``: rows of ``units``; every row when ``all_units``), each
    taken whole but the last, of which a random part fills H. ``picks``: at least H slots
    (unused for units of one slot, which are drawn straight into ``out``); ``scratch``: as
    in :func:`draw_into`, at least ``n_cand`` slots. Every unit holds a position, so at
    most H units are taken. With units of more than one slot the H positions are then put
    in a random order; the cut and the order come from a second key of the round, apart
    from the draw's."""
    if units.shape[1] == 1:  # a unit is a sample: its position, in the drawn order
        draw_into(stream_key, round_, n_cand, H, permuted, out, scratch)
        for t in range(H):
            out[t] = units[out[t] if all_units else cand[out[t]], 0]
        return
    draw_into(stream_key, round_, n_cand, H, permuted, picks, scratch)
    order = round_key(stream_key ^ _ORDER_SALT, round_)
    filled = 0
    t = 0
    while filled < H:
        row = picks[t] if all_units else cand[picks[t]]
        t += 1
        size = 0
        while size < units.shape[1] and units[row, size] >= 0:
            size += 1
        if filled + size <= H:
            out[filled:filled + size] = units[row, :size]
            filled += size
        else:  # the last unit: a random part of it, not always its first slots
            part = units[row, :size].copy()
            order = _shuffle_prefix(order, part, size, H - filled)
            out[filled:H] = part[:H - filled]
            filled = H
    _shuffle_prefix(order, out, H, H)


@njit(cache=True)
def _shuffle_prefix(state, a, n, m):
    """Forward Fisher-Yates on ``a[:n]`` for its first m positions (a uniform random
    m-subset in a random order there; all of ``a[:n]`` shuffled for m = n); returns the
    next state."""
    for i in range(min(m, n - 1)):
        state, j = _below(state, n - i)
        j += i
        tmp = a[i]
        a[i] = a[j]
        a[j] = tmp
    return state


def sample_units(n):
    """The units of a client with ``n`` samples under ``draw_block`` = 1: one per sample."""
    return np.arange(n, dtype=np.int64).reshape(-1, 1)


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


def draw_positions(stream, round_, units, cand, H, permuted):
    """H positions of a client (rows of ``units``, see :func:`draw_units_into`) drawn from
    the candidate units ``cand`` (ascending rows; None: all) for the stream tuple
    ``stream`` in round ``round_``."""
    all_units = cand is None
    n_cand = units.shape[0] if all_units else cand.size
    out = np.empty(H, dtype=np.int64)
    if n_cand == 0:
        return out[:0]
    draw_units_into(stream_key(stream), round_, units,
                    np.zeros(0, np.int64) if all_units else np.asarray(cand, np.int64),
                    n_cand, all_units, H, permuted, out, np.empty(H, dtype=np.int64),
                    np.arange(n_cand if permuted else 0, dtype=np.int64))
    return out
