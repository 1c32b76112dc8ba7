"""Additive one-time masking over Z_2^64 with a linear MAC: the cheap backend.

Encryption. A message of L fixed-point integers m_i gets a fresh random 96-bit nonce; a
ChaCha20 keystream under the clients' shared key (``cryptography``), random-access by
position, gives each value four 64-bit words k0..k3 ("atom" (nonce, i)). The value lane is
c_i = m_i + k0 mod 2^64 (a one-time pad: uniformly distributed to anyone without the key).

Homomorphic operations. The server adds lanes and multiplies them by plaintext integers;
masks add and scale along with the values. So that the key holder can remove them, every
ciphertext value carries its mask *recipe*: the list of (nonce, position, coefficient)
atoms whose combination masks it (a fresh value: its own atom with coefficient 1; a sum:
the union of both lists; a product by m: every coefficient times m). Decryption re-derives
the atoms' keystream words and subtracts sum_j coef_j k0_j. The recipe reveals which
messages were combined (the server did the combining, so it knows that anyway) and no
value. Its size grows with the number of ciphertexts folded into a value: a stored value
that absorbs one fresh ciphertext per round carries one atom per round (about 28 bytes),
the price of additive masking without a shared-zero structure; counted by ``nbytes``.
Only a key holder can shorten a recipe: ``KeyHolder.refresh`` re-encrypts a value it has
just decrypted under a fresh nonce (one atom), and ``wants_refresh`` says when a vector's
recipes hold a value of more than ``refresh_atoms`` atoms. In HyFDCA the server (from the
public recipe lengths, ``Evaluator.stale``) adds stored Enc(alpha_i) with long recipes to
the next dual sync of a holder of i; the client sends the refreshed ciphertexts back with
its reply, and the server stores them in place of the old ones, so a stored value holds at
most about refresh_atoms + (holders x rounds between two syncs) atoms.

Authentication. Each value also carries three tags t_j = a_j m_i + k_j mod p_j for primes
p_j just below 2^32 and secret MAC keys a_j (a Carter-Wegman style one-time linear MAC,
linear like the value lane, so sums and products keep it valid; m_i is the *integer*
value, not its residue mod 2^64). The key holder checks every tag after unmasking. A
change of the value lane, a tag, the recipe or the key id (a ciphertext of another key)
passes all three checks with probability at most about 2^-64 whenever the decrypted
change e of the integer value has |e| < 2^63, as for values in the codec's 62-bit range
(such an e is non-zero mod at least two of the primes, whose pairwise products exceed
2^63, and each such check fails but with probability 1/p_j); at the very edge of the lane
(|m| near 2^63) one 32-bit check is left (about 2^-32). An arithmetic wrap of the
64-bit lane (a sum past 2^63) changes the value by a multiple of 2^64 that the tags
reveal exactly: decryption raises OverflowError then, never returns a wrapped value. So
this backend needs no capacity check on the server (``capacity`` is None); every other
failure raises CiphertextError.

What it does not give: no protection against a server that replays or drops whole
ciphertexts (it can only return values the clients encrypted, combined linearly by the
integers it chose: the protocol's own consistency is the defence there).
"""

import itertools
import os
import secrets

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from crypto._fixed_point import FixedPoint
from crypto._interface import CiphertextError, Evaluator, KeyHolder, OpCounts

PRIMES = np.array([4294967291, 4294967279, 4294967231], dtype=np.uint64)  # below 2^32
_P64 = PRIMES.astype(np.int64)
_LANES = 1 + len(PRIMES)
_U64 = np.uint64
# positions of a recipe further apart than this get their keystream in separate runs
_RUN_GAP = 4096


