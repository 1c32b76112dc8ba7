"""The reconstruction attacks of design section 2 on what the server saw: they recover the
clients' data from a plaintext run and nothing better than chance from an encrypted one."""

import numpy as np
import pytest

from hyfdca import partition as P
from hyfdca._protocol import run_hyfdca
from hyfdca._settings import HyFDCASettings
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
    return fed, run.channel.transcript


@pytest.fixture(scope="module")
def plain_run(cancer):
    return _transcript(cancer, "plain")


@pytest.fixture(scope="module", params=["paillier", "fast-paillier", "mask"])
def encrypted_run(cancer, request):
    return _transcript(cancer, request.param)


def _attacks(fed, transcript, k, read=read_as_plaintext):
    n_local = fed.blocks[k].X.shape[0]
    return {"dual": dual_attack(transcript, k, n_local, LAM * N, read),
            "margin": margin_attack(transcript, k, n_local, read)}


@pytest.mark.parametrize("k", range(4))
def test_a_plaintext_run_gives_the_data_away(plain_run, k):
    fed, transcript = plain_run
    truth = fed.blocks[k].X.toarray()
    for name, estimate in _attacks(fed, transcript, k).items():
        error, corr = reconstruction_quality(estimate, truth)
        assert error <= 1e-6, f"{name} attack: max error {error:.2e}"
        assert corr > 1 - 1e-9


def _chance(fed, transcript, k, attack, draws, seed):
    """|corr| of the attack when every ciphertext is read as independent random values."""
    rng = np.random.default_rng(seed)
    truth = fed.blocks[k].X.toarray()

    def read(vector):
        return rng.standard_normal(len(vector))

    corrs = []
    for _ in range(draws):
        estimate = _attacks(fed, transcript, k, read)[attack]
        corrs.append(reconstruction_quality(estimate, truth)[1])
    return np.mean(corrs), np.var(corrs)


@pytest.mark.parametrize("attack", ["dual", "margin"])
def test_an_encrypted_run_gives_nothing_better_than_chance(encrypted_run, attack):
    """One-sided z-test over the four clients: the attack's correlation with the data on
    an encrypted transcript against its chance distribution (random reads); a leak gives
    correlation 1 (z in the tens), chance stays under z = 3.1 (p = 0.001)."""
    fed, transcript = encrypted_run
    excess, variance = 0.0, 0.0
    for k in range(4):
        estimate = _attacks(fed, transcript, k)[attack]
        corr = reconstruction_quality(estimate, fed.blocks[k].X.toarray())[1]
        mean, var = _chance(fed, transcript, k, attack, draws=60, seed=k)
        excess, variance = excess + corr - mean, variance + var
        assert corr < 0.9, f"{attack} attack on client {k}: correlation {corr:.3f}"
    z = excess / np.sqrt(variance)
    assert z <= 3.1, f"{attack} attack: correlation {z:.1f} standard deviations above chance"


def test_the_attacks_say_when_the_transcript_is_too_short(cancer):
    X, y = cancer
    fed = P.hybrid_grid(X[:N], y[:N], 2, 2)
    settings = HyFDCASettings.from_variant("paper", loss="squared", lam=LAM, H=3)
    run, _ = run_hyfdca(fed, settings, max_rounds=2, eval_every=10, record=True)
    with pytest.raises(ValueError, match="needs at least"):
        dual_attack(run.channel.transcript, 0, 12, LAM * N)
    run, _ = run_hyfdca(fed, settings, max_rounds=2, eval_every=10)  # not recorded
    with pytest.raises(ValueError, match="no inner-product exchange"):
        margin_attack(run.channel.transcript, 0, 12)
