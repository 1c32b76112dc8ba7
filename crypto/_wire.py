"""EncryptedVector <-> plain arrays, for transports that put ciphertexts on a wire.

:func:`vector_to_arrays` gives (meta, arrays): ``meta`` a dict of JSON-safe scalars
(scale, key id, bound, packing, length, payload kind), ``arrays`` named NumPy arrays of
fixed dtypes (no Python objects, nothing that needs pickle). :func:`vector_from_arrays`
rebuilds the same vector: same payload values, so every later operation gives the same
bits. Payload kinds: ``int64`` (plaintext backend), ``bigint`` (Paillier ciphertexts,
non-negative, big-endian bytes of one common width), ``mask`` (a MaskPayload's lanes and
recipes in the compact form ``MaskPayload.recipe_nbytes`` counts: tags and the
coefficients modulo the 32-bit primes as uint32, each distinct nonce once, an atom as its
position, nonce index and coefficients; a fresh vector's recipe as its one nonce),
``bfv`` (SEAL's serialised ciphertexts, one per plaintext prime, concatenated; their
sizes, -1 for a ciphertext of zeros).
"""

import gmpy2
import numpy as np

from crypto._bfv import BFVCiphertext
from crypto._interface import CiphertextError, EncryptedVector
from crypto._mask import MaskPayload, is_fresh_recipe, nonce_table


def vector_to_arrays(vector):
    """(meta, arrays) of an EncryptedVector."""
    payload = vector.payload
    meta = dict(scale_bits=vector.scale_bits, key_id=vector.key_id, bound=vector.bound,
                slots=vector.slots, length=vector.length)
    if isinstance(payload, MaskPayload):
        return dict(meta, kind="mask"), _mask_arrays(payload)
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
        payload = _mask_payload(arrays)
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


def _mask_arrays(p):
    """The compact arrays of a MaskPayload (see the module docstring)."""
    arrays = {"value": p.value, "tags": p.tags.astype("<u4")}
    if p.pos.size == 0:
        return arrays
    if is_fresh_recipe(p):
        return dict(arrays, fresh_nonce=_nonce_bytes(p.nonce[:1]))
    unique, index = nonce_table(p.nonce)
    return dict(arrays, counts=np.diff(p.indptr).astype("<u4"), nonces=_nonce_bytes(unique),
                atom_nonce=index.astype("<u4"), pos=p.pos.astype("<u4"),
                coef_value=p.coef[:, 0], coef_tags=p.coef[:, 1:].astype("<u4"))


def _mask_payload(arrays):
    """The MaskPayload of :func:`_mask_arrays`' arrays, the same values bit for bit;
    CiphertextError for arrays of other shapes (before any is expanded)."""
    _check_mask_arrays(arrays)
    value = np.array(arrays["value"], dtype=np.uint64)
    tags = np.array(arrays["tags"], dtype=np.uint64)
    n = value.size
    if "fresh_nonce" in arrays:
        return MaskPayload.fresh(value, tags, _nonce_words(arrays["fresh_nonce"])[0])
    if "counts" not in arrays:
        return MaskPayload.zeros(n).with_lanes(value, tags)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.asarray(arrays["counts"], dtype=np.int64), out=indptr[1:])
    nonce = _nonce_words(arrays["nonces"])[np.asarray(arrays["atom_nonce"], dtype=np.int64)]
    coef = np.column_stack([np.asarray(arrays["coef_value"], dtype=np.uint64),
                            np.asarray(arrays["coef_tags"], dtype=np.uint64)])
    return MaskPayload(value, tags, indptr, nonce,
                       np.asarray(arrays["pos"], dtype=np.int64), coef)


def _check_mask_arrays(arrays):
    """The compact arrays' shapes agree: n values, (n, 3) tags; a (1, 12) fresh nonce, or
    n atom counts summing to E, (U, 12) nonces, E nonce indices below U, E positions and
    coefficients."""
    shape = {name: np.shape(a) for name, a in arrays.items()}
    n = shape.get("value", (-1,))[0]
    ok = shape.get("value", ()) == (n,) and shape.get("tags") == (n, 3)
    if ok and "fresh_nonce" in arrays:
        ok = shape["fresh_nonce"] == (1, 12) and len(arrays) == 3
    elif ok and "counts" in arrays:
        counts = np.asarray(arrays["counts"], dtype=np.int64)
        e = int(counts.sum()) if shape["counts"] == (n,) else -1
        u = shape["nonces"][0] if len(shape.get("nonces", ())) == 2 else -1
        index = np.asarray(arrays.get("atom_nonce", []), dtype=np.int64)
        ok = (e >= 0 and shape.get("nonces") == (u, 12) and shape.get("atom_nonce") == (e,)
              and shape.get("pos") == (e,) and shape.get("coef_value") == (e,)
              and shape.get("coef_tags") == (e, 3)
              and (e == 0 or (index.min() >= 0 and index.max() < u)))
    elif ok:
        ok = len(arrays) == 2
    if not ok:
        raise CiphertextError(f"malformed masked payload on the wire (array shapes {shape})")


def _nonce_bytes(nonces):
    """(U, 2) uint64 nonces (64 + 32 bits) as (U, 12) bytes."""
    return np.column_stack([nonces[:, 0].astype("<u8").view(np.uint8).reshape(-1, 8),
                            nonces[:, 1].astype("<u4").view(np.uint8).reshape(-1, 4)])


def _nonce_words(raw):
    """The (U, 2) uint64 nonces of :func:`_nonce_bytes`."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, 12)
    low = np.ascontiguousarray(raw[:, :8]).view("<u8").ravel()
    high = np.ascontiguousarray(raw[:, 8:]).view("<u4").ravel()
    return np.column_stack([low, high]).astype(np.uint64)


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
