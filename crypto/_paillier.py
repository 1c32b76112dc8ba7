"""Paillier through phe: one ciphertext per fixed-point value (fixed exponent).

Integers are encrypted with phe's ``raw_encrypt`` (negative values as n - |x|), so sums
and scalar products never re-encode; decryption maps values above n/2 back to negatives.
"""

import gmpy2
import numpy as np
from phe import paillier

from crypto._fixed_point import FixedPoint
from crypto._interface import Evaluator, KeyHolder, OpCounts

DEFAULT_KEYSIZE = 2048


def _object_array(items):
    items = list(items)
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


class PaillierEvaluator(Evaluator):
    def __init__(self, public_key, counts):
        super().__init__(f"paillier-{public_key.n % 10**12:012d}", counts)
        self.public_key = public_key
        self._nsq = gmpy2.mpz(public_key.nsquare)
        self._n = gmpy2.mpz(public_key.n)
        self.nbytes_per_value = (self._nsq.bit_length() + 7) // 8

    def _zeros(self, n):
        return _object_array(gmpy2.mpz(1) for _ in range(n))  # Enc(0) with r = 1

    def _add(self, p, q):
        nsq = self._nsq
        return _object_array(a * b % nsq for a, b in zip(p, q))

    def _multiply(self, p, m):
        nsq, n = self._nsq, self._n
        return _object_array(gmpy2.powmod(c, int(k) % n, nsq) for c, k in zip(p, m))


class PaillierKeyHolder(KeyHolder):
    def __init__(self, codec, evaluator, private_key):
        super().__init__(codec, evaluator)
        self._private_key = private_key
        self._n = gmpy2.mpz(private_key.public_key.n)

    def _encrypt(self, ints):
        pk, n = self.evaluator.public_key, self._n
        return _object_array(gmpy2.mpz(pk.raw_encrypt(int(int(v) % n))) for v in ints)

    def _decrypt(self, payload):
        half = self._n // 2
        out = []
        for c in payload:
            v = gmpy2.mpz(self._private_key.raw_decrypt(int(c)))
            out.append(int(v - self._n if v > half else v))
        return np.array(out, dtype=np.float64)


def paillier_backend(n_length=DEFAULT_KEYSIZE, frac_bits=32, insecure=False):
    """(KeyHolder for clients, Evaluator for the server) under a fresh Paillier key.

    Keys shorter than 2048 bits are refused unless ``insecure=True`` (tests only).
    """
    if n_length < 2048 and not insecure:
        raise ValueError(f"Paillier keys under 2048 bits are insecure (got {n_length}); "
                         f"pass insecure=True only in tests")
    public_key, private_key = paillier.generate_paillier_keypair(n_length=n_length)
    evaluator = PaillierEvaluator(public_key, OpCounts())
    codec = FixedPoint(frac_bits)  # encodings are int64; sums and products live mod n
    return PaillierKeyHolder(codec, evaluator, private_key), evaluator
