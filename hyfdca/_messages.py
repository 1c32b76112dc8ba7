"""Typed messages between the server and the clients (one dataclass per direction and step).

Fields holding dual variables or inner products are always ``EncryptedVector``; the
plaintext fields are sample positions, primal contributions and revealed aggregate sums.
An encrypted field "for positions P" holds the ciphertext blocks of the client's samples
at P, ascending (``hyfdca._packing``; a value per sample when each ciphertext holds one).
Messages are plain data: :func:`encode_message` turns one into bytes and
:func:`decode_message` gives it back exactly (arrays, ciphertexts, nested messages,
scalars), so that a networked transport can carry them (docs/architecture.md).
"""

import io
import json
import struct
import types
import typing
from dataclasses import dataclass, fields

import numpy as np

from crypto import EncryptedVector, vector_from_arrays, vector_to_arrays


@dataclass(frozen=True)
class SetupRequest:
    """Server -> client (set-up): |C_i| of its samples (public set-up information), the
    number of clients K, its ciphertext blocks: (blocks, slots) positions of its samples,
    -1 for an empty slot (``hyfdca._packing``), its draw units in the same form for
    ``draw_block`` slots (None: one sample per unit; ``hyfdca._draws``), the local rows
    and columns of its rectangle that another client's overlaps
    (``feddata.Layout.overlaps``; None: none), and the run's nonce that keys its holding
    tags (``hyfdca._holdings``)."""

    holder_counts: np.ndarray
    n_clients: int
    block_members: np.ndarray
    draw_units: np.ndarray | None = None
    overlap_rows: np.ndarray | None = None
    overlap_columns: np.ndarray | None = None
    holding_nonce: str = ""


@dataclass(frozen=True)
class SharedNormParts:
    """Client -> server (set-up): Enc(||x_i^k||^2) for its samples held by others too,
    the keyed tags of (i, y_i) for the same samples, in their order, of (i, j) for its
    non-zero entries in the overlap rows and columns, sorted, and of its whole block
    (``hyfdca._holdings``: the server checks that the holders of a sample agree on its
    label, that no entry is held twice and that a client rejoins with the block it set
    up with, learning neither labels nor entries)."""

    positions: np.ndarray
    parts: EncryptedVector
    label_tags: np.ndarray
    entry_tags: np.ndarray
    block_tag: np.ndarray


@dataclass(frozen=True)
class SharedNorms:
    """Server -> client (set-up): Enc(q_i) = the sum of the holders' parts, for the
    client's shared samples."""

    positions: np.ndarray
    totals: EncryptedVector


@dataclass(frozen=True)
class SetupDone:
    """Client -> server (set-up): the largest q_i and |y_i| of its samples, for the
    fixed-point range check and the certificate's rounding allowance (the client has
    checked its labels)."""

    max_sq_norm: float
    max_abs_label: float


@dataclass(frozen=True)
class DualSync:
    """Server -> client: Enc(alpha_i) for the client's samples that changed (positions),
    the step g of the last round the client took part in (it settles the client's
    tentative step: alpha_i += g dalpha_i), and the kappa the rounds run where
    ``prox_adapt`` changed it (None: the settings'). Every round brings each present
    client one sync (phase A, B or C), and a rejoin brings one."""

    positions: np.ndarray
    alpha: EncryptedVector
    step: float = 1.0
    prox_kappa: float | None = None


@dataclass(frozen=True)
class DualRefresh:
    """Client -> server, with its reply to a dual sync: fresh Enc(alpha_i) of synced
    samples (positions) to store in place of the old ciphertexts (masking backend: keeps
    the stored ciphertexts short)."""

    positions: np.ndarray
    alpha: EncryptedVector


@dataclass(frozen=True)
class RoundStart:
    """Server -> client: the round number, the dual sync, which of its samples may be
    drawn this round, and whether the line search has stalled (the rounds then run
    ``HyFDCASettings.after_stall``)."""

    round: int
    sync: DualSync
    eligible: np.ndarray
    stalled: bool = False


