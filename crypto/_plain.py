"""The plaintext backend: no encryption, exact fixed-point arithmetic, every op counted."""

import itertools

import numpy as np

from crypto._fixed_point import FixedPoint
from crypto._interface import Evaluator, KeyHolder, OpCounts

_ids = itertools.count()


class PlainEvaluator(Evaluator):
    nbytes_per_value = 8
    protection = "none (plaintext: the server sees every value)"

    def __init__(self, key_id, counts, codec):
        super().__init__(key_id, counts)
        self.codec = codec

    def _zeros(self, n):
        return np.zeros(n, dtype=np.int64)

    def _add(self, p, q):
        return self.codec.check(p + q)

    def _multiply(self, p, m):
        product = p.astype(np.float64) * m.astype(np.float64)
        self.codec.check(product)
        return p * m


class PlainKeyHolder(KeyHolder):
    def _encrypt(self, ints):
        return ints.copy()

    def _decrypt(self, vector):
        return vector.payload


def plain_backend(frac_bits=32, codec=None):
    """(KeyHolder for clients, Evaluator for the server) that encrypt nothing."""
    codec = FixedPoint(frac_bits) if codec is None else codec
    evaluator = PlainEvaluator(f"plain-{next(_ids)}", OpCounts(), codec)
    return PlainKeyHolder(codec, evaluator), evaluator
