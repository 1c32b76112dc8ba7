"""Privacy audit: with encryption on, what the server receives carries no plaintext dual
variables or inner products, and the server never holds a private or masking key."""

from dataclasses import fields

import numpy as np
import pytest

from crypto import BACKENDS, BFVCiphertext, EncryptedVector, KeyHolder, SecureSum
from crypto._mask import MaskPayload
from feddata import partition as P
from hyfdca import run_hyfdca
from hyfdca import HyFDCASettings

LAM = 0.05
ENCRYPTED = sorted(set(BACKENDS) - {"plain"})  # every backend that hides values
SMALL_KEYS = {"paillier": dict(n_length=512, insecure=True),  # test keys only
              "fast-paillier": dict(n_length=512, insecure=True)}


def _run(cancer, crypto, monkeypatch):
    """A run exercising every phase; returns (run, every value a client encrypted or
    decrypted: dual variables and their updates, inner products and their parts)."""
    seen = []
    decrypt, encrypt = KeyHolder.decrypt, KeyHolder.encrypt

    def spy_decrypt(self, vector):
        values = decrypt(self, vector)
        seen.append(np.asarray(values, dtype=float))
        return values

    def spy_encrypt(self, values, range_bits=None):
        seen.append(np.asarray(values, dtype=float).ravel())
        return encrypt(self, values, range_bits)

    monkeypatch.setattr(KeyHolder, "decrypt", spy_decrypt)
    monkeypatch.setattr(KeyHolder, "encrypt", spy_encrypt)
    X, y = cancer
    fed = P.hybrid_grid(X[:48], y[:48], 2, 2)
    settings = HyFDCASettings.from_variant("line-search", lam=LAM, H=12,
                                           participation="fraction", fraction=0.75,
                                           second_inner_product=True)
    run, _ = run_hyfdca(fed, settings, max_rounds=3, eval_every=3, crypto=crypto,
                        crypto_options=SMALL_KEYS.get(crypto, {}), record=True, seed=2)
    return run, np.concatenate(seen)


def _plaintext_leaks(inbox, secrets):
    """Messages of ``inbox`` (the server's: (phase, sender, message)) whose ciphertext
    payloads or plaintext fields reveal a secret value.

    A ciphertext payload leaks if one of its words is a secret's fixed-point integer
    round(s 2^f) (within one, the encoder's rounding) or, where it is bytes, if 8 of its
    bytes are the secret's float64 (to 1e-12 relative). Calibrated so that chance cannot
    fail the test: a random 64-bit word matches a given secret with probability about
    3 / 2^64 + 5e-16, and a run has ~4e6 words and ~1e3 secrets: a false alarm has
    probability about 3e-6 a run. (A window relative to the secret, 1e-5 wide, would
    hold ~10^5 integers per secret and match random or header words by chance.)"""
    secrets = secrets[np.abs(secrets) > 1e-9]
    leaks = []

    def visit(phase, message):
        for f in fields(message):
            value = getattr(message, f.name)
            if hasattr(value, "__dataclass_fields__"):
                visit(phase, value)
            elif isinstance(value, EncryptedVector):
                integers, doubles = _payload_words(value.payload)
                encoded = np.rint(np.ldexp(secrets, value.scale_bits))
                if (_near(integers, encoded, 1.0)
                        or (doubles is not None and _near(doubles, secrets, 0.0, rtol=1e-12))):
                    leaks.append((phase, type(message).__name__, f.name))
            elif isinstance(value, np.ndarray) and value.dtype == np.float64 and value.size:
                if _near(value, secrets, 1e-12):
                    leaks.append((phase, type(message).__name__, f.name))

    for phase, _, message in inbox:
        visit(phase, message)
    return leaks


def _near(values, secrets, atol, rtol=0.0):
    """Whether any of ``values`` is close to a secret s (|v - s| <= atol + rtol |s|, as
    np.isclose), checked against its two nearest secrets by binary search."""
    ordered = np.sort(secrets)
    values = values[np.isfinite(values)]
    if values.size == 0 or ordered.size == 0:
        return False
    above = np.clip(np.searchsorted(ordered, values), 0, ordered.size - 1)
    below = np.clip(above - 1, 0, ordered.size - 1)
    return bool(any(np.any(np.abs(values - ordered[i]) <= atol + rtol * np.abs(ordered[i]))
                    for i in (above, below)))


