"""Encryption for HyFDCA: one interface, several backends.

Clients hold a ``KeyHolder`` (encrypt, decrypt); the server an ``Evaluator`` (add,
multiply by plaintext integers, select, scatter-add). Depends only on phe, gmpy2, NumPy.
"""

from crypto._fixed_point import DEFAULT_FRACTIONAL_BITS, FixedPoint
from crypto._interface import EncryptedVector, Evaluator, KeyHolder, OpCounts
from crypto._paillier import paillier_backend
from crypto._plain import plain_backend
from crypto._secure_sum import SecureSum, masked_total

BACKENDS = {"plain": plain_backend, "paillier": paillier_backend}


def make_backend(name, **kwargs):
    """(KeyHolder, Evaluator) of the named backend."""
    try:
        factory = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown crypto backend {name!r}; known: {sorted(BACKENDS)}") from None
    return factory(**kwargs)


__all__ = [
    "BACKENDS",
    "DEFAULT_FRACTIONAL_BITS",
    "EncryptedVector",
    "Evaluator",
    "FixedPoint",
    "KeyHolder",
    "OpCounts",
    "SecureSum",
    "make_backend",
    "masked_total",
    "paillier_backend",
    "plain_backend",
]
