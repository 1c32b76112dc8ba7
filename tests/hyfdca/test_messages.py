"""Messages are plain data: every type, ciphertexts of every backend included, survives
encode_message -> bytes -> decode_message exactly, and a transport that carries them as
bytes gives the same run as the in-process one (the transport seam)."""

from dataclasses import fields

import numpy as np
import pytest

from crypto import EncryptedVector, deal_keys
from crypto._mask import MaskPayload
from feddata.partition import hybrid_grid
from hyfdca import HyFDCARun, HyFDCASettings, InProcessTransport, decode_message, encode_message
from hyfdca import _messages as msg

BACKENDS = {"plain": {}, "mask": {},
            "paillier": dict(n_length=512, insecure=True),        # test keys only
            "fast-paillier": dict(n_length=512, insecure=True, slots=1),
            "fast-paillier-packed": dict(n_length=512, insecure=True), "bfv": {}}


def _examples(keys):
    rng = np.random.default_rng(0)
    enc = keys.encrypt(rng.normal(size=5))
    pos = np.array([0, 3, 4, 7, 9], dtype=np.int64)
    sync = msg.DualSync(pos, enc, 0.625)
    refresh = msg.DualRefresh(pos[:2], keys.encrypt(rng.normal(size=2)))
    w = rng.normal(size=6)
    return [
        msg.SetupRequest(np.array([1, 2, 3, 1]), 9, np.array([[0, 2], [1, 3], [4, -1]])),
        msg.SetupRequest(np.array([2, 2]), 3, np.array([[0, 1]]), None, np.array([1]),
                         np.array([0, 4]), "9f86d081884c7d65"),
        msg.SharedNormParts(pos, enc, rng.integers(0, 2**63, 5, dtype=np.uint64),
                            rng.integers(0, 2**63, (3, 2), dtype=np.uint64),
                            rng.integers(0, 2**63, 2, dtype=np.uint64)),
        msg.SharedNorms(pos, enc),
        msg.SetupDone(12.5, 1.0),
        msg.PredictRequest(w, 7, np.arange(4), "prediction-3"),
        msg.PredictShares(rng.integers(0, 2**63, 7, dtype=np.uint64), pos),
        msg.EntryTagRequest(np.array([1, 5]), np.array([0, 3, 4]), "prediction-3"),
        msg.EntryTags(rng.integers(0, 2**63, (4, 2), dtype=np.uint64)),
        sync,
        refresh,
        msg.RoundStart(7, sync, rng.random(10) < 0.5),
        msg.RoundStart(8, sync, rng.random(10) < 0.5, True),
        msg.PrimalContribution(w, pos, refresh),
        msg.PrimalContribution(w, pos),
        msg.Resync(sync),
        msg.EvalContribution(w),
        msg.WeightsAndRequest(w, pos, sync),
        msg.WeightsAndRequest(w, pos),
        msg.WeightsAndRequest(w, pos, None, False),
        msg.InnerProductParts(enc, refresh),
        msg.Margins(enc),
        msg.Margins(None, w, sync),
        msg.DualUpdate(pos, enc, None),
        msg.DualUpdate(pos, enc, refresh),
        msg.TentativeStep(pos, enc, np.array([1, 2, 2, 1, 3]), np.arange(4), "round-3", 3,
                          True),
        msg.PrimalUpdate(None, w, rng.integers(0, 2**63, 3, dtype=np.uint64),
                         pos),
        msg.PrimalUpdate(w, w, None, None),
        msg.EvalRequest(enc, None, np.arange(4), "certificate-2", 1.0, 0.40625, 0.71875, 3),
        msg.EvalRequest(enc, enc, np.arange(4), "certificate-4", 0.625, 0.5, 1.0, 4),
        msg.EvalRequest(enc, None, np.arange(4), "certificate-5", 0.75, 0.5, 1.0, 5, 2, 3),
        msg.EvalShares(rng.integers(0, 2**63, 2, dtype=np.uint64)),
    ]


