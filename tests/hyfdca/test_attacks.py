"""The reconstruction attacks of docs/threat-model.md on what the server saw: they recover the
clients' data from a plaintext run and nothing better than chance from an encrypted one."""

import dataclasses

import numpy as np
import pytest

from crypto import BACKENDS, EncryptedVector
from feddata import partition as P
from hyfdca import run_hyfdca
from hyfdca import HyFDCASettings
from hyfdca.attacks import (dual_attack, margin_attack, read_as_plaintext,
                            reconstruction_quality)

LAM = 0.05
N = 24


def _recorded_run(cancer, crypto):
    """(data, run) of a 2x2 hybrid run (12 samples x 15 features per client) with every
    exchange kept."""
    X, y = cancer
    fed = P.hybrid_grid(X[:N], y[:N], 2, 2)
    # squared loss: every dual keeps moving, so the pairs (a_k, v_k) span R^|I_k|
    settings = HyFDCASettings.from_variant("paper", loss="squared", lam=LAM, H=3)
    options = dict(n_length=512, insecure=True) if "paillier" in crypto else {}
    run, _ = run_hyfdca(fed, settings, max_rounds=30, eval_every=1, crypto=crypto,
                        crypto_options=options, record=True, seed=4)
    return fed, run


def _transcript(cancer, crypto):
    fed, run = _recorded_run(cancer, crypto)
    return fed, run.transport.transcript


DECOYS = 12


def _with_decoys(cancer, crypto):
    """(data, transcript, decoy transcripts): the decoys run on disjoint slices of N rows."""
    X, y = cancer
    fed, transcript = _transcript((X[:N], y[:N]), crypto)
    decoys = [_transcript((X[N * j:N * (j + 1)], y[N * j:N * (j + 1)]), crypto)[1]
              for j in range(1, DECOYS + 1)]
    return fed, transcript, decoys


@pytest.fixture(scope="module")
def plain_run(cancer):
    return _with_decoys(cancer, "plain")


# every backend; bfv's thirteen 30-round runs take 150 s on 2 cores, so it is -m slow
# (its ciphertext bytes are audited in the default run by test_privacy.py)
@pytest.fixture(scope="module", params=[
    pytest.param(name, marks=pytest.mark.slow) if name == "bfv" else name
    for name in sorted(set(BACKENDS) - {"plain"})])
def encrypted_run(cancer, request):
    return _with_decoys(cancer, request.param)


def _attacks(fed, transcript, k, read=read_as_plaintext):
    n_local = fed.blocks[k].X.shape[0]
    return {"dual": dual_attack(transcript, k, n_local, LAM * N, read),
            "margin": margin_attack(transcript, k, n_local, read)}


@pytest.mark.parametrize("k", range(4))
def test_a_plaintext_run_gives_the_data_away(plain_run, k):
    fed, transcript, _ = plain_run
    truth = fed.blocks[k].X.toarray()
    for name, estimate in _attacks(fed, transcript, k).items():
        error, corr = reconstruction_quality(estimate, truth)
        assert error <= 1e-6, f"{name} attack: max error {error:.2e}"
        assert corr > 1 - 1e-9


def _pair_ciphertexts(real, decoy, twins):
    """Map every EncryptedVector of a message to the one at the same place in the decoy's
    message; the positions and draws (integer arrays) must agree, or the runs do not align."""
    assert type(real) is type(decoy), "the decoy run's messages do not align"
    if isinstance(real, EncryptedVector):
        twins[id(real)] = decoy
    elif dataclasses.is_dataclass(real):
        for field in dataclasses.fields(real):
            _pair_ciphertexts(getattr(real, field.name), getattr(decoy, field.name), twins)
    elif isinstance(real, np.ndarray) and real.dtype.kind in "ib":
        assert np.array_equal(real, decoy), "the decoy run's positions differ"


def _decoy_reader(transcript, decoy_transcript):
    """Read each ciphertext of the real run as the ciphertext at the same place in a run of
    the same protocol on other data: reads with every structure the real ones have (the
    same ciphertext sent twice, the server's homomorphic sums) but nothing of this data."""
    assert len(transcript) == len(decoy_transcript), "the decoy run's transcript differs"
    twins = {}
    for real, decoy in zip(transcript, decoy_transcript):
        _pair_ciphertexts(real[3], decoy[3], twins)
    return lambda vector: read_as_plaintext(twins[id(vector)])


def _total_correlation(fed, transcript, attack, read=read_as_plaintext):
    """Sum over the four clients of |corr| between the attack's estimate and the data."""
    return sum(reconstruction_quality(_attacks(fed, transcript, k, read)[attack],
                                      fed.blocks[k].X.toarray())[1] for k in range(4))


def _excess_over_chance(fed, transcript, decoys, attack):
    """How far the attack's total correlation with the data (out of 4, one per client)
    lies above its chance level: the median of the same attack with every ciphertext read
    from a decoy run (the same protocol, seed and crypto backend on other rows of the data
    set), whose reads cannot know this data. The plaintext v_k and w still mix the data's
    rows, so chance is well above 0."""
    return _total_correlation(fed, transcript, attack) - np.median(
        _chance_totals(transcript, decoys, fed, attack))


def _chance_totals(transcript, decoys, fed, attack):
    """The attack's total correlation with every ciphertext read from each decoy run."""
    return [_total_correlation(fed, transcript, attack, _decoy_reader(transcript, decoy))
            for decoy in decoys]