@dataclass(frozen=True)
class PrimalContribution:
    """Client -> server: the change of v_k = (X^k)^T alpha / (lam N) over J_k since its
    last report (the entries the dual sync changed), the samples drawn, and the refresh
    its dual sync asked for (if any)."""

    change: np.ndarray
    drawn: np.ndarray
    refresh: DualRefresh | None = None


@dataclass(frozen=True)
class Resync:
    """Server -> client that lost its state and rejoins: Enc(alpha_i) for all its samples
    (the reply is a PrimalContribution carrying v_k in full)."""

    sync: DualSync


@dataclass(frozen=True)
class EvalContribution:
    """Client -> server (certificate): v_k = (X^k)^T alpha / (lam N) over J_k in full."""

    v: np.ndarray


@dataclass(frozen=True)
class WeightsAndRequest:
    """Server -> client: w on J_k, the samples whose inner-product part is needed, (when
    the round has no separate dual sync) the dual sync, and whether the server stores the
    parts as the client's latest (rounds) or uses them once (the certificate)."""

    w: np.ndarray
    requested: np.ndarray
    sync: DualSync | None = None
    stored: bool = True


@dataclass(frozen=True)
class InnerProductParts:
    """Client -> server: Enc(x_i^k . w) for the requested samples (and the refresh of a
    dual sync that came with the request)."""

    parts: EncryptedVector
    refresh: DualRefresh | None = None


@dataclass(frozen=True)
class Margins:
    """Server -> client: Enc(x_i . w) for the samples it drew (order of ``drawn``); when
    every sample has one holder, instead w on J_k and the dual sync (margins are local)."""

    margins: EncryptedVector | None
    w: np.ndarray | None = None
    sync: DualSync | None = None


@dataclass(frozen=True)
class DualUpdate:
    """Client -> server: Enc(p_i^k dalpha_i) for the samples it drew (positions), and
    the refresh of a dual sync that came with the margins."""

    positions: np.ndarray
    dalpha: EncryptedVector
    refresh: DualRefresh | None = None


@dataclass(frozen=True)
class TentativeStep:
    """Server -> client: Enc(aggregated dalpha_i) for its touched samples (positions), the
    number of present holders of each (its share weight in the line-search sums), who
    takes part in this round's secure sum (labelled ``tag``), and whether to announce the
    draws of round ``round + 1`` with the reply (``predraw``: full participation)."""

    positions: np.ndarray
    delta: EncryptedVector
    present_holders: np.ndarray
    participants: np.ndarray
    tag: str
    round: int
    predraw: bool


@dataclass(frozen=True)
class PrimalUpdate:
    """Client -> server: the change of v_k by the dual syncs since its last report
    (``synced``, None if none), the change by the tentative step (``tentative``,
    (X^k)^T dalpha / (lam N)), its masked line-search shares, and (full participation) the
    samples it will draw next round."""

    synced: np.ndarray | None
    tentative: np.ndarray
    shares: np.ndarray | None
    next_drawn: np.ndarray | None = None


@dataclass(frozen=True)
class EvalRequest:
    """Server -> client: Enc(x_i . x_t) for all its samples, Enc(x_i . x_{t-1}) where the
    certificate searches the line between them (else None), the secure-sum round, and
    the steps a, c and t the last certificate chose for the certified point and the
    certified dual point, the ``point_version``-th (0: none yet); under
    certify_running_mean the doubling epoch whose running mean of the margins the
    client adds z to (``_certificate.with_point``; -1: none) and, where the certificate
    searches that mean in place of x_{t-1}, how many points the server's mean holds (else
    0)."""

    margins: EncryptedVector
    previous_margins: EncryptedVector | None
    participants: np.ndarray
    tag: str
    point_line: float
    point_step: float
    dual_point_step: float
    point_version: int
    mean_epoch: int = -1
    mean_size: int = 0


@dataclass(frozen=True)
class EvalShares:
    """Client -> server: masked shares of (1/N) sum_i l(c (a z_i + (1 - a) zp_i) + (1 -
    c) zc_i)/|C_i| for every a of ``LINE_STEPS`` and c of ``POINT_STEPS`` (z, zp: the
    margins of x_t and x_{t-1}, or of the running mean where the request names one;
    zc: the certified point's margins), of (1/N) sum_i -l*(-(t alpha_i + (1 - t)
    ac_i))/|C_i| for every t of ``POINT_STEPS`` (ac: the certified dual point), 1 if it
    holds both points (else 0), and where the request names a running mean 1 if its
    mean holds the ``mean_size`` points the server's does (else 0)."""

    shares: np.ndarray