class MaskPayload:
    """Value lane, tags and mask recipes of L masked values, indexable like an array.

    ``value`` (L,) uint64; ``tags`` (L, 3) uint64 below the primes; recipes in CSR form:
    the atoms of value i are entries ``indptr[i]:indptr[i+1]`` of ``nonce`` (E, 2) uint64
    (the 96-bit nonce as 64 + 32 bits), ``pos`` (E,) int64 and ``coef`` (E, 4) uint64
    (mod 2^64 for the value lane, mod p_j for tag j).
    """

    __slots__ = ("value", "tags", "indptr", "nonce", "pos", "coef")

    def __init__(self, value, tags, indptr, nonce, pos, coef):
        self.value, self.tags, self.indptr = value, tags, indptr
        self.nonce, self.pos, self.coef = nonce, pos, coef

    @classmethod
    def zeros(cls, n):
        return cls(np.zeros(n, _U64), np.zeros((n, len(PRIMES)), _U64),
                   np.zeros(n + 1, np.int64), np.zeros((0, 2), _U64),
                   np.zeros(0, np.int64), np.zeros((0, _LANES), _U64))

    @classmethod
    def fresh(cls, value, tags, nonce):
        """A freshly encrypted vector: value i's one atom is keystream position i under the
        one ``nonce`` ((2,) uint64), with coefficient 1 in every lane."""
        n = len(value)
        return cls(value, tags, np.arange(n + 1, dtype=np.int64), np.tile(nonce, (n, 1)),
                   np.arange(n, dtype=np.int64), np.ones((n, _LANES), _U64))

    def __len__(self):
        return len(self.value)

    def _gather(self, starts, counts, nonce, pos, coef):
        """Rows whose atoms are ``counts`` entries from ``starts`` of the given arrays."""
        indptr = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        entries = np.repeat(starts - indptr[:-1], counts) + np.arange(indptr[-1])
        return indptr, nonce[entries], pos[entries], coef[entries]

    def rows(self):
        """Row of every recipe entry."""
        return np.repeat(np.arange(len(self)), np.diff(self.indptr))

    def __getitem__(self, index):
        rows = np.arange(len(self))[index]
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        recipe = self._gather(starts, ends - starts, self.nonce, self.pos, self.coef)
        return MaskPayload(self.value[rows], self.tags[rows], *recipe)

    def __setitem__(self, index, other):
        rows = np.arange(len(self))[index]
        if len(other) != rows.size:
            raise ValueError(f"cannot store {len(other)} values into {rows.size} entries")
        starts, counts = self.indptr[:-1].copy(), np.diff(self.indptr)
        starts[rows] = other.indptr[:-1] + self.pos.size
        counts[rows] = np.diff(other.indptr)
        self.indptr, self.nonce, self.pos, self.coef = self._gather(
            starts, counts, np.concatenate([self.nonce, other.nonce]),
            np.concatenate([self.pos, other.pos]), np.concatenate([self.coef, other.coef]))
        self.value[rows] = other.value
        self.tags[rows] = other.tags

    def plus(self, other):
        """Elementwise sum: lanes add, recipes concatenate row by row."""
        n = len(self)
        cp, cq = np.diff(self.indptr), np.diff(other.indptr)
        order = np.argsort(np.concatenate([self.rows(), other.rows()]), kind="stable")
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(cp + cq, out=indptr[1:])
        return MaskPayload(self.value + other.value, (self.tags + other.tags) % PRIMES, indptr,
                           np.concatenate([self.nonce, other.nonce])[order],
                           np.concatenate([self.pos, other.pos])[order],
                           np.concatenate([self.coef, other.coef])[order])

    def times(self, m):
        """Elementwise product with int64 multipliers m: lanes and coefficients scale."""
        m_mod = np.mod(m[:, None], _P64).astype(_U64)
        rows = self.rows()
        coef = self.coef.copy()
        coef[:, 0] *= m.view(_U64)[rows]
        coef[:, 1:] = coef[:, 1:] * m_mod[rows] % PRIMES
        return MaskPayload(self.value * m.view(_U64), self.tags * m_mod % PRIMES,
                           self.indptr.copy(), self.nonce.copy(), self.pos.copy(), coef)

    def with_lanes(self, value, tags):
        """This recipe with other lanes (the wire's rebuild)."""
        return MaskPayload(value, tags, self.indptr, self.nonce, self.pos, self.coef)

    def recipe_nbytes(self):
        """Bytes of the recipes on the wire (``crypto._wire``): 12 per distinct nonce, 4
        per value (its atom count), 28 per atom (position, nonce index, the coefficient
        mod 2^64 and three mod the 32-bit primes); a fresh vector's recipe is its one
        nonce (12), a vector without atoms sends none."""
        e = self.pos.size
        if e == 0:
            return 0
        if is_fresh_recipe(self):
            return 12
        distinct = len(_group_by_nonce(self.nonce)[1]) - 1
        return 12 * distinct + 4 * len(self) + 28 * e


def is_fresh_recipe(p):
    """Whether p's recipe is a fresh encryption's: atom i is position i under one nonce
    with coefficients 1 (the wire sends only the nonce)."""
    e = p.pos.size
    return (e == len(p) and e > 0 and np.array_equal(p.indptr, np.arange(e + 1))
            and np.all(p.nonce == p.nonce[0]) and np.array_equal(p.pos, np.arange(e))
            and np.all(p.coef == 1))


def nonce_table(nonce):
    """(distinct nonces (U, 2), index of each atom's nonce among them)."""
    order, bounds = _group_by_nonce(nonce)
    index = np.empty(len(order), dtype=np.int64)
    index[order] = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    return nonce[order[bounds[:-1]]], index


