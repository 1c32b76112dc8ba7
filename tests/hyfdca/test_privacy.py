"""Privacy audit: with encryption on, what the server receives carries no plaintext dual
variables or inner products, and the server never holds a private or masking key."""

from dataclasses import fields

import numpy as np
import pytest

from crypto import EncryptedVector, KeyHolder, SecureSum
from hyfdca import partition as P
from hyfdca._protocol import run_hyfdca
from hyfdca._settings import HyFDCASettings

LAM = 0.05


def _run(cancer, crypto, monkeypatch):
    """A run exercising every phase; returns (run, every value a client encrypted or
    decrypted: dual variables and their updates, inner products and their parts)."""
    seen = []
    decrypt, encrypt = KeyHolder.decrypt, KeyHolder.encrypt

    def spy_decrypt(self, vector):
        values = decrypt(self, vector)
        seen.append(np.asarray(values, dtype=float))
        return values

    def spy_encrypt(self, values):
        seen.append(np.asarray(values, dtype=float).ravel())
        return encrypt(self, values)

    monkeypatch.setattr(KeyHolder, "decrypt", spy_decrypt)
    monkeypatch.setattr(KeyHolder, "encrypt", spy_encrypt)
    X, y = cancer
    fed = P.hybrid_grid(X[:48], y[:48], 2, 2)
    settings = HyFDCASettings.from_variant("line-search", lam=LAM, H=12,
                                           participation="fraction", fraction=0.75,
                                           second_inner_product=True)
    options = dict(n_length=512, insecure=True) if crypto == "paillier" else {}
    run, _ = run_hyfdca(fed, settings, max_rounds=3, eval_every=3, crypto=crypto,
                        crypto_options=options, record=True, seed=2)
    return run, np.concatenate(seen)


def _plaintext_leaks(run, secrets):
    """Messages whose ciphertext payloads or plaintext fields reveal a secret value."""
    secrets = secrets[np.abs(secrets) > 1e-9]
    leaks = []

    def visit(phase, message):
        for f in fields(message):
            value = getattr(message, f.name)
            if hasattr(value, "__dataclass_fields__"):
                visit(phase, value)
            elif isinstance(value, EncryptedVector):
                payload = np.array([float(v) for v in value.payload])
                decoded = np.ldexp(payload, -value.scale_bits)
                if np.any(np.isclose(decoded[:, None], secrets[None, :], atol=1e-9).any(axis=1)):
                    leaks.append((phase, type(message).__name__, f.name))
            elif isinstance(value, np.ndarray) and value.dtype == np.float64 and value.size:
                if np.any(np.isclose(value[:, None], secrets[None, :], rtol=0, atol=1e-12)
                          .any(axis=1)):
                    leaks.append((phase, type(message).__name__, f.name))

    for phase, _, message in run.channel.server_inbox:
        visit(phase, message)
    return leaks


def test_server_receives_no_plaintext_duals_or_inner_products(cancer, monkeypatch):
    run, secrets = _run(cancer, "paillier", monkeypatch)
    assert len(run.channel.server_inbox) > 0 and secrets.size > 100
    assert _plaintext_leaks(run, secrets) == []


def test_the_audit_catches_a_plaintext_backend(cancer, monkeypatch):
    """The same audit on the plaintext backend must flag the dual updates and parts."""
    run, secrets = _run(cancer, "plain", monkeypatch)
    flagged = {name for _, name, _ in _plaintext_leaks(run, secrets)}
    assert {"InnerProductParts", "DualUpdate"} <= flagged


def _reachable(obj, depth=4, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen or depth == 0:
        return []
    seen.add(id(obj))
    found = [obj]
    children = vars(obj).values() if hasattr(obj, "__dict__") else []
    if isinstance(obj, (list, tuple)):
        children = obj
    if isinstance(obj, dict):
        children = obj.values()
    for child in children:
        found += _reachable(child, depth - 1, seen)
    return found


def test_server_holds_no_private_key_and_no_mask_key(cancer, monkeypatch):
    from phe.paillier import PaillierPrivateKey

    run, _ = _run(cancer, "paillier", monkeypatch)
    held = _reachable(run.server)
    assert not any(isinstance(o, (PaillierPrivateKey, KeyHolder, SecureSum)) for o in held)
    assert any(isinstance(o, PaillierPrivateKey) for o in _reachable(run.clients[0]))


def test_paillier_iterates_match_the_plaintext_run(cancer):
    X, y = cancer
    fed = P.hybrid_grid(X[:60], y[:60], 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=LAM, H=15)
    w = {}
    for crypto, options in (("plain", {}), ("paillier", dict(n_length=512, insecure=True))):
        run, _ = run_hyfdca(fed, settings, max_rounds=3, eval_every=3, crypto=crypto,
                            crypto_options=options, seed=1, frac_bits=32)
        w[crypto] = run.server.w
    np.testing.assert_allclose(w["paillier"], w["plain"], atol=2.0**-30)


def test_short_keys_are_refused():
    from crypto import paillier_backend

    with pytest.raises(ValueError, match="under 2048 bits are insecure"):
        paillier_backend(n_length=1024)
