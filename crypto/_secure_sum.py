"""Secure sums by pairwise additive masking (Bonawitz et al. 2017, without dropouts).

Client k sends its fixed-point shares plus  sum_j PRF(k, succ_j(k)) - PRF(pred_j(k), k)
mod 2^64, over its ``degree`` successors and predecessors in the cyclic order of the
round's participants. Every mask is added once and subtracted once, so the server's sum
is exact while each message it receives looks uniformly random. The PRF is keyed BLAKE2b
under a key the clients share and the server never holds. The same key gives the clients
keyed equality tags (:meth:`SecureSum.tags`), with which the server compares what the
clients hold without learning it.
"""

import hashlib
import secrets
from collections import Counter

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from crypto._fixed_point import FixedPoint


class SecureSum:
    def __init__(self, key=None, frac_bits=32, degree=3):
        self._key = key if key is not None else secrets.token_bytes(32)
        if len(self._key) < 16:
            raise ValueError("the masking key must have at least 16 bytes")
        self.frac_bits = int(frac_bits)
        self.degree = int(degree)

    def _prf(self, a, b, tag, n):
        """n pseudo-random uint64 for the pair (a, b) and this sum: keyed BLAKE2b in
        counter mode, 8 values per 64-byte block."""
        blocks = [hashlib.blake2b(f"{tag}|{a}|{b}|{counter}".encode(), key=self._key,
                                  digest_size=64).digest()
                  for counter in range(-(-n // 8))]
        return np.frombuffer(b"".join(blocks), dtype="<u8")[:n]

    def mask(self, values, client, participants, tag):
        """Client ``client``'s masked shares (uint64), for one sum labelled ``tag``."""
        order = sorted(participants)
        if len(set(order)) != len(order):
            raise ValueError(f"participants {order} name a client twice: its masks would "
                             f"not cancel")
        shares = share_codec(len(order), self.frac_bits).encode(values).astype(np.uint64)
        if client not in order:
            raise ValueError(f"client {client} is not among the participants {order}")
        n, pos = len(order), order.index(client)
        mask = np.zeros(shares.size, dtype=np.uint64)
        for j in range(1, min(self.degree, n - 1) + 1):
            mask += self._prf(client, order[(pos + j) % n], tag, shares.size)
            mask -= self._prf(order[(pos - j) % n], client, tag, shares.size)
        return shares + mask

    def tags(self, purpose, words):
        """Keyed equality tags of the rows of ``words`` ((n, 2) 64-bit integers): AES-128
        of each row's 16 bytes under a key derived from the clients' key for ``purpose``.
        AES is a permutation, so distinct rows have distinct tags and equal rows equal
        ones; without the key the tags look random, so the server learns which tags are
        equal and nothing else. Returns (n, 2) uint64."""
        words = np.asarray(words)
        if words.ndim != 2 or words.shape[1] != 2 or words.dtype.itemsize != 8 \
                or words.dtype.kind not in "iu":
            raise ValueError(f"tags take (n, 2) 64-bit integers, got {words.dtype} of shape "
                             f"{words.shape}")
        key = hashlib.blake2b(f"tags|{purpose}".encode(), key=self._key,
                              digest_size=16).digest()
        encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        data = np.ascontiguousarray(words.astype("<u8", copy=False)).tobytes()
        out = encryptor.update(data) + encryptor.finalize()
        return np.frombuffer(out, dtype="<u8").reshape(-1, 2).astype(np.uint64)


def share_codec(n_participants, frac_bits):
    """The fixed-point codec of a secure sum's shares: headroom for the sum of
    ``n_participants`` shares to stay below 2^63."""
    headroom = int(np.ceil(np.log2(max(n_participants, 1))))
    return FixedPoint(frac_bits, max_bits=62 - headroom)


def unmasked_total(shares, frac_bits=32):
    """The total a secure sum reveals, computed without keys or masks, for engines that
    simulate the plaintext protocol: ``shares`` has one column per participant, encoded
    as :meth:`SecureSum.mask` encodes them and added as integers (the same bits as
    :func:`masked_total` of the masked shares)."""
    encoded = share_codec(shares.shape[1], frac_bits).encode(shares)
    return FixedPoint(frac_bits).decode(encoded.sum(axis=1))


class SecureSumError(ValueError):
    """A secure sum whose shares do not match its participants: the masks would not
    cancel and the revealed total would be wrong."""


def masked_total(masked, participants, frac_bits=32, tag="secure sum"):
    """Server side (no key needed): the decoded sum of the masked shares.

    ``masked`` is an iterable of (client id, masked shares) pairs, as received;
    ``participants`` the ids whose masks were drawn together (:meth:`SecureSum.mask`).
    Exactly one share per participant is required: a missing, extra or duplicated share
    raises :class:`SecureSumError` naming the clients (pairwise masks cancel only over the
    whole set, so any other total would be noise).
    """
    expected = sorted(int(k) for k in participants)
    repeated = sorted(k for k, n in Counter(expected).items() if n > 1)
    if repeated:
        raise SecureSumError(f"{tag}: participants {expected} name client(s) {repeated} "
                             f"twice: the pairwise masks would not cancel")
    received = [(int(k), np.asarray(m)) for k, m in masked]
    ids = [k for k, _ in received]
    duplicated = sorted(k for k, n in Counter(ids).items() if n > 1)
    extra = sorted(set(ids) - set(expected))
    missing = sorted(set(expected) - set(ids))
    problems = [f"{what} from client(s) {who}" for what, who in
                (("no share", missing), ("an unexpected share", extra),
                 ("more than one share", duplicated)) if who]
    if problems:
        raise SecureSumError(f"{tag}: " + "; ".join(problems) + f" (participants "
                             f"{expected}): the pairwise masks would not cancel")
    if not received:
        raise SecureSumError(f"{tag}: no participants")
    sizes = {m.shape for _, m in received}
    if len(sizes) != 1:
        raise SecureSumError(f"{tag}: shares of different shapes {sorted(sizes)}")
    kinds = sorted({f"{m.dtype}, {m.ndim}-D" for _, m in received
                    if m.dtype != np.uint64 or m.ndim != 1})
    if kinds:
        raise SecureSumError(f"{tag}: shares must be 1-D uint64 arrays, as SecureSum.mask "
                             f"makes them; got {kinds}")
    acc = np.zeros_like(received[0][1])
    for _, m in received:
        acc += m
    return FixedPoint(frac_bits).decode(acc.view(np.int64))
