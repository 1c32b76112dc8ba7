"""The encryption cost profiler: operation costs, the measured round breakdown, the CLI."""

import json

import numpy as np
import pytest

from feddata import partition as P
from hyfdca import profile
from hyfdca import HyFDCARun
from hyfdca import HyFDCASettings
from hyfdca.cli import main

INSECURE = dict(n_length=512, insecure=True)


@pytest.fixture(scope="module")
def fed(cancer):
    X, y = cancer
    return P.hybrid_grid(X[:60], y[:60], 2, 2)


def test_operation_costs_cover_every_operation():
    costs = profile.measure_operations("paillier", key_bits=512, n_values=8, repeats=1)
    assert [c.operation for c in costs] == list(profile.OPERATIONS)
    for c in costs:
        assert c.seconds > 0 and c.per_value == pytest.approx(c.seconds / 8)
        assert c.bytes_per_value == 128  # a ciphertext mod n^2 of a 512-bit n
    assert "| paillier | 512 | encrypt | 8 |" in profile.operations_table(costs)


def test_backend_options_give_key_sizes_only_where_there_are_keys():
    assert profile.backend_options("plain", 2048) == {}
    assert profile.backend_options("paillier", 3072) == {"n_length": 3072}
    assert profile.backend_options("paillier", 512) == INSECURE


def test_the_timer_charges_clients_and_server(fed):
    settings = HyFDCASettings.from_variant("auto", lam=0.05, H=5)
    run = HyFDCARun(fed, settings, crypto="paillier", crypto_options=INSECURE)
    timer = profile._CryptoTimer(run)
    run.step()
    client_seconds = timer.client_seconds.copy()
    slowest, server, everyone, _ = timer.take()
    assert np.all(client_seconds > 0) and server > 0   # every client encrypts; server adds
    assert slowest == client_seconds.max()
    assert everyone == client_seconds.sum() + server
    assert timer.take()[:3] == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("crypto, fraction, rounds", [
    ("plain", 0.5, 3), ("paillier", 0.5, 3),
    ("mask", 0.75, 60)])   # long enough for the mask backend's refreshes
def test_the_timer_counts_each_partys_operations_and_they_add_up_to_the_round(fed, crypto,
                                                                            fraction, rounds):
    settings = HyFDCASettings.from_variant("auto", lam=0.05, H=5, participation="fraction",
                                           fraction=fraction)
    run = HyFDCARun(fed, settings, crypto=crypto,
                    crypto_options=INSECURE if crypto == "paillier" else None, seed=1)
    timer = profile._CryptoTimer(run)
    for _ in range(rounds):
        record = run.step()
        operations = timer.take()[3]
        assert operations.sum(axis=0).tolist() == [record[op] for op in profile.OPERATIONS]
        assert operations[:-1, 2:].sum() == 0       # clients never add or multiply
        assert operations[-1, :2].sum() == 0        # the server never encrypts or decrypts
        assert operations[:-1, 0].max() > 0 and operations[-1, 2] > 0


def test_charged_seconds_are_the_slowest_client_plus_the_server():
    operations = np.array([[10, 5, 0, 0], [2, 30, 0, 0], [0, 0, 100, 7]])
    costs = dict(encrypt=1.0, decrypt=0.5, add=0.01, multiply=0.1)
    # client 0: 12.5, client 1: 17.0; server: 1.0 + 0.7
    assert profile.charged_seconds(operations, costs) == pytest.approx(17.0 + 1.7)


def test_a_plaintext_runs_counts_charge_what_paillier_costs(fed):
    """A plaintext run's operations per party are a paillier run's (the same protocol,
    one value per ciphertext), so the charge of paillier's costs is the same from
    either (benchmarks/encrypted_rounds.py compares it with the measured seconds)."""
    settings = HyFDCASettings.from_variant("auto", lam=0.05, H=5)
    costs = {c.operation: c.per_value
             for c in profile.measure_operations("paillier", key_bits=512, n_values=40)}
    plain = profile.round_breakdown(fed, settings, crypto="plain", rounds=2)
    paillier = profile.round_breakdown(fed, settings, crypto="paillier", rounds=2,
                                       crypto_options=INSECURE)
    assert len(plain["operations"]) == 2
    charged = profile.charged_encryption(plain, costs)
    assert charged == profile.charged_encryption(paillier, costs) > 0   # the same counts


def test_round_breakdown_splits_time_by_latency(fed):
    # (no phase E, which "auto" would run on these 60 rows: mu > 3 lam at f = 0.5)
    settings = HyFDCASettings.from_variant("auto", lam=0.05, H=5, participation="fraction",
                                           fraction=0.5, second_inner_product=False)
    plain = profile.round_breakdown(fed, settings, crypto="plain", rounds=2)
    paillier = profile.round_breakdown(fed, settings, crypto="paillier",
                                       crypto_options=INSECURE, rounds=2)
    # how much slower paillier's encryption is (30-40x here) is a speed figure, printed by
    # `hyfdca profile` ("paillier's encryption / this"), not checked here: a wall-clock
    # ratio of ~0.1 ms sides failed CI on a loaded machine (8.2 ms against 5.1 ms)
    assert paillier["encryption"] > 0
    assert plain["rtc"] == 4.0  # hybrid, partial participation
    assert paillier["encryption"] <= paillier["encryption_all"] <= paillier["wall"]
    assert paillier["bytes"] > plain["bytes"] > 0
    for row, latency in zip(paillier["rows"], profile.LATENCIES):
        assert row["communication"] == pytest.approx(latency * paillier["rtc"])