def _payload_words(payload):
    """What the server reads in a payload: its numbers (the ciphertext integers, or the
    masked value lane, signed, of the masking backend), as floats, and for a payload of
    bytes (BFV) the same bytes read as float64 too (else None). (The masking backend's
    MAC tags, a m + k mod p with p < 2^32, carry the value only under the one-time key k
    and are not read.)"""
    if isinstance(payload, MaskPayload):
        return payload.value.view(np.int64).astype(float), None
    if any(isinstance(v, BFVCiphertext) or v is None for v in payload):  # the bytes, as words
        blobs = [b"\0" * 8 if v is None else b"".join(v.blobs()) for v in payload]
        words = b"".join(b[:len(b) // 8 * 8] for b in blobs)
        return np.frombuffer(words, dtype="<i8").astype(float), np.frombuffer(words, dtype="<f8")
    return np.array([float(v) for v in payload]), None


@pytest.mark.parametrize("crypto", ENCRYPTED)
def test_server_receives_no_plaintext_duals_or_inner_products(cancer, monkeypatch, crypto):
    run, secrets = _run(cancer, crypto, monkeypatch)
    assert len(run.transport.server_inbox) > 0 and secrets.size > 100
    assert _plaintext_leaks(run.transport.server_inbox, secrets) == []


def test_the_audit_catches_a_plaintext_backend(cancer, monkeypatch):
    """The same audit on the plaintext backend must flag the dual updates and parts."""
    run, secrets = _run(cancer, "plain", monkeypatch)
    flagged = {name for _, name, _ in _plaintext_leaks(run.transport.server_inbox, secrets)}
    assert {"InnerProductParts", "DualUpdate"} <= flagged


@pytest.mark.parametrize("planted", ["fixed-point", "float64"])
def test_the_audit_reads_a_secret_planted_in_lattice_ciphertext_bytes(cancer, monkeypatch,
                                                                      planted):
    """A BFV ciphertext of a real run with one secret written into its bytes, as its
    fixed-point integer or as its float64, is flagged; the untouched one is not."""
    from dataclasses import replace

    run, secrets = _run(cancer, "bfv", monkeypatch)
    phase, sender, message = next(m for m in run.transport.server_inbox
                                  if type(m[2]).__name__ == "InnerProductParts")
    parts = message.parts
    secret = secrets[np.argmax(np.abs(secrets) > 0.1)]
    word = (np.array([np.rint(np.ldexp(secret, parts.scale_bits))], dtype="<i8")
            if planted == "fixed-point" else np.array([secret], dtype="<f8")).tobytes()
    blobs = list(parts.payload[0].blobs())
    blobs[0] = blobs[0][:800] + word + blobs[0][808:]
    payload = parts.payload.copy()
    payload[0] = BFVCiphertext(data=blobs)
    tampered = replace(message, parts=EncryptedVector(payload, parts.scale_bits,
                                                      parts.key_id, parts.bound,
                                                      parts.slots, parts.length))
    assert _plaintext_leaks([(phase, sender, message)], secrets) == []
    assert _plaintext_leaks([(phase, sender, tampered)], secrets) == [
        (phase, "InnerProductParts", "parts")]


def _reachable(obj, depth=4, seen=None):
    """Objects reachable from ``obj`` in ``depth`` steps: attributes (of __dict__ and
    __slots__), items of lists, tuples, dicts and object arrays."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth == 0:
        return []
    seen.add(id(obj))
    found = [obj]
    children = list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    children += [getattr(obj, name) for name in getattr(type(obj), "__slots__", ())
                 if hasattr(obj, name)]
    if isinstance(obj, (list, tuple)):
        children = obj
    if isinstance(obj, dict):
        children = obj.values()
    if isinstance(obj, np.ndarray) and obj.dtype == object:
        children = obj.ravel()
    for child in children:
        found += _reachable(child, depth - 1, seen)
    return found


@pytest.mark.parametrize("crypto", ENCRYPTED)
def test_server_holds_no_private_key_and_no_mask_key(cancer, monkeypatch, crypto):
    import pickle

    from phe.paillier import PaillierPrivateKey

    from crypto._fast_paillier import _PrivateContext

    secret_types = (PaillierPrivateKey, _PrivateContext, KeyHolder, SecureSum)
    run, _ = _run(cancer, crypto, monkeypatch)
    held = _reachable(run.server)
    assert not any(isinstance(o, secret_types) for o in held)
    client = _reachable(run.clients[0])
    assert any(isinstance(o, KeyHolder) for o in client)
    assert any(isinstance(o, SecureSum) for o in client)
    # the whole server state, serialised, carries no byte string of a secret
    blob = pickle.dumps(run.server)
    keys, masker = run.clients[0].keys, run.clients[0].masker
    secrets = [masker._key]
    if crypto == "paillier":
        secrets += [_le(keys._private_key.p), _le(keys._private_key.q)]
    elif crypto == "fast-paillier":
        secrets += [_le(keys._private.p), _le(keys._private.q)]
    elif crypto == "bfv":  # the secret contexts; the server's load without a secret key
        secrets += keys._context_blobs
        assert not any(ctx.has_secret_key() for ctx in run.server.evaluator.contexts())
        # in process the server holds the very ciphertext objects clients made and
        # decrypted: none of them is linked to a secret context
        ciphertexts = [o for o in _reachable(run.server, depth=6)
                       if isinstance(o, BFVCiphertext)]
        assert len(ciphertexts) > 10
        for ciphertext in ciphertexts:
            for vector in ciphertext._live or ():
                assert not vector.context().has_secret_key()
    else:
        secrets += [keys._stream_key, keys._mac.tobytes()]
    assert all(len(secret) >= 16 and secret not in blob for secret in secrets)


def _le(value):
    value = int(value)
    return value.to_bytes((value.bit_length() + 7) // 8, "little")


@pytest.mark.parametrize("crypto", ENCRYPTED)
@pytest.mark.parametrize("variant", ["auto", "line-search"])
def test_encrypted_iterates_match_the_plaintext_run(cancer, crypto, variant):
    """w (server) and alpha (clients) of an encrypted run equal the plaintext run's to the
    fixed-point precision, bit for bit: every backend carries the same integers."""
    X, y = cancer
    fed = P.hybrid_grid(X[:60], y[:60], 2, 2)
    options = dict(H=15) if variant == "auto" else dict(
        H=12, participation="fraction", fraction=0.75, second_inner_product=True)
    settings = HyFDCASettings.from_variant(variant, lam=LAM, **options)
    w, alpha = {}, {}
    for backend in ("plain", crypto):
        run, _ = run_hyfdca(fed, settings, max_rounds=3, eval_every=3, crypto=backend,
                            crypto_options=SMALL_KEYS.get(backend, {}), seed=1, frac_bits=32)
        w[backend] = run.server.w
        alpha[backend] = np.concatenate([c.alpha for c in run.clients])
    assert np.any(alpha["plain"] != 0) and np.any(w["plain"] != 0)
    np.testing.assert_array_equal(w[crypto], w["plain"])
    np.testing.assert_array_equal(alpha[crypto], alpha["plain"])


@pytest.mark.parametrize("crypto", ["paillier", "fast-paillier"])
def test_short_keys_are_refused(cancer, crypto):
    X, y = cancer
    fed = P.hybrid_grid(X[:20], y[:20], 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=3)
    with pytest.raises(ValueError, match="under 2048 bits are insecure"):
        run_hyfdca(fed, settings, max_rounds=1, crypto=crypto,
                   crypto_options=dict(n_length=1024))


def test_the_audit_catches_a_mask_backend_without_a_keystream(cancer, monkeypatch):
    """With the keystream zeroed the masked lane is the encoding itself: the audit must
    flag it (so its silence on the real backend means something)."""
    from crypto._mask import MaskKeyHolder

    def zero_stream(self, nonce, start, count):
        return np.zeros((count, 4), dtype=np.uint64)

    monkeypatch.setattr(MaskKeyHolder, "_stream", zero_stream)
    run, secrets = _run(cancer, "mask", monkeypatch)
    flagged = {name for _, name, _ in _plaintext_leaks(run.transport.server_inbox, secrets)}
    assert {"InnerProductParts", "DualUpdate"} <= flagged


def test_mask_recipes_stay_short_in_long_runs(cancer):
    """Stored Enc(alpha) of the masking backend absorbs atoms every round; clients refresh
    what they sync, so recipes stay bounded and the iterates stay exact."""
    X, y = cancer
    fed = P.hybrid_grid(X[:150], y[:150], 3, 3)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=40)
    w = {}
    for crypto, options in (("plain", {}), ("mask", dict(refresh_atoms=4))):
        run, _ = run_hyfdca(fed, settings, max_rounds=25, eval_every=25, crypto=crypto,
                            crypto_options=options, seed=3, record=crypto == "mask")
        w[crypto] = run.server.w
    atoms = np.diff(run.server.enc_alpha.payload.indptr)
    refreshes = [m.refresh for _, _, m in run.transport.server_inbox
                 if getattr(m, "refresh", None) is not None]
    assert len(refreshes) > 0 and atoms.max() <= 4 + 2 * 3
    np.testing.assert_allclose(w["mask"], w["plain"], atol=2.0**-30)


def test_no_client_masks_two_share_vectors_alike(cancer, monkeypatch):
    """Every secure sum has a label of its own: a round retried without a lost client,
    a second prediction and a second certificate in one round all mask afresh. With a
    label reused, the difference of a client's two shares would be the difference of
    its values, in the clear to the server."""
    from hyfdca import FaultyTransport, HyFDCARun
    masked = {}
    mask = SecureSum.mask

    def spy(self, values, client, participants, tag):
        masked.setdefault((client, tag), []).append(np.asarray(values, dtype=float).copy())
        return mask(self, values, client, participants, tag)

    monkeypatch.setattr(SecureSum, "mask", spy)
    X, y = cancer
    fed = P.vertical(X[:60], y[:60], 8)        # 8 parties: 3 neighbours either side
    settings = HyFDCASettings.from_variant("line-search", lam=LAM, H=5,
                                           participation="fraction", fraction=1.0)
    run = HyFDCARun(fed, settings, crypto="mask", transport=lambda c, e, r: FaultyTransport(
        c, e, r, retries=0, script=[(2, "primal aggregation", 0, "drop")]))
    for _ in range(3):
        run.step()
    new = P.vertical(X[60:65], y[60:65], 8)
    for w in (run.server.w, 2 * run.server.w):
        run.predict(new.n_samples, w=w, blocks=new.blocks)
        run.certificate()
    assert run.round == 3 and len(masked) > 8 * 6
    for (client, tag), shares in masked.items():
        assert len(shares) == 1, f"client {client} masked {len(shares)} vectors as {tag}"