# The largest excess an encrypted run may show, per attack. Measured on 15 runs with fresh
# keys for each of mask, paillier and fast-paillier (and 5 of bfv), each of the 13 totals
# of a run (the real one and its 12 decoys) against the median of the other 12: the excess
# never passed 0.92 (dual) and 0.021 (margin); chance totals lay in 0.06-1.44 and
# 0.002-0.032. A plaintext transcript gives 3.4 and 4.0. The dual attack's chance total
# has a standard deviation of 0.13-0.38 within a run, so 1.5 is about 6 of them above
# chance. (A z-score against the decoys' own standard deviation, used before, is not
# calibrated: with 12 decoys that deviation is itself noisy, and a run with a small one
# gave z = 7.2 on mask and 9.5 on paillier by chance.)
EXCESS_LIMIT = {"dual": 1.5, "margin": 0.25}


@pytest.mark.parametrize("attack", ["dual", "margin"])
def test_an_encrypted_run_gives_nothing_better_than_chance(encrypted_run, attack):
    fed, transcript, decoys = encrypted_run
    for k in range(4):
        estimate = _attacks(fed, transcript, k)[attack]
        corr = reconstruction_quality(estimate, fed.blocks[k].X.toarray())[1]
        assert corr < 0.9, f"{attack} attack on client {k}: correlation {corr:.3f}"
    excess = _excess_over_chance(fed, transcript, decoys, attack)
    assert excess <= EXCESS_LIMIT[attack], (
        f"{attack} attack: total correlation {excess:.3f} above chance")


@pytest.mark.parametrize("crypto", ["mask", "fast-paillier"])
def test_an_encrypted_transcript_read_with_the_clients_keys_gives_the_data_away(cancer,
                                                                              crypto):
    """The positive control of the chance test above: the attacks read exactly the
    messages that carry the data (packed layouts included), so a reader holding the
    clients' key recovers every block; without it they see chance."""
    fed, run = _recorded_run(cancer, crypto)
    keys = run.clients[0].keys
    for k in range(4):
        truth = fed.blocks[k].X.toarray()
        for name, estimate in _attacks(fed, run.transport.transcript, k,
                                       read=keys.decrypt).items():
            error, corr = reconstruction_quality(estimate, truth)
            assert error <= 1e-6 and corr > 1 - 1e-9, f"{name} attack on client {k}"


@pytest.mark.parametrize("attack", ["dual", "margin"])
def test_the_chance_test_sees_a_plaintext_transcript(plain_run, attack):
    """The test above can fail: on a plaintext run the same statistic is far above the
    limit."""
    assert _excess_over_chance(*plain_run, attack) > 2 * EXCESS_LIMIT[attack]


@pytest.mark.slow
@pytest.mark.parametrize("crypto,runs", [("mask", 8), ("paillier", 8), ("fast-paillier", 8),
                                         ("bfv", 2)])
def test_the_excess_limit_is_calibrated(cancer, crypto, runs):
    """Where EXCESS_LIMIT comes from: over fresh key sets, each of a run's 13 totals (the
    real one and its decoys, all chance under a secure backend) against the median of the
    other 12 stays below 80% of the limit (-m slow; ~6 minutes)."""
    for _ in range(runs):
        fed, transcript, decoys = _with_decoys(cancer, crypto)
        for attack, limit in EXCESS_LIMIT.items():
            totals = ([_total_correlation(fed, transcript, attack)]
                      + _chance_totals(transcript, decoys, fed, attack))
            for j, total in enumerate(totals):
                excess = total - np.median(totals[:j] + totals[j + 1:])
                assert excess <= 0.8 * limit, f"{crypto} {attack}: chance excess {excess:.3f}"


def test_the_attacks_say_when_the_transcript_is_too_short(cancer):
    X, y = cancer
    fed = P.hybrid_grid(X[:N], y[:N], 2, 2)
    settings = HyFDCASettings.from_variant("paper", loss="squared", lam=LAM, H=3)
    run, _ = run_hyfdca(fed, settings, max_rounds=2, eval_every=10, record=True)
    with pytest.raises(ValueError, match="needs at least"):
        dual_attack(run.transport.transcript, 0, 12, LAM * N)
    run, _ = run_hyfdca(fed, settings, max_rounds=2, eval_every=10)  # not recorded
    with pytest.raises(ValueError, match="no inner-product exchange"):
        margin_attack(run.transport.transcript, 0, 12)


def test_the_transcript_keeps_what_crossed_the_wire(cancer):
    """Under partial participation the default runs phase E, and the server updates a
    client's stored parts in place: the transcript keeps each reply as it was sent, so
    every recorded part is x_i^k . w at the w its request carried."""
    from hyfdca import _messages as msg
    from hyfdca.attacks import client_blocks
    X, y = cancer
    fed = P.hybrid_grid(X[:N], y[:N], 2, 2)
    settings = HyFDCASettings.from_variant("auto", loss="squared", lam=LAM, H=3,
                                           participation="fraction", fraction=0.5)
    run, _ = run_hyfdca(fed, settings, max_rounds=60, eval_every=1, record=True, seed=4)
    assert run.server.round_settings.second_inner_product
    transcript, checked = run.transport.transcript, 0
    for k in range(fed.n_clients):
        Xk, blocks, request = fed.blocks[k].X.toarray(), client_blocks(transcript, k), None
        for direction, _, client, message in transcript:
            if client != k:
                continue
            if direction == "down" and isinstance(message, msg.WeightsAndRequest):
                request = message
            if direction == "up" and isinstance(message, msg.InnerProductParts):
                got = blocks.read(request.requested, read_as_plaintext(message.parts))
                np.testing.assert_allclose(got, Xk[request.requested] @ request.w, atol=1e-6)
                checked += 1
    assert checked > 200