def test_profile_command_writes_tables_and_chart(tmp_path, capsys):
    out = tmp_path / "profile"
    assert main(["profile", "--backends", "plain,paillier", "--key-bits", "512",
                 "--n-values", "6", "--rounds", "1", "--partition", "2x2",
                 "--output", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"operations.md", "round_breakdown.md",
                                               "profile.json", "round_breakdown.png"}
    data = json.loads((out / "profile.json").read_text())
    assert {b["backend"] for b in data["round_breakdown"]} == {"plain", "paillier"}
    assert len(data["operations"]) == 8
    printed = capsys.readouterr().out
    assert "0.2575" in printed and "paillier's encryption / this" in printed
    paillier_row = next(line for line in printed.splitlines()
                        if line.startswith("| paillier | ") and line.endswith("x |"))
    assert paillier_row.endswith("| 1.0x |")  # the reference against itself


def test_profile_command_names_an_unknown_backend(tmp_path):
    with pytest.raises(SystemExit, match="unknown crypto backend"):
        main(["profile", "--backends", "rot13", "--output", str(tmp_path)])


@pytest.mark.parametrize("options, message", [
    (dict(name="rot13"), "unknown crypto backend 'rot13'"),
    (dict(name="mask", n_values=0), "n_values must be a whole number >= 1, got 0"),
    (dict(name="mask", n_values=2.7), "n_values must be a whole number >= 1, got 2.7"),
    (dict(name="mask", repeats=0), "repeats must be a whole number >= 1, got 0"),
    (dict(name="paillier", key_bits=512.5), "key_bits must be a whole number, got 512.5"),
])
def test_measuring_names_a_bad_argument(options, message):
    with pytest.raises(ValueError, match=message):
        profile.measure_operations(**options)


def test_the_measured_key_size_is_the_one_used():
    (cost, *_) = profile.measure_operations("paillier", n_values=1, repeats=1)
    assert cost.key_bits == 2048   # the backend's default, not "-"


def test_round_breakdown_names_a_bad_count(fed):
    settings = HyFDCASettings.from_variant("auto", lam=0.05)
    with pytest.raises(ValueError, match="rounds must be a whole number >= 1, got 0"):
        profile.round_breakdown(fed, settings, rounds=0)
    with pytest.raises(ValueError, match="warmup must be a whole number >= 0, got -1"):
        profile.round_breakdown(fed, settings, rounds=2, warmup=-1)


@pytest.mark.parametrize("arguments, message", [
    (["profile", "--backends", "plain", "--lam", "-1"], "lam must be positive, got -1.0"),
    (["profile", "--backends", "paillier", "--key-bits", "abc"],
     "--key-bits must be comma-separated whole numbers, got 'abc'"),
])
def test_the_profile_command_refuses_bad_values_by_name(tmp_path, capsys, arguments,
                                                        message):
    """Before anything is measured or written."""
    try:
        code = main([*arguments, "--output", str(tmp_path / "out")])
    except SystemExit as stop:
        code = str(stop)
    assert code != 0 and message in str(code) + capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_mask_cost_is_measured_on_enough_values_to_be_per_value():
    """At 20 values a masking operation's per-call overhead made mask 19-37 times
    dearer than its per-value cost: the experiments measure it on cost_values('mask')."""
    assert profile.cost_values("paillier") == 20
    assert profile.cost_values("mask") >= 1000
    with pytest.raises(SystemExit):
        main(["experiment", "--quick", "--backend", "mask", "--cost-values", "0"])


def test_a_packed_backend_is_measured_on_full_ciphertexts():
    """Per-value costs of a packed backend are those of full ciphertexts: the vector is
    rounded up to whole ciphertexts."""
    from crypto import make_backend
    keys, _ = make_backend("fast-paillier", **profile.backend_options("fast-paillier", 512,
                                                                      False))
    assert keys.slots > 1
    costs = profile.measure_operations("fast-paillier", key_bits=512, n_values=keys.slots + 1,
                                       repeats=1)
    assert {c.n_values for c in costs} == {2 * keys.slots}


def test_the_round_costs_table_has_as_many_cells_as_its_separator():
    row = dict(backend="mask", wall=2.0, encryption=0.5, encryption_all=1.0, bytes=3e6)
    for reference in ("paillier", "mask"):     # without and with the reference's column
        header, separator, body = profile.round_costs_table([row], reference).splitlines()
        assert header.count("|") == separator.count("|") == body.count("|")
