"""Paillier through phe (the reference backend): one ciphertext per fixed-point value.

Integers are encrypted with phe's ``raw_encrypt`` at one fixed exponent (the codec's
fractional bits; negative values as n - |x|), so sums and scalar products never
re-encode; decryption maps values above n/2 back to negatives.

Integrity checks on decryption (Paillier is malleable, so a tampered ciphertext decrypts
to some other value; what can be detected is): a ciphertext outside 1..n^2-1 or sharing a
factor with n, a payload whose length differs from the vector's, a non-integer item, and a
decrypted value beyond the vector's tracked bound (what a ciphertext of another key or a
random tampering gives with overwhelming probability). Each raises CiphertextError.
"""

import gmpy2
import numpy as np
from phe import paillier

from crypto._fixed_point import FixedPoint
from crypto._interface import CiphertextError, Evaluator, KeyHolder, OpCounts

DEFAULT_KEYSIZE = 2048
MIN_SECURE_KEYSIZE = 2048


def whole(value):
    """Whether ``value`` is an int (NumPy's too), not a bool (crypto imports no project
    package: solvers.is_whole's counterpart here)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_key_size(n_length, insecure):
    """ValueError for a modulus under 2048 bits unless ``insecure`` (tests only), or one
    that is not a whole number of bits."""
    if not whole(n_length):
        raise ValueError(f"the modulus length must be a whole number of bits, got "
                         f"{n_length!r}")
    n_length = int(n_length)
    if n_length < MIN_SECURE_KEYSIZE and not insecure:
        raise ValueError(f"Paillier keys under {MIN_SECURE_KEYSIZE} bits are insecure "
                         f"(got {n_length}); pass insecure=True only in tests")
    if n_length < 128 or n_length % 2:
        raise ValueError(f"the modulus length must be even and at least 128 bits, "
                         f"got {n_length}")
    return n_length


def object_array(items):
    items = list(items)
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def check_ciphertexts(payload, expected, n, nsq):
    """CiphertextError unless ``payload`` holds ``expected`` integers c, 0 < c < n^2,
    coprime to n (the only ciphertexts a Paillier encryption can produce)."""
    if not isinstance(payload, np.ndarray) or payload.ndim != 1 or len(payload) != expected:
        got = len(payload) if hasattr(payload, "__len__") else type(payload).__name__
        raise CiphertextError(f"truncated or malformed payload: {got} ciphertexts where "
                              f"the vector needs {expected}")
    out = []
    for c in payload:
        if not isinstance(c, (int, type(gmpy2.mpz(0)))) or isinstance(c, bool):
            raise CiphertextError(f"malformed ciphertext of type {type(c).__name__}")
        c = gmpy2.mpz(c)
        if not 0 < c < nsq or gmpy2.gcd(c, n) != 1:
            raise CiphertextError("tampered ciphertext (or one of another key): not an "
                                  "element of Z*_{n^2} (out of range or sharing a factor "
                                  "with n)")
        out.append(c)
    return out


def signed_checked(values, n, bound):
    """Plaintexts mod n as signed integers; CiphertextError beyond ``bound``."""
    half = n // 2
    out = [int(v - n if v > half else v) for v in values]
    if out and max(abs(v) for v in out) > bound:
        raise CiphertextError(
            f"a ciphertext decrypts outside the range its operations allow "
            f"(|x| < 2^{int(bound).bit_length()} encoded): it was tampered with or made "
            f"under another key")
    return out


def power(c, k, nsq):
    """c^k mod n^2 for a signed integer k (negative k through the inverse)."""
    k = int(k)
    if k < 0:
        return gmpy2.powmod(gmpy2.invert(c, nsq), -k, nsq)
    return gmpy2.powmod(c, k, nsq)


class PaillierArithmetic(Evaluator):
    """Server-side Paillier arithmetic mod n^2, shared by both Paillier backends:
    Enc(a) Enc(b) = Enc(a + b), Enc(a)^k = Enc(k a); capacity n/3 per value."""

    @property
    def protection(self):
        return f"Paillier homomorphic encryption ({self._n.bit_length()}-bit modulus)"

    def __init__(self, key_id, n, counts):
        super().__init__(key_id, counts)
        self._n = gmpy2.mpz(n)
        self._nsq = self._n ** 2
        self.capacity = int(self._n // 3)
        self.nbytes_per_value = (self._nsq.bit_length() + 7) // 8

    def _zeros(self, n):
        return object_array(gmpy2.mpz(1) for _ in range(n))  # Enc(0) with r = 1

    def _add(self, p, q):
        nsq = self._nsq
        return object_array(a * b % nsq for a, b in zip(p, q))

    def _multiply(self, p, m):
        nsq = self._nsq
        return object_array(power(c, k, nsq) for c, k in zip(p, m))


class PaillierEvaluator(PaillierArithmetic):
    def __init__(self, public_key, counts):
        super().__init__(f"paillier-{public_key.n % 10**12:012d}", public_key.n, counts)
        self.public_key = public_key


class PaillierKeyHolder(KeyHolder):
    def __init__(self, codec, evaluator, private_key):
        super().__init__(codec, evaluator)
        self._private_key = private_key
        self._n = gmpy2.mpz(private_key.public_key.n)

    def _encrypt(self, ints):
        pk, n = self.evaluator.public_key, self._n
        return object_array(gmpy2.mpz(pk.raw_encrypt(int(int(v) % n))) for v in ints)

    def _decrypt(self, vector):
        n = self._n
        cs = check_ciphertexts(vector.payload, len(vector), n, self.evaluator._nsq)
        plain = [gmpy2.mpz(self._private_key.raw_decrypt(int(c))) for c in cs]
        return object_array(signed_checked(plain, n, vector.bound))


def paillier_backend(n_length=DEFAULT_KEYSIZE, frac_bits=32, insecure=False, codec=None):
    """(KeyHolder for clients, Evaluator for the server) under a fresh phe Paillier key.

    Keys shorter than 2048 bits are refused unless ``insecure=True`` (tests only).
    """
    n_length = check_key_size(n_length, insecure)
    public_key, private_key = paillier.generate_paillier_keypair(n_length=n_length)
    evaluator = PaillierEvaluator(public_key, OpCounts())
    codec = FixedPoint(frac_bits) if codec is None else codec
    return PaillierKeyHolder(codec, evaluator, private_key), evaluator
