"""Encryption for HyFDCA: one interface, several backends.

Clients hold a ``KeyHolder`` (encrypt, decrypt); the server an ``Evaluator`` (add,
multiply by plaintext integers, select, scatter-add). Keys are made and handed out by
``deal_keys`` only. Backends: ``plain`` (counts only), ``paillier`` (phe, the reference),
``fast-paillier`` (gmpy2: packing, DJN short exponents, CRT, a process pool), ``bfv``
(lattice encryption on TenSEAL: 8,192 slots per ciphertext) and ``mask`` (ChaCha20
one-time masks over Z_2^64 with a linear MAC). Depends on phe, gmpy2, tenseal,
cryptography and NumPy.
"""

from crypto._bfv import BFVCiphertext, bfv_backend
from crypto._fast_paillier import fast_paillier_backend
from crypto._fixed_point import DEFAULT_FRACTIONAL_BITS, FixedPoint
from crypto._interface import CiphertextError, EncryptedVector, Evaluator, KeyHolder, OpCounts
from crypto._keys import BACKENDS, DealtKeys, deal_keys, make_backend
from crypto._mask import mask_backend
from crypto._paillier import paillier_backend
from crypto._plain import plain_backend
from crypto._secure_sum import SecureSum, SecureSumError, masked_total, unmasked_total
from crypto._wire import vector_from_arrays, vector_to_arrays

__all__ = [
    "BACKENDS",
    "BFVCiphertext",
    "CiphertextError",
    "DEFAULT_FRACTIONAL_BITS",
    "DealtKeys",
    "EncryptedVector",
    "Evaluator",
    "FixedPoint",
    "KeyHolder",
    "OpCounts",
    "SecureSum",
    "SecureSumError",
    "bfv_backend",
    "deal_keys",
    "fast_paillier_backend",
    "make_backend",
    "mask_backend",
    "masked_total",
    "paillier_backend",
    "plain_backend",
    "unmasked_total",
    "vector_from_arrays",
    "vector_to_arrays",
]
