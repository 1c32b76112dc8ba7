"""BFV lattice encryption on TenSEAL (Microsoft SEAL): 8,192 exact integers per ciphertext.

Parameters (docs/threat-model.md section 4): ring degree N = 8192, ciphertext modulus of
218 bits (primes of 60, 60, 60 and 38 bits, the last one SEAL's special prime), the
largest q the Homomorphic Encryption Standard (Albrecht et al., 2018, table for uniform
ternary secrets, error width 3.2) allows at N = 8192 for 128-bit classical security, and
which SEAL enforces at that level (``sec_level_type::tc128``); key generation and
encryption are SEAL's.

A fixed-point integer x (|x| < 2^62 when fresh) travels by the Chinese remainder theorem
as its residues modulo two plaintext primes t_1, t_2 (58 bits each, t = 1 mod 2N so that
each slot is one residue), one SEAL ciphertext per prime: T = t_1 t_2 ~ 2^116. Slot-wise
addition and multiplication by an integer m are exact modulo T; a slot is read back as the
representative of x mod T in (-T/2, T/2]. The evaluator tracks every vector's bound and
refuses an operation that could pass ``capacity`` = 2^113 < T/4 (OverflowError), so no
slot wraps. The same bound caps the noise: additions add noise and a product with m
multiplies it by |m|, exactly as they grow the bound, so a vector's noise is at most
bound / 2^62 <= 2^51 times a fresh ciphertext's. Measured with these parameters,
decryption stays exact after a growth of 2^111 (tests/crypto/test_backends.py) and
fails at a growth of about 2^116 (measured once at development): a margin of 60 bits.

Decryption checks every slot against the vector's bound (CiphertextError): a ciphertext
of another key decrypts to residues that are uniform modulo T, which pass the check with
probability below 2^(bound bits + 1 - 116) per slot. BFV is malleable: a server that adds
a valid ciphertext to a stored one is not detected (docs/threat-model.md).

The server's evaluator holds the public contexts (public key, no secret key). Ciphertexts
are :class:`BFVCiphertext`: live TenSEAL vectors, or their bytes until an evaluator or key
holder binds them to its context (after the wire or a checkpoint). A ciphertext of zeros
is ``None`` until something is added to it (no encryption needed).
"""

import itertools
import math
import secrets

import numpy as np

from crypto._fixed_point import FixedPoint
from crypto._interface import CiphertextError, Evaluator, KeyHolder, OpCounts

POLY_MODULUS_DEGREE = 8192
COEFF_MOD_BIT_SIZES = (60, 60, 60, 38)  # 218 bits: HE Standard, 128-bit, N = 8192
PLAIN_PRIME_BITS = 58
N_PLAIN_PRIMES = 2
_ids = itertools.count()


def batching_primes(bits, degree, count):
    """The ``count`` largest primes below 2^bits that are 1 mod 2 * degree."""
    import gmpy2
    step, out = 2 * degree, []
    p = (1 << bits) - (1 << bits) % step + 1
    while len(out) < count:
        p -= step
        if gmpy2.is_prime(p):
            out.append(int(p))
    return out


def _tenseal():
    try:
        import tenseal
    except ImportError as error:  # pragma: no cover - tenseal is a dependency
        raise ImportError("the bfv backend needs TenSEAL: pip install tenseal") from error
    return tenseal


class BFVCiphertext:
    """One packed ciphertext: a TenSEAL BFV vector per plaintext prime, or their bytes.

    Its live vectors are linked to public contexts (the server's) or to none: a client
    encrypts under its secret contexts and relinks the result to the public ones, and
    decrypts under them only for the call (:meth:`decrypt`), so that no ciphertext a
    client hands on, in process, leads back to a secret key. :meth:`vectors` links them
    to the caller's contexts."""

    __slots__ = ("_live", "_owner", "_data")

    def __init__(self, live=None, owner=None, data=None):
        self._live, self._owner, self._data = live, owner, data

    def vectors(self, contexts):
        """The TenSEAL vectors under ``contexts`` (deserialised if they came as bytes)."""
        if self._live is not None and self._owner is contexts:
            return self._live
        if self._live is None:
            ts = _tenseal()
            live = [ts.bfv_vector_from(ctx, blob) for ctx, blob in zip(contexts, self._data)]
        else:  # the same data under the caller's keys (a pointer swap, no copy)
            live = self._live
            for v, ctx in zip(live, contexts):
                v.link_context(ctx)
        self._live, self._owner = live, contexts
        return live

    def decrypt(self, secret_contexts):
        """The slots of each vector under ``secret_contexts``, leaving the ciphertext
        linked as it was (or as bytes, where it came as bytes)."""
        owner = self._owner
        vectors = self.vectors(secret_contexts)
        try:
            return [v.decrypt() for v in vectors]
        finally:
            if owner is None:
                self.blobs()
                self._live, self._owner = None, None
            else:
                self.vectors(owner)

    def blobs(self):
        """The serialised vectors (bytes per prime)."""
        if self._data is None:
            self._data = [v.serialize() for v in self._live]
        return self._data

    def __getstate__(self):
        return {"data": self.blobs()}

    def __setstate__(self, state):
        self._live, self._owner, self._data = None, None, state["data"]