def _same(a, b, keys):
    """Field by field: same types, same array dtypes and bits, same ciphertexts."""
    assert type(a) is type(b)
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, EncryptedVector):
            assert isinstance(y, EncryptedVector)
            assert (x.scale_bits, x.key_id, x.bound, x.slots, x.length) == \
                   (y.scale_bits, y.key_id, y.bound, y.slots, y.length)
            if isinstance(x.payload, MaskPayload):
                for lane in ("value", "tags", "indptr", "nonce", "pos", "coef"):
                    np.testing.assert_array_equal(getattr(x.payload, lane),
                                                  getattr(y.payload, lane))
            elif x.key_id.startswith("bfv"):
                assert [c and c.blobs() for c in x.payload] == \
                       [c and c.blobs() for c in y.payload]
            else:
                assert [int(c) for c in x.payload] == [int(c) for c in y.payload]
            np.testing.assert_array_equal(keys.decrypt(x), keys.decrypt(y))
        elif isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert x.tobytes() == y.tobytes()
        elif hasattr(x, "__dataclass_fields__"):
            _same(x, y, keys)
        else:
            assert x == y and type(x) is type(y)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_every_message_type_round_trips_through_bytes(backend):
    keys, _, _ = deal_keys(backend.removesuffix("-packed"), **BACKENDS[backend])
    examples = _examples(keys)
    assert {type(m) for m in examples} == set(msg.MESSAGE_TYPES.values())
    for message in examples:
        data = encode_message(message)
        assert isinstance(data, bytes)
        _same(message, decode_message(data), keys)


def test_decoding_refuses_damaged_bytes():
    keys, _, _ = deal_keys("plain")
    data = encode_message(_examples(keys)[0])
    with pytest.raises(ValueError, match="magic"):
        decode_message(b"x" + data[1:])
    with pytest.raises(ValueError, match="truncated"):
        decode_message(data[:-3])
    with pytest.raises(ValueError, match="trailing"):
        decode_message(data + b"\0")
    with pytest.raises(ValueError, match="truncated"):
        decode_message(data[:15])


def _reencoded(message, edit):
    """``message``'s bytes with its JSON header changed by ``edit`` (arrays unchanged)."""
    import json
    import struct
    data = encode_message(message)
    start = len(b"HYFDCA-MSG1") + 8
    (size,) = struct.unpack("<Q", data[len(b"HYFDCA-MSG1"):start])
    header = json.loads(data[start:start + size])
    edit(header)
    head = json.dumps(header).encode()
    return b"HYFDCA-MSG1" + struct.pack("<Q", len(head)) + head + data[start + size:]


def test_decoding_names_a_malformed_header_or_a_field_of_the_wrong_kind():
    from hyfdca._messages import PrimalContribution
    message = PrimalContribution(change=np.arange(3.0), drawn=np.arange(2))
    assert np.array_equal(decode_message(encode_message(message)).change, np.arange(3.0))
    with pytest.raises(ValueError, match="malformed HyFDCA message header"):
        decode_message(_reencoded(message, lambda h: h.pop("fields")))
    with pytest.raises(ValueError, match="malformed HyFDCA message header"):
        decode_message(_reencoded(message, lambda h: h.pop("type")))

    def scalar_refresh(header):   # a number where a DualRefresh or None belongs
        header["fields"]["refresh"] = {"kind": "scalar", "value": 1.0}

    with pytest.raises(ValueError, match="PrimalContribution.refresh is float, not "):
        decode_message(_reencoded(message, scalar_refresh))
    from hyfdca._messages import SetupDone
    done = SetupDone(max_sq_norm=2.0, max_abs_label=1.0)

    def listed_norm(header):      # a list where a number belongs
        header["fields"]["max_sq_norm"] = {"kind": "scalar", "value": [2.0, 3.0]}

    with pytest.raises(ValueError, match="SetupDone.max_sq_norm is list, not "):
        decode_message(_reencoded(done, listed_norm))


class BytesTransport(InProcessTransport):
    """A transport that, like a network, carries only bytes (every message and reply is
    encoded and decoded on its way) and builds every message of a phase before the first
    reply comes back."""

    def exchange(self, phase, clients, build, receive):
        self._open(phase)
        messages = {k: build(k) for k in clients}
        replies = {}
        for k, message in messages.items():
            self._sent(phase, k, message)
            delivered = decode_message(encode_message(message))
            replies[k] = decode_message(encode_message(self.clients[k].handle(delivered)))
        for k, reply in replies.items():
            self._received(phase, k, reply)
            receive(k, reply)


@pytest.mark.parametrize("crypto", ["plain", "mask"])
def test_a_transport_of_bytes_gives_the_same_run(crypto):
    from feddata.datasets import load_breast_cancer

    ds = load_breast_cancer()
    fed = hybrid_grid(ds.X[:200], ds.y[:200], 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=1e-2, participation="fraction",
                                           fraction=0.5)
    runs = []
    for transport in (None, BytesTransport):
        run = HyFDCARun(fed, settings, crypto=crypto, seed=4, transport=transport)
        records = [run.step() for _ in range(12)]
        runs.append((run, records, run.certificate()))
    (a, ra, ca), (b, rb, cb) = runs
    assert a.server.w.tobytes() == b.server.w.tobytes()
    for k in range(len(a.clients)):
        assert a.clients[k].alpha.tobytes() == b.clients[k].alpha.tobytes()
    assert [r["step"] for r in ra] == [r["step"] for r in rb]
    if crypto == "plain":  # (mask: refreshes of shared samples can be repeated)
        assert [r["bytes_up"] for r in ra] == [r["bytes_up"] for r in rb]
    assert ca[0] == cb[0] and ca[1] == cb[1]