def message_nbytes(message, evaluator):
    """Bytes of a message on the wire: arrays by size, ciphertexts by the backend's size
    (what ``crypto.vector_to_arrays`` sends), a string by its UTF-8 bytes, another scalar
    8. :func:`encode_message` adds a JSON header naming the fields and array layouts."""
    total = 0
    for f in fields(message):
        value = getattr(message, f.name)
        if isinstance(value, EncryptedVector):
            total += evaluator.nbytes(value)
        elif isinstance(value, np.ndarray):
            total += value.nbytes
        elif hasattr(value, "__dataclass_fields__"):
            total += message_nbytes(value, evaluator)
        elif isinstance(value, str):
            total += len(value.encode())
        elif value is not None:
            total += 8
    return total


# --- bytes on the wire ------------------------------------------------------------------

@dataclass(frozen=True)
class PredictRequest:
    """Server -> client (prediction): w on J_k and the number of new samples; the
    client's shares are masked among ``participants`` under ``tag``."""

    w: np.ndarray
    n_samples: int
    participants: np.ndarray
    tag: str


@dataclass(frozen=True)
class PredictShares:
    """Client -> server: masked shares of its margin parts x_i^k . w over the new
    samples (0 where it holds none of sample i), the ids of the new samples it holds
    (public, as its training ids: the server checks every new sample has a holder)."""

    shares: np.ndarray
    held: np.ndarray


@dataclass(frozen=True)
class EntryTagRequest:
    """Server -> client (prediction, only where two holders of a new sample share a
    feature): the new samples (ids) and the local columns of J_k where an entry could be
    held twice; the client tags its entries there under ``tag`` (``hyfdca._holdings``)."""

    samples: np.ndarray
    columns: np.ndarray
    tag: str


@dataclass(frozen=True)
class EntryTags:
    """Client -> server: the keyed tags of its non-zero entries (i, j) asked for, sorted
    (the server checks that no entry would be added twice to a margin)."""

    tags: np.ndarray


MESSAGE_TYPES = {cls.__name__: cls for cls in (
    SetupRequest, SharedNormParts, SharedNorms, SetupDone, DualSync, DualRefresh, RoundStart,
    PrimalContribution, Resync, EvalContribution, WeightsAndRequest, InnerProductParts,
    Margins, DualUpdate, TentativeStep, PrimalUpdate, EvalRequest, EvalShares,
    PredictRequest, PredictShares, EntryTagRequest, EntryTags)}
_MAGIC = b"HYFDCA-MSG1"


def encode_message(message):
    """The message as bytes: a JSON header (type, scalar fields, array layouts) followed
    by the raw bytes of every array, ciphertext payloads included. No pickle."""
    blobs = []
    header = _describe(message, blobs)
    head = json.dumps(header, separators=(",", ":")).encode()
    out = io.BytesIO()
    out.write(_MAGIC + struct.pack("<Q", len(head)) + head)
    for blob in blobs:
        out.write(blob.tobytes())
    return out.getvalue()


def decode_message(data):
    """The message that :func:`encode_message` turned into ``data``; ValueError for bytes
    that are not one (damaged, truncated, or a field of the wrong kind)."""
    data = memoryview(data)
    if bytes(data[:len(_MAGIC)]) != _MAGIC:
        raise ValueError("not an encoded HyFDCA message (bad magic bytes)")
    start = len(_MAGIC) + 8
    if len(data) < start:
        raise ValueError("truncated HyFDCA message")
    (size,) = struct.unpack("<Q", data[len(_MAGIC):start])
    try:
        header = json.loads(bytes(data[start:start + size]))
        return _rebuild(header, data, start + size)
    except (KeyError, TypeError, AttributeError, IndexError, UnicodeDecodeError) as err:
        raise ValueError(f"malformed HyFDCA message header ({type(err).__name__}: "
                         f"{err})") from None