def _object_array(items):
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


class _Contexts:
    """SEAL contexts (one per plaintext prime) kept as their bytes and loaded on first use;
    pickled as the bytes only."""

    def _hold_contexts(self, blobs):
        self._context_blobs = [bytes(b) for b in blobs]
        self._contexts = None

    def contexts(self):
        if self._contexts is None:
            ts = _tenseal()
            self._contexts = [ts.context_from(blob) for blob in self._context_blobs]
        return self._contexts

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_contexts"] = None
        return state


class BFVEvaluator(_Contexts, Evaluator):
    """Server side: the public contexts (public key only) and the plaintext primes."""

    slots = POLY_MODULUS_DEGREE

    def __init__(self, key_id, counts, public_contexts, primes):
        super().__init__(key_id, counts)
        self.primes = tuple(int(p) for p in primes)
        self.modulus = math.prod(self.primes)
        self.capacity = 1 << (self.modulus.bit_length() - 3)  # T/4 or less
        self._hold_contexts(public_contexts)
        self.nbytes_per_value = None  # measured on the first ciphertext (``nbytes``)

    @property
    def protection(self):
        return (f"BFV lattice homomorphic encryption (TenSEAL/SEAL, N = "
                f"{POLY_MODULUS_DEGREE}, 218-bit modulus, 128-bit security)")

    def _zeros(self, n):
        return _object_array([None] * n)

    def _add(self, p, q):
        ctx = self.contexts()
        out = []
        for a, b in zip(p, q):
            if a is None or b is None:
                out.append(b if a is None else a)
            else:
                out.append(BFVCiphertext([x + y for x, y in zip(a.vectors(ctx), b.vectors(ctx))],
                                         ctx))
        return _object_array(out)

    def _multiply(self, p, m):
        ctx = self.contexts()
        out = []
        for a, k in zip(p, m):
            k = int(k)
            if a is None:
                out.append(None)
            elif k == 0:
                out.append(None)  # Enc(0): a product with 0 carries nothing
            else:
                out.append(BFVCiphertext([_times(v, _centred(k, t), c) for v, t, c in
                                          zip(a.vectors(ctx), self.primes, ctx)], ctx))
        return _object_array(out)

    def nbytes(self, vector):
        """Bytes on the wire: the serialised ciphertexts (all of one size, measured once;
        a ciphertext of zeros: 8 bytes)."""
        live = [item for item in vector.payload if item is not None]
        if live and self.nbytes_per_value is None:
            self.nbytes_per_value = sum(len(b) for b in live[0].blobs())
        return len(live) * (self.nbytes_per_value or 0) + 8 * (len(vector.payload) - len(live))


def _times(vector, c, context):
    """Enc(c x) of one prime's ciphertext, c a residue: where m is a multiple of the prime
    (c = 0), a fresh encryption of zeros under the public key (SEAL refuses the product
    with 0, a "transparent" ciphertext that would show its plaintext)."""
    if c:
        return vector * c
    return _tenseal().bfv_vector(context, [0] * vector.size())


def _centred(k, t):
    r = k % t
    return r - t if r > t // 2 else r


