"""The one interface HyFDCA uses at every encryption point (docs/algorithm.md
section 3; keys: docs/threat-model.md).

Clients hold a :class:`KeyHolder` (encrypt, decrypt); the server holds an
:class:`Evaluator` (add, scalar-multiply, select, scatter-add) and never a private key.
Both share an :class:`OpCounts` so that every operation is accounted.

Values travel as :class:`EncryptedVector`: the backend's payload, a scale (fractional
bits of the fixed-point encoding), the id of the key it was made under, and ``bound``: an
upper bound on the magnitude of every encoded integer it holds. Fresh ciphertexts get the
codec's declared range (2^max_bits), or a narrower range their caller declares from a
public fact (``range_bits``: the dual box of a loss), never the data's magnitude, which
would leak; the evaluator grows the bound through every add and multiply and refuses an
operation whose result could exceed the backend's ``capacity`` (OverflowError) instead of
letting it wrap.
"""

import math
from dataclasses import dataclass, fields

import numpy as np


def _positions(index):
    """Integer positions of an index (integers, or a boolean mask)."""
    index = np.asarray(index)
    if index.dtype == bool:
        return np.flatnonzero(index)
    return index.astype(np.int64, copy=False)


class CiphertextError(ValueError):
    """A ciphertext failed an integrity check on decryption: tampered or truncated,
    made under another key, or a packed slot that left its range."""


@dataclass
class OpCounts:
    """Homomorphic operations performed, counted per ciphertext (per value when each
    ciphertext holds one)."""

    encrypt: int = 0
    decrypt: int = 0
    add: int = 0
    multiply: int = 0

    def as_dict(self):
        return {f.name: getattr(self, f.name) for f in fields(self)}


class EncryptedVector:
    """Ciphertexts of ``length`` fixed-point values at ``scale_bits`` fractional bits.

    ``payload`` holds one item per ciphertext, each carrying ``slots`` values (value j of
    the vector in slot j mod slots of ciphertext j // slots; a last ciphertext may have
    empty slots, which hold 0). It is backend-specific (int64 array for the plaintext
    backend, an object array of ciphertext integers for Paillier, of lattice ciphertexts
    for BFV, a :class:`~crypto._mask.MaskPayload` for masking); do not read it outside the
    backend. ``bound`` bounds |encoded integer| of every value (see the module docstring).
    """

    __slots__ = ("payload", "scale_bits", "key_id", "bound", "slots", "length")

    def __init__(self, payload, scale_bits, key_id, bound=0, slots=1, length=None):
        self.payload = payload
        self.scale_bits = int(scale_bits)
        self.key_id = key_id
        self.bound = int(bound)
        self.slots = int(slots)
        self.length = len(payload) if length is None else int(length)

    def __len__(self):
        return self.length

    def __repr__(self):
        packed = f", {self.slots} per ciphertext" if self.slots > 1 else ""
        return (f"EncryptedVector({len(self)} values{packed}, scale 2^{self.scale_bits}, "
                f"key {self.key_id})")


