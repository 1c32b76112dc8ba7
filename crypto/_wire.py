"""EncryptedVector <-> plain arrays, for transports that put ciphertexts on a wire.

:func:`vector_to_arrays` gives (meta, arrays): ``meta`` a dict of JSON-safe scalars
(scale, key id, bound, packing, length, payload kind), ``arrays`` named NumPy arrays of
fixed dtypes (no Python objects, nothing that needs pickle). :func:`vector_from_arrays`
rebuilds the same vector: same payload values, so every later operation gives the same
bits. Payload kinds: ``int64`` (plaintext backend), ``bigint`` (Paillier ciphertexts,
non-negative, big-endian bytes of one common width), ``mask`` (a MaskPayload's lanes and
recipes), ``bfv`` (SEAL's serialised ciphertexts, one per plaintext prime, concatenated;
their sizes, -1 for a ciphertext of zeros).
"""

import gmpy2
import numpy as np

from crypto._bfv import BFVCiphertext
from crypto._interface import EncryptedVector
from crypto._mask import MaskPayload

_MASK_FIELDS = ("value", "tags", "indptr", "nonce", "pos", "coef")


def vector_to_arrays(vector):
    """(meta, arrays) of an EncryptedVector."""
    payload = vector.payload
    meta = dict(scale_bits=vector.scale_bits, key_id=vector.key_id, bound=vector.bound,
                slots=vector.slots, length=vector.length)
    if isinstance(payload, MaskPayload):
        return dict(meta, kind="mask"), {f: getattr(payload, f) for f in _MASK_FIELDS}
    payload = np.asarray(payload)
    if payload.dtype == object and any(isinstance(c, BFVCiphertext) or c is None
                                       for c in payload):
        return (dict(meta, kind="bfv"), _bfv_arrays(payload))
    if payload.dtype == np.int64:
        return dict(meta, kind="int64"), {"payload": payload}
    if payload.dtype == object:
        ints = [int(c) for c in payload]
        if any(c < 0 for c in ints):
            raise ValueError("cannot serialise a negative ciphertext integer")
        width = max([(c.bit_length() + 7) // 8 for c in ints] + [1])
        raw = b"".join(c.to_bytes(width, "big") for c in ints)
        return (dict(meta, kind="bigint", width=width),
                {"payload": np.frombuffer(raw, dtype=np.uint8).reshape(len(ints), width)})
    raise TypeError(f"cannot serialise a payload of dtype {payload.dtype}")


def vector_from_arrays(meta, arrays):
    """The EncryptedVector that :func:`vector_to_arrays` described."""
    kind = meta["kind"]
    if kind == "mask":
        payload = MaskPayload(*(np.array(arrays[f]) for f in _MASK_FIELDS))
    elif kind == "bfv":
        payload = _bfv_payload(arrays["sizes"], arrays["payload"])
    elif kind == "int64":
        payload = np.array(arrays["payload"], dtype=np.int64)
    elif kind == "bigint":
        rows = np.asarray(arrays["payload"], dtype=np.uint8)
        payload = np.empty(rows.shape[0], dtype=object)
        payload[:] = [gmpy2.mpz(int.from_bytes(row.tobytes(), "big")) for row in rows]
    else:
        raise ValueError(f"unknown ciphertext payload kind {kind!r}")
    return EncryptedVector(payload, meta["scale_bits"], meta["key_id"], bound=meta["bound"],
                           slots=meta["slots"], length=meta["length"])


def _bfv_arrays(payload):
    blobs = [None if c is None else c.blobs() for c in payload]
    per = max((len(b) for b in blobs if b is not None), default=0)
    sizes = np.full((len(blobs), per), -1, dtype=np.int64)
    for i, b in enumerate(blobs):
        if b is not None:
            sizes[i] = [len(x) for x in b]
    raw = b"".join(x for b in blobs if b is not None for x in b)
    return {"sizes": sizes, "payload": np.frombuffer(raw, dtype=np.uint8)}


def _bfv_payload(sizes, raw):
    raw = np.asarray(raw, dtype=np.uint8).tobytes()
    payload, offset = np.empty(len(sizes), dtype=object), 0
    for i, row in enumerate(np.asarray(sizes, dtype=np.int64)):
        if row.size == 0 or row[0] < 0:
            payload[i] = None
            continue
        parts = []
        for size in row:
            if size < 0 or offset + size > len(raw):
                raise ValueError("malformed BFV payload (sizes do not match the bytes)")
            parts.append(raw[offset:offset + size])
            offset += size
        payload[i] = BFVCiphertext(data=parts)
    if offset != len(raw):
        raise ValueError("malformed BFV payload (trailing bytes)")
    return payload
