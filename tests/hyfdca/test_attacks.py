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


def _transcript(cancer, crypto):
    """A 2x2 hybrid run (12 samples x 15 features per client) with every exchange kept."""
    X, y = cancer
    fed = P.hybrid_grid(X[:N], y[:N], 2, 2)
    # squared loss: every dual keeps moving, so the pairs (a_k, v_k) span R^|I_k|
    settings = HyFDCASettings.from_variant("paper", loss="squared", lam=LAM, H=3)
    options = dict(n_length=512, insecure=True) if "paillier" in crypto else {}
    run, _ = run_hyfdca(fed, settings, max_rounds=30, eval_every=1, crypto=crypto,
                        crypto_options=options, record=True, seed=4)
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


@pytest.fixture(scope="module", params=sorted(set(BACKENDS) - {"plain"}))  # every backend
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


def _z_above_chance(fed, transcript, decoys, attack):
    """How many standard deviations the attack's total correlation with the data lies above
    its chance level: the same attack with every ciphertext read from a decoy run (the same
    protocol, seed and crypto backend on other rows of the data set), whose reads cannot
    know this data. The plaintext v_k and w still mix the data's rows, so chance is well
    above 0."""
    chance = [_total_correlation(fed, transcript, attack, _decoy_reader(transcript, decoy))
              for decoy in decoys]
    real = _total_correlation(fed, transcript, attack)
    return (real - np.mean(chance)) / np.std(chance, ddof=1)


# Encrypted runs with fresh keys (20 mask, 8 Paillier, 8 fast-Paillier; both attacks):
# z between -2.5 and 3.1, standard deviation about 1; a plaintext transcript gives z >= 10.
# The threshold leaves room for the t tail of a standard deviation from DECOYS runs.
Z_THRESHOLD = 6.0


@pytest.mark.parametrize("attack", ["dual", "margin"])
def test_an_encrypted_run_gives_nothing_better_than_chance(encrypted_run, attack):
    fed, transcript, decoys = encrypted_run
    for k in range(4):
        estimate = _attacks(fed, transcript, k)[attack]
        corr = reconstruction_quality(estimate, fed.blocks[k].X.toarray())[1]
        assert corr < 0.9, f"{attack} attack on client {k}: correlation {corr:.3f}"
    z = _z_above_chance(fed, transcript, decoys, attack)
    assert z <= Z_THRESHOLD, (f"{attack} attack: correlation {z:.1f} standard deviations "
                              f"above chance")


@pytest.mark.parametrize("attack", ["dual", "margin"])
def test_the_chance_test_sees_a_plaintext_transcript(plain_run, attack):
    """The test above can fail: on a plaintext run the same statistic is far above chance."""
    assert _z_above_chance(*plain_run, attack) > Z_THRESHOLD


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