class Evaluator:
    """Server-side operations on ciphertexts under one public key.

    Subclasses implement ``_add(p, q)``, ``_multiply(p, m)`` (m an int64 array with one
    entry per payload item), ``_zeros(n)`` (n ciphertexts) and ``nbytes_per_value`` (bytes
    of one ciphertext), and set ``capacity``: the largest |encoded integer| a slot can
    hold, or None where decryption detects any overflow exactly by itself (the masking
    backend), and ``slots``: values per ciphertext.

    Selection and scatter (``take``, ``add_at``, ``put``) address whole ciphertexts: with
    one value per ciphertext that is value by value; packed vectors are laid out by their
    user so that whole ciphertexts are what it selects (``hyfdca._packing``).
    """

    capacity = None
    slots = 1
    # how the values the server handles are hidden from it (reported by the CLI; a
    # networked run refuses "none" unless told it is insecure)
    protection = "homomorphic encryption"

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

    def _same_packing(self, operation, target, values):
        if target.scale_bits != values.scale_bits or target.slots != values.slots:
            raise ValueError(f"cannot {operation} {values} into {target}: scales or "
                             f"packing differ")

    def _grown(self, bound, what):
        """``bound`` if it fits the capacity; else refuse (OverflowError), never wrap."""
        if self.capacity is not None and bound > self.capacity:
            raise OverflowError(
                f"fixed-point overflow: {what} could reach |x| = 2^{math.log2(bound):.2f} "
                f"(encoded integer), beyond the headroom of these ciphertexts "
                f"(2^{math.log2(self.capacity):.2f}); refused")
        return bound

    def zeros(self, n, scale_bits):
        """n ciphertexts of zeros (``slots`` each; deterministic, trivial ciphertexts)."""
        return EncryptedVector(self._zeros(n), scale_bits, self.key_id, bound=0,
                               slots=self.slots, length=n * self.slots)

    def add(self, a, b):
        """Enc(a + b), elementwise; scales, lengths and packing must match."""
        self._check(a, b)
        if a.scale_bits != b.scale_bits or len(a) != len(b) or a.slots != b.slots:
            raise ValueError(f"cannot add {a} and {b}: scales or lengths differ")
        bound = self._grown(a.bound + b.bound, "a sum")
        self.counts.add += len(a.payload)
        return EncryptedVector(self._add(a.payload, b.payload), a.scale_bits, self.key_id,
                               bound, a.slots, len(a))

    def multiply(self, a, integers, extra_bits):
        """Enc(a * m), m integers standing for m / 2^extra_bits (scale grows by it).

        Packed vectors take one multiplier for every value (a slot cannot be scaled alone).
        """
        self._check(a)
        given = np.asarray(integers)
        if given.dtype.kind not in "iu" and (given.dtype.kind != "f"
                                             or not np.all(np.isfinite(given))
                                             or np.any(given != np.round(given))):
            raise ValueError(f"multiply takes integers (m / 2^extra_bits), got "
                             f"{given.dtype} values such as {given.ravel()[:3].tolist()}")
        if given.dtype.kind == "f" and given.size and np.abs(given).max() >= 2.0**63:
            raise OverflowError(f"multipliers beyond 64-bit integers: up to "
                                f"{np.abs(given).max():.3g}")
        m = np.broadcast_to(given.astype(np.int64), (len(a),))
        largest = max(int(m.max()), -int(m.min())) if len(a) else 0
        bound = self._grown(a.bound * largest, "a product")
        if a.slots != 1:
            if len(a) and np.any(m != m[0]):
                raise ValueError(f"{a} is packed: it can only be multiplied by one integer "
                                 f"for all its values")
            m = np.full(len(a.payload), m[0] if len(a) else 0, dtype=np.int64)
        self.counts.multiply += len(a.payload)
        return EncryptedVector(self._multiply(a.payload, m), a.scale_bits + extra_bits,
                               self.key_id, bound, a.slots, len(a))

    def take(self, a, index):
        """The ciphertexts ``index`` of a (no homomorphic operation)."""
        self._check(a)
        index = _positions(index)
        return EncryptedVector(a.payload[index], a.scale_bits, self.key_id, a.bound, a.slots,
                               index.size * a.slots)

    def add_at(self, target, index, values):
        """target's ciphertexts ``index`` += values' ciphertexts, in place (no repeats)."""
        self._check(target, values)
        self._same_packing("add", target, values)
        index = _positions(index)
        if index.size != len(values.payload):
            raise ValueError(f"cannot add {values} into {index.size} ciphertexts")
        target.bound = self._grown(target.bound + values.bound, "a sum")
        self.counts.add += index.size
        target.payload[index] = self._add(target.payload[index], values.payload)

    def put(self, target, index, values):
        """target's ciphertexts ``index`` = values' ciphertexts, in place (no homomorphic
        operation)."""
        self._check(target, values)
        self._same_packing("store", target, values)
        index = _positions(index)
        if index.size != len(values.payload):
            raise ValueError(f"cannot store {values} into {index.size} ciphertexts")
        target.payload[index] = values.payload
        target.bound = max(target.bound, values.bound)

    def stale(self, vector, index):
        """Which ciphertexts ``index`` of a stored vector a key holder should refresh (see
        ``KeyHolder.refresh``): none, except where ciphertexts grow with the operations
        folded into them (decided from public metadata only)."""
        return np.zeros(np.size(index), dtype=bool)

    def nbytes(self, vector):
        """Bytes of ``vector`` on the wire."""
        return len(vector.payload) * self.nbytes_per_value