def _fits(value, annotation):
    """Whether a decoded field ``value`` is of its dataclass field's type."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) \
        else (annotation,)
    for option in options:
        if option is type(None) and value is None:
            return True
        if option in (int, float) and isinstance(value, (int, float, np.integer)) \
                and not isinstance(value, bool) and (option is float or float(value).is_integer()):
            return True
        if option is not type(None) and option not in (int, float) \
                and isinstance(value, option):
            return True
    return False


def _array_spec(array, blobs):
    """Layout of one array (little-endian, C order), its bytes appended to ``blobs``."""
    array = np.asarray(array)
    if array.dtype == object:
        raise TypeError("cannot encode an object array")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    blobs.append(little)
    return {"dtype": little.dtype.str, "shape": list(little.shape), "blob": len(blobs) - 1}


def _describe(message, blobs):
    if type(message).__name__ not in MESSAGE_TYPES:
        raise TypeError(f"not a HyFDCA message: {type(message).__name__}")
    spec = {"type": type(message).__name__, "fields": {}}
    for f in fields(message):
        value = getattr(message, f.name)
        if value is None:
            entry = {"kind": "none"}
        elif isinstance(value, EncryptedVector):
            meta, arrays = vector_to_arrays(value)
            entry = {"kind": "encrypted", "meta": meta,
                     "arrays": {k: _array_spec(a, blobs) for k, a in arrays.items()}}
        elif isinstance(value, np.ndarray):
            entry = {"kind": "array", **_array_spec(value, blobs)}
        elif hasattr(value, "__dataclass_fields__"):
            entry = {"kind": "message", "value": _describe(value, blobs)}
        elif isinstance(value, (bool, int, float, str, np.floating, np.integer, np.bool_)):
            entry = {"kind": "scalar", "value": value.item() if hasattr(value, "item")
                     else value}
        else:
            raise TypeError(f"cannot encode field {f.name} of type {type(value).__name__}")
        spec["fields"][f.name] = entry
    return spec


def _array_specs(spec):
    """The array layouts of a message header, in the order ``_describe`` wrote them."""
    for entry in spec["fields"].values():
        if entry["kind"] == "array":
            yield entry
        elif entry["kind"] == "encrypted":
            yield from entry["arrays"].values()
        elif entry["kind"] == "message":
            yield from _array_specs(entry["value"])


def _rebuild(header, data, offset):
    arrays = []
    for spec in _array_specs(header):
        if spec["blob"] != len(arrays):
            raise ValueError("malformed HyFDCA message header (arrays out of order)")
        dtype = np.dtype(spec["dtype"])
        end = offset + int(np.prod(spec["shape"], dtype=np.int64)) * dtype.itemsize
        if end > len(data):
            raise ValueError("truncated HyFDCA message")
        arrays.append(np.frombuffer(data[offset:end], dtype=dtype).reshape(spec["shape"]).copy())
        offset = end
    if offset != len(data):
        raise ValueError(f"HyFDCA message has {len(data) - offset} trailing bytes")
    return _build(header, arrays)


def _build(spec, arrays):
    cls = MESSAGE_TYPES.get(spec["type"])
    if cls is None:
        raise ValueError(f"unknown HyFDCA message type {spec['type']!r}")
    values = {}
    for name, entry in spec["fields"].items():
        kind = entry["kind"]
        if kind == "none":
            values[name] = None
        elif kind == "scalar":
            values[name] = entry["value"]
        elif kind == "array":
            values[name] = arrays[entry["blob"]]
        elif kind == "encrypted":
            values[name] = vector_from_arrays(
                entry["meta"], {k: arrays[a["blob"]] for k, a in entry["arrays"].items()})
        elif kind == "message":
            values[name] = _build(entry["value"], arrays)
        else:
            raise ValueError(f"unknown field kind {kind!r}")
    for field in fields(cls):
        if field.name in values and not _fits(values[field.name], field.type):
            raise ValueError(f"malformed HyFDCA message: {cls.__name__}.{field.name} is "
                             f"{type(values[field.name]).__name__}, not {field.type}")
    return cls(**values)