@pytest.mark.parametrize("backend", ["fast-paillier", "bfv"])
def test_packed_ciphertexts_round_trip_through_bytes(backend):
    """Packed ciphertexts (several values each), ciphertexts of zeros included, survive
    the wire too."""
    keys, ev, _ = deal_keys(backend, **({"n_length": 512, "insecure": True}
                                        if backend == "fast-paillier" else {}))
    values = np.random.default_rng(1).normal(size=3 * keys.slots + 1)
    enc = keys.encrypt(values)
    assert enc.slots == keys.slots > 1 and len(enc.payload) == 4
    total = ev.zeros(6, enc.scale_bits)
    ev.add_at(total, [0, 2, 3, 5], enc)
    for vector in (enc, total):
        message = msg.EvalRequest(vector, vector, np.arange(3), "certificate-0", 1.0, 1.0,
                                  1.0, 0)
        _same(message, decode_message(encode_message(message)), keys)


def _mask_vectors():
    keys, ev, _ = deal_keys("mask")
    fresh = keys.encrypt(np.linspace(-1, 1, 40))
    other = keys.encrypt(np.linspace(2, 3, 40))
    summed = ev.add(fresh, other)
    stored = ev.zeros(60, fresh.scale_bits)
    ev.add_at(stored, np.arange(10, 50), summed)
    return keys, ev, {"fresh": fresh, "zeros": ev.zeros(40, fresh.scale_bits),
                      "sum": summed, "scaled": ev.multiply(summed, 3, 0),
                      "scattered": stored, "taken": ev.take(stored, np.arange(5, 30))}


def test_a_masked_vector_sends_the_bytes_it_is_counted_for():
    """The mask backend's accounting (MaskEvaluator.nbytes) is what crypto's wire form
    sends, array bytes for array bytes, for fresh, summed, scaled, scattered and taken
    vectors; and the compact form rebuilds every lane and recipe bit for bit."""
    from crypto import vector_from_arrays, vector_to_arrays

    keys, ev, vectors = _mask_vectors()
    for name, vector in vectors.items():
        meta, arrays = vector_to_arrays(vector)
        assert sum(np.asarray(a).nbytes for a in arrays.values()) == ev.nbytes(vector), name
        back = vector_from_arrays(meta, arrays)
        for lane in ("value", "tags", "indptr", "nonce", "pos", "coef"):
            np.testing.assert_array_equal(getattr(back.payload, lane),
                                          getattr(vector.payload, lane), err_msg=name)
        np.testing.assert_array_equal(keys.decrypt(back), keys.decrypt(vector))


@pytest.mark.parametrize("backend", ["plain", "mask", "paillier", "fast-paillier"])
def test_a_message_is_counted_for_the_bytes_it_sends_less_its_header(backend):
    """message_nbytes against encode_message: at least the bytes after the JSON header
    (arrays and ciphertexts) and at most the whole message (its scalars and strings
    travel in the header)."""
    import struct

    keys, ev, _ = deal_keys(backend, **BACKENDS[backend])
    for message in _examples(keys):
        data = encode_message(message)
        magic = len(b"HYFDCA-MSG1")
        body = len(data) - magic - 8 - struct.unpack("<Q", data[magic:magic + 8])[0]
        assert body <= msg.message_nbytes(message, ev) <= len(data), type(message).__name__


def test_a_tampered_compact_mask_payload_is_refused_before_it_is_expanded():
    """Arrays of other shapes are a CiphertextError naming them, before anything is
    built from them: a fresh nonce of 1,000 rows over 20,000 values asked for 320 MB."""
    from crypto import CiphertextError, vector_from_arrays, vector_to_arrays

    _, _, vectors = _mask_vectors()
    meta, arrays = vector_to_arrays(vectors["fresh"])
    tampered = dict(arrays, fresh_nonce=np.zeros((1000, 12), dtype=np.uint8))
    with pytest.raises(CiphertextError, match="malformed masked payload on the wire"):
        vector_from_arrays(meta, tampered)
    meta, arrays = vector_to_arrays(vectors["sum"])
    for name, bad in (("counts", arrays["counts"][:-1]),
                      ("atom_nonce", arrays["atom_nonce"] + 5),
                      ("coef_tags", arrays["coef_tags"][:, :2])):
        with pytest.raises(CiphertextError, match="malformed masked payload on the wire"):
            vector_from_arrays(meta, dict(arrays, **{name: bad}))