class BFVKeyHolder(_Contexts, KeyHolder):
    """Client side: the secret contexts, one per plaintext prime."""

    slots = POLY_MODULUS_DEGREE

    def __init__(self, codec, evaluator, secret_contexts):
        super().__init__(codec, evaluator)
        self._hold_contexts(secret_contexts)
        primes = evaluator.primes
        self._t = np.array(primes, dtype=np.int64)
        # Garner: x = r_1 + t_1 k, k = (r_2 - r_1) t_1^-1 mod t_2
        self._t1_inv = pow(primes[0], -1, primes[1])

    def _encrypt(self, ints):
        ts, ctx, n = _tenseal(), self.contexts(), self.slots
        ints = np.asarray(ints, dtype=np.int64)
        out = []
        padded = np.zeros(-(-ints.size // n) * n, dtype=np.int64)  # empty slots hold 0
        padded[:ints.size] = ints
        for start in range(0, padded.size, n):
            chunk = padded[start:start + n]
            ciphertext = BFVCiphertext([ts.bfv_vector(c, _centred_residues(chunk, t).tolist())
                                        for c, t in zip(ctx, self._t)], ctx)
            ciphertext.vectors(self.evaluator.contexts())   # handed on under public keys
            out.append(ciphertext)
        return _object_array(out)

    def _decrypt(self, vector):
        ctx, n = self.contexts(), self.slots
        expected = -(-len(vector) // n)
        if len(vector.payload) != expected:
            raise CiphertextError(f"expected {expected} ciphertexts, got "
                                  f"{len(vector.payload)}: truncated or padded")
        residues = np.zeros((len(self._t), expected * n), dtype=np.int64)
        for j, item in enumerate(vector.payload):
            if item is None:
                continue
            if not isinstance(item, BFVCiphertext):
                raise CiphertextError("not a BFV ciphertext")
            try:
                for i, slots in enumerate(item.decrypt(ctx)):
                    residues[i, j * n:(j + 1) * n] = slots
            except (ValueError, RuntimeError, TypeError) as error:
                raise CiphertextError(f"a BFV ciphertext does not decrypt under this key "
                                      f"({error})") from error
        values = self._combine(residues % self._t[:, None])
        if np.any(values[len(vector):] != 0):
            raise CiphertextError("a BFV ciphertext has non-zero padding slots: it was "
                                  "tampered with or made under another key")
        values = values[:len(vector)]
        bound = vector.bound
        if values.size and np.max(np.abs(values.astype(np.float64))) > float(bound) * (1 + 1e-12):
            if max(abs(int(v)) for v in values) > bound:
                raise CiphertextError(
                    f"a ciphertext decrypts outside the range its operations allow (|x| < "
                    f"2^{bound.bit_length()} encoded): it was tampered with or made under "
                    f"another key")
        return values

    def _combine(self, residues):
        """The integers in (-T/2, T/2] with these residues (int64 where they fit, else
        Python integers)."""
        t1, t2 = (int(t) for t in self._t)
        r1, r2 = residues
        k = _mulmod((r2 - r1) % t2, self._t1_inv, t2)  # x = r1 + t1 k, k in [0, t2)
        k = np.where(k > t2 // 2, k - t2, k)  # centred: |x| < T/2 up to t1
        small = np.abs(k) < (1 << (62 - PLAIN_PRIME_BITS))
        if small.all():
            return r1 + np.int64(t1) * k
        return _object_array([int(a) + t1 * int(b) for a, b in zip(r1, k)])


def _centred_residues(ints, t):
    r = ints % t
    return np.where(r > t // 2, r - t, r)


def _mulmod(a, b, p):
    """a b mod p for int64 arrays a in [0, p) and an integer b in [0, p), p < 2^59:
    the quotient from 64-bit-mantissa long doubles, the remainder in wrapping uint64."""
    a = a.astype(np.uint64)
    b, p = np.uint64(b), np.uint64(p)
    q = (a.astype(np.longdouble) * np.longdouble(int(b)) / np.longdouble(int(p))).astype(np.uint64)
    r = (a * b - q * p).astype(np.int64)  # exact modulo 2^64, and |r| < 2p
    r = np.where(r < 0, r + np.int64(p), r)
    return np.where(r >= np.int64(p), r - np.int64(p), r)


def bfv_backend(frac_bits=32, codec=None):
    """(KeyHolder for clients, Evaluator for the server) under fresh BFV keys (a secret
    key per plaintext prime; the server's contexts hold the public keys only)."""
    ts = _tenseal()
    codec = FixedPoint(frac_bits) if codec is None else codec
    if np.finfo(np.longdouble).nmant < 63:
        raise RuntimeError("the bfv backend needs 80-bit long doubles (x86-64) for its "
                           "residue arithmetic")
    primes = batching_primes(PLAIN_PRIME_BITS, POLY_MODULUS_DEGREE, N_PLAIN_PRIMES)
    secret, public = [], []
    for t in primes:
        ctx = ts.context(ts.SCHEME_TYPE.BFV, poly_modulus_degree=POLY_MODULUS_DEGREE,
                         plain_modulus=t, coeff_mod_bit_sizes=list(COEFF_MOD_BIT_SIZES))
        secret.append(ctx.serialize(save_secret_key=True))
        ctx.make_context_public()
        public.append(ctx.serialize())
    key_id = f"bfv-{secrets.token_hex(6)}-{next(_ids)}"
    evaluator = BFVEvaluator(key_id, OpCounts(), public, primes)
    return BFVKeyHolder(codec, evaluator, secret), evaluator