class KeyHolder:
    """Client-side encryption and decryption under one key.

    Subclasses implement ``_encrypt(int64 array) -> payload`` and
    ``_decrypt(vector) -> integers`` (int64, float64 or object array of ints), checking
    the payload's integrity where the scheme allows.
    """

    slots = 1

    def __init__(self, codec, evaluator):
        self.codec = codec
        self.evaluator = evaluator
        self.counts = evaluator.counts

    @property
    def key_id(self):
        return self.evaluator.key_id

    def encrypt(self, values, range_bits=None):
        """Enc(values) at the codec's fractional bits, each encoded integer below
        2^range_bits in magnitude (default and at most the codec's max_bits), which
        becomes the vector's bound (OverflowError if a value is out of range)."""
        bits = self.codec.max_bits if range_bits is None else int(range_bits)
        self.evaluator._grown(1 << bits, "a fresh encryption")
        ints = self.codec.encode(values, max_bits=bits).ravel()
        self.counts.encrypt += -(-ints.size // self.slots)
        return EncryptedVector(self._encrypt(ints), self.codec.frac_bits, self.key_id,
                               bound=1 << bits, slots=self.slots, length=ints.size)

    def _check_bound(self, vector):
        """CiphertextError for a vector whose claimed bound exceeds what its ciphertexts
        can hold: the bound travels unauthenticated, and decryption's range check (a
        foreign or tampered ciphertext decrypts to values beyond the bound) is only as
        strong as the bound is tight."""
        capacity = self.evaluator.capacity
        if capacity is not None and vector.bound > capacity:
            raise CiphertextError(f"{vector} claims values up to 2^"
                                  f"{math.log2(vector.bound):.2f}, beyond the 2^"
                                  f"{math.log2(capacity):.2f} its ciphertexts hold: tampered")

    def decrypt(self, vector):
        """The real values of ``vector``."""
        self.evaluator._check(vector)
        self._check_bound(vector)
        ints = self._decrypt(vector)
        self.counts.decrypt += len(vector.payload)   # a refused ciphertext is not counted
        extra = vector.scale_bits - self.codec.frac_bits
        return self.codec.decode(ints, extra_bits=extra)

    def wants_refresh(self, vector):
        """Whether ``vector`` should be replaced by a fresh encryption (see ``refresh``):
        never, except where ciphertexts grow with the operations folded into them."""
        return False

    def refresh(self, vector):
        """(real values, a fresh encryption of the same integers, scale and bound).

        A client that has just decrypted a value the server stores can send this back for
        the server to ``put`` in place of the old ciphertext (the masking backend's recipes
        then stay short). The bound is the old one: it says nothing about the value.
        """
        self.evaluator._check(vector)
        self._check_bound(vector)
        ints = np.asarray(self._decrypt(vector))
        self.counts.decrypt += len(vector.payload)
        if ints.dtype == object or ints.dtype.kind == "f":
            if ints.size and max(abs(int(v)) for v in ints) >= 2**63:
                raise OverflowError("cannot refresh values beyond 64-bit integers")
            ints = np.array([int(v) for v in ints], dtype=np.int64)
        fresh = EncryptedVector(self._encrypt(ints.astype(np.int64)), vector.scale_bits,
                                self.key_id, vector.bound, self.slots, ints.size)
        self.counts.encrypt += len(vector.payload)
        extra = vector.scale_bits - self.codec.frac_bits
        return self.codec.decode(ints, extra_bits=extra), fresh