class MaskEvaluator(Evaluator):
    """Server side: adds lanes, scales them; holds no key."""

    capacity = None  # wraps are detected exactly on decryption (see the module docstring)
    nbytes_per_value = 8 + 4 * len(PRIMES)
    protection = "additive masking under the clients' shared key (not homomorphic encryption)"

    def _zeros(self, n):
        return MaskPayload.zeros(n)

    def _add(self, p, q):
        return p.plus(q)

    def _multiply(self, p, m):
        return p.times(np.ascontiguousarray(m, dtype=np.int64))

    def __init__(self, key_id, counts, refresh_atoms=8):
        super().__init__(key_id, counts)
        self.refresh_atoms = int(refresh_atoms)

    def stale(self, vector, index):
        self._check(vector)
        indptr = vector.payload.indptr
        index = np.asarray(index, dtype=np.int64)
        return indptr[index + 1] - indptr[index] > self.refresh_atoms

    def nbytes(self, vector):
        return len(vector) * self.nbytes_per_value + vector.payload.recipe_nbytes()


class MaskKeyHolder(KeyHolder):
    """Client side: the shared key, split by HKDF into a stream key and MAC keys.

    A vector with a value of more than ``evaluator.refresh_atoms`` atoms asks to be
    refreshed (``wants_refresh``), so that stored values keep short recipes.
    """

    def __init__(self, codec, evaluator, key):
        super().__init__(codec, evaluator)
        if len(key) != 32:
            raise ValueError(f"the masking key must have 32 bytes, got {len(key)}")
        self._stream_key = _hkdf(key, b"hyfdca mask stream", 32)
        words = np.frombuffer(_hkdf(key, b"hyfdca mask mac", 8 * len(PRIMES)), "<u8")
        self._mac = words % (PRIMES - _U64(1)) + _U64(1)  # non-zero MAC keys
        self._mac_inverse = np.array([pow(int(a), -1, int(p))
                                      for a, p in zip(self._mac, PRIMES)], dtype=_U64)
        self._wrap_inverse = np.array([pow(2**64 % int(p), -1, int(p)) for p in PRIMES],
                                      dtype=_U64)

    def wants_refresh(self, vector):
        return bool(np.any(np.diff(vector.payload.indptr) > self.evaluator.refresh_atoms))

    def _stream(self, nonce, start, count):
        """Keystream words (count, 4) of positions start..start+count-1 under ``nonce``
        (two positions per 64-byte ChaCha20 block; the block counter seeks)."""
        block, skip = divmod(int(start), 2)
        nbytes = 32 * (count + skip)
        nbytes += -nbytes % 64
        cipher = Cipher(algorithms.ChaCha20(self._stream_key,
                                            block.to_bytes(4, "little") + nonce), mode=None)
        words = np.frombuffer(cipher.encryptor().update(bytes(nbytes)), "<u8")
        return words.reshape(-1, _LANES)[skip:skip + count]

    def _encrypt(self, ints):
        n = ints.size
        if n >= 2**32:  # the 32-bit ChaCha20 block counter seeks two positions per block
            raise ValueError(f"a masked message holds fewer than 2^32 values, got {n}")
        nonce = os.urandom(12)
        k = self._stream(nonce, 0, n)
        m_mod = np.mod(ints[:, None], _P64).astype(_U64)
        tags = (self._mac * m_mod % PRIMES + k[:, 1:] % PRIMES) % PRIMES
        packed = np.frombuffer(nonce + bytes(4), "<u8")
        return MaskPayload.fresh(ints.view(_U64) + k[:, 0], tags, packed)

    def _masks(self, payload):
        """(value-lane masks (L,), tag masks (L, 3)) of every value from its recipe."""
        n = len(payload)
        mask0, tag_mask = np.zeros(n, _U64), np.zeros((n, len(PRIMES)), _U64)
        if payload.pos.size == 0:
            return mask0, tag_mask
        rows = payload.rows()
        atoms = np.empty((payload.pos.size, _LANES), _U64)
        order, bounds = _group_by_nonce(payload.nonce)
        for u in range(len(bounds) - 1):
            sel = order[bounds[u]:bounds[u + 1]]
            pos = payload.pos[sel]
            nonce = payload.nonce[sel[0]].astype("<u8").tobytes()[:12]
            lo, hi = int(pos.min()), int(pos.max())
            if hi - lo < pos.size + _RUN_GAP:   # a dense span (every honest recipe's)
                atoms[sel] = self._stream(nonce, lo, hi - lo + 1)[pos - lo]
                continue
            # keystream for each run of nearby positions, never the span between runs
            # far apart (a tampered position of 2^31 would otherwise cost 64 GiB)
            present = np.unique(pos)
            for run in np.split(present, np.flatnonzero(np.diff(present) > _RUN_GAP) + 1):
                lo, hi = int(run[0]), int(run[-1])
                inside = (pos >= lo) & (pos <= hi)
                atoms[sel[inside]] = self._stream(nonce, lo, hi - lo + 1)[pos[inside] - lo]
        np.add.at(mask0, rows, payload.coef[:, 0] * atoms[:, 0])
        np.add.at(tag_mask, rows, payload.coef[:, 1:] * (atoms[:, 1:] % PRIMES) % PRIMES)
        return mask0, tag_mask % PRIMES

    def _decrypt(self, vector):
        p = vector.payload
        _check_structure(p, len(vector))
        mask0, tag_mask = self._masks(p)
        m = (p.value - mask0).view(np.int64)
        m_mod = np.mod(m[:, None], _P64).astype(_U64)
        residue = (p.tags + PRIMES - tag_mask) % PRIMES  # a_j m mod p_j if intact
        bad = np.any(residue != self._mac * m_mod % PRIMES, axis=1)
        if np.any(bad):
            self._raise_failure(m[bad], residue[bad])
        return m

    def _raise_failure(self, m, residue):
        """OverflowError if the tags show the value lane wrapped by a multiple W of 2^64,
        else CiphertextError. W mod p_j follows from each tag; W is rebuilt from the first
        two (CRT, |W| < 2^62) and must agree with the third: a forged change passes that
        check with probability about 2^-32, and is refused either way."""
        true_mod = residue * self._mac_inverse % PRIMES  # m mod p_j of the true integer
        m_mod = np.mod(m[:, None], _P64).astype(_U64)
        wraps = (true_mod + PRIMES - m_mod) % PRIMES * self._wrap_inverse % PRIMES
        found = [_wrap_count(row) for row in wraps]
        if all(w is not None for w in found):
            worst = max(abs(w) for w in found)
            raise OverflowError(
                f"fixed-point overflow: a value left the 64-bit range of the masking "
                f"backend (it wrapped {worst} time(s) around 2^64); refused, not wrapped")
        raise CiphertextError("a masked ciphertext failed authentication: it was tampered "
                              "with or truncated, or made under another key")


