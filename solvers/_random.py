"""SplitMix64 (Steele, Lea and Flood 2014): the counter-based generator behind every seeded
draw made inside a Numba kernel (SDCA's shuffles, HyFDCA's client index draws).

State advances by a fixed odd constant; each output is the state put through a mixing
function, so a stream is fully determined by its starting state (same seed, same bits).
"""

import numpy as np
from numba import njit

GAMMA = np.uint64(0x9E3779B97F4A7C15)
MUL1 = np.uint64(0xBF58476D1CE4E5B9)
MUL2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


@njit(cache=True)
def mix64(z):
    """SplitMix64's output function of a 64-bit state."""
    z = (z ^ (z >> _S30)) * MUL1
    z = (z ^ (z >> _S27)) * MUL2
    return z ^ (z >> _S31)


@njit(cache=True)
def splitmix64(state):
    """Next 64 random bits of the generator whose state is ``state[0]`` (advanced)."""
    state[0] += GAMMA
    return mix64(state[0])
