"""The one interface HyFDCA uses at every encryption point (design section 3).

Clients hold a :class:`KeyHolder` (encrypt, decrypt); the server holds an
:class:`Evaluator` (add, scalar-multiply, select, scatter-add) and never a private key.
Both share an :class:`OpCounts` so that every operation is accounted.

Values travel as :class:`EncryptedVector`: one ciphertext per value, a scale (fractional
bits of the fixed-point encoding) and the id of the key it was made under.
"""

from dataclasses import dataclass, fields

import numpy as np


@dataclass
class OpCounts:
    """Homomorphic operations performed, counted per value."""

    encrypt: int = 0
    decrypt: int = 0
    add: int = 0
    multiply: int = 0

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


class EncryptedVector:
    """Ciphertexts of a vector of fixed-point values at ``scale_bits`` fractional bits.

    ``payload`` is backend-specific (int64 array for the plaintext backend, an object array
    of ciphertext integers for Paillier); do not read it outside the backend.
    """

    __slots__ = ("payload", "scale_bits", "key_id")

    def __init__(self, payload, scale_bits, key_id):
        self.payload = payload
        self.scale_bits = int(scale_bits)
        self.key_id = key_id

    def __len__(self):
        return len(self.payload)

    def __repr__(self):
        return f"EncryptedVector({len(self)} values, scale 2^{self.scale_bits}, key {self.key_id})"


class Evaluator:
    """Server-side operations on ciphertexts under one public key.

    Subclasses implement ``_add(p, q)``, ``_multiply(p, m)`` (m an int64 array or scalar),
    ``_zeros(n)`` and ``nbytes_per_value``.
    """

    def __init__(self, key_id, counts):
        self.key_id = key_id
        self.counts = counts

    def _check(self, *vectors):
        for v in vectors:
            if not isinstance(v, EncryptedVector):
                raise TypeError(f"expected an EncryptedVector, got {type(v).__name__}")
            if v.key_id != self.key_id:
                raise ValueError(f"ciphertext made under key {v.key_id}, this evaluator "
                                 f"holds key {self.key_id}")

    def zeros(self, n, scale_bits):
        """Encryptions of n zeros (deterministic, trivial ciphertexts)."""
        return EncryptedVector(self._zeros(n), scale_bits, self.key_id)

    def add(self, a, b):
        """Enc(a + b), elementwise; scales must match."""
        self._check(a, b)
        if a.scale_bits != b.scale_bits or len(a) != len(b):
            raise ValueError(f"cannot add {a} and {b}: scales or lengths differ")
        self.counts.add += len(a)
        return EncryptedVector(self._add(a.payload, b.payload), a.scale_bits, self.key_id)

    def multiply(self, a, integers, extra_bits):
        """Enc(a * m), m integers standing for m / 2^extra_bits (scale grows by it)."""
        self._check(a)
        self.counts.multiply += len(a)
        m = np.broadcast_to(np.asarray(integers, dtype=np.int64), (len(a),))
        return EncryptedVector(self._multiply(a.payload, m), a.scale_bits + extra_bits,
                               self.key_id)

    def take(self, a, index):
        """The entries ``index`` of a (no homomorphic operation)."""
        self._check(a)
        return EncryptedVector(a.payload[np.asarray(index)], a.scale_bits, self.key_id)

    def add_at(self, target, index, values):
        """target[index] += values, in place (index without repeats)."""
        self._check(target, values)
        if target.scale_bits != values.scale_bits:
            raise ValueError(f"cannot add {values} into {target}: scales differ")
        index = np.asarray(index)
        self.counts.add += index.size
        target.payload[index] = self._add(target.payload[index], values.payload)

    def put(self, target, index, values):
        """target[index] = values, in place (replaces ciphertexts; no homomorphic op)."""
        self._check(target, values)
        if target.scale_bits != values.scale_bits:
            raise ValueError(f"cannot store {values} into {target}: scales differ")
        target.payload[np.asarray(index)] = values.payload

    def nbytes(self, vector):
        """Bytes of ``vector`` on the wire."""
        return len(vector) * self.nbytes_per_value


class KeyHolder:
    """Client-side encryption and decryption under one key pair.

    Subclasses implement ``_encrypt(int64 array)`` and ``_decrypt(payload) -> ints``.
    """

    def __init__(self, codec, evaluator):
        self.codec = codec
        self.evaluator = evaluator
        self.counts = evaluator.counts

    @property
    def key_id(self):
        return self.evaluator.key_id

    def encrypt(self, values):
        """Enc(values) at the codec's fractional bits."""
        ints = self.codec.encode(values)
        self.counts.encrypt += ints.size
        return EncryptedVector(self._encrypt(ints), self.codec.frac_bits, self.key_id)

    def decrypt(self, vector):
        """The real values of ``vector``."""
        self.evaluator._check(vector)
        self.counts.decrypt += len(vector)
        extra = vector.scale_bits - self.codec.frac_bits
        return self.codec.decode(self._decrypt(vector.payload), extra_bits=extra)