def _wrap_count(residues):
    """The signed W with W = residues[j] mod p_j for all three primes and |W| < 2^62, or
    None."""
    p1, p2, p3 = (int(p) for p in PRIMES)
    r1, r2, r3 = (int(r) for r in residues)
    w = (r1 + p1 * ((r2 - r1) * pow(p1, -1, p2) % p2)) % (p1 * p2)
    if w > p1 * p2 // 2:
        w -= p1 * p2
    return w if abs(w) < 2**62 and w % p3 == r3 else None


def _group_by_nonce(nonce):
    """(order, bounds): entries ``order[bounds[u]:bounds[u+1]]`` share the u-th nonce."""
    order = np.lexsort((nonce[:, 1], nonce[:, 0]))
    sorted_ = nonce[order]
    change = np.flatnonzero(np.any(sorted_[1:] != sorted_[:-1], axis=1)) + 1
    return order, np.concatenate([[0], change, [len(order)]])


def _check_structure(p, length):
    if not isinstance(p, MaskPayload):
        raise CiphertextError(f"malformed payload of type {type(p).__name__}")
    n, e = len(p.value), p.pos.size
    ok = (n == length and p.tags.shape == (n, len(PRIMES)) and p.indptr.shape == (n + 1,)
          and p.nonce.shape == (e, 2) and p.coef.shape == (e, _LANES)
          and p.indptr[0] == 0 and p.indptr[-1] == e and np.all(np.diff(p.indptr) >= 0)
          and (e == 0 or (p.pos.min() >= 0 and p.pos.max() < 2**32)))
    if not ok:
        raise CiphertextError(f"truncated or malformed masked payload ({n} values where the "
                              f"vector needs {length}, or an inconsistent recipe)")


def _hkdf(key, info, length):
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(key)


_ids = itertools.count()


def mask_backend(frac_bits=32, key=None, refresh_atoms=8, codec=None):
    """(KeyHolder for clients, Evaluator for the server) under a fresh 256-bit key.

    ``key`` (32 bytes) is for tests that need two holders of the same key; the key id is
    random, so it says nothing about the key.
    """
    key = secrets.token_bytes(32) if key is None else bytes(key)
    codec = FixedPoint(frac_bits) if codec is None else codec
    evaluator = MaskEvaluator(f"mask-{secrets.token_hex(6)}-{next(_ids)}", OpCounts(),
                              refresh_atoms)
    return MaskKeyHolder(codec, evaluator, key), evaluator
