"""The packed layout (hyfdca._packing): blocks of samples with one holder set, whole
ciphertexts in every server operation, and the same iterates as one value per ciphertext."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import deal_keys
from feddata import partition as P
from hyfdca import HyFDCARun, HyFDCASettings
from hyfdca._packing import BlockLayout, ClientBlocks
from hyfdca._encoding_range import packing_options
from hyfdca._round import STEP_BITS
from hyfdca._transport import FaultyTransport

SMALL = dict(n_length=512, insecure=True, slots=3)  # test keys only: 3 slots


@st.composite
def holdings(draw):
    """Random sample sets of 1-5 clients over 1-40 samples (each sample held by one at
    least), and a slot count."""
    n = draw(st.integers(1, 40))
    k = draw(st.integers(1, 5))
    held = np.array(draw(st.lists(st.lists(st.booleans(), min_size=k, max_size=k),
                                  min_size=n, max_size=n)))
    held[~held.any(axis=1), 0] = True
    return [np.flatnonzero(held[:, c]) for c in range(k)], n, draw(st.integers(1, 7))


@settings(max_examples=200, deadline=None)
@given(holdings())
def test_blocks_hold_samples_of_one_holder_set_and_cover_each_client_exactly(case):
    sample_ids, n, slots = case
    layout = BlockLayout(sample_ids, n, slots)
    holders = [frozenset(k for k, I in enumerate(sample_ids) if i in I) for i in range(n)]
    block, slot = layout.block_of, layout.slot_of
    assert len(set(zip(block, slot))) == n and slot.max() < slots  # one place each
    assert set(block) == set(range(layout.n_blocks))
    for b in range(layout.n_blocks):
        members = np.flatnonzero(block == b)
        assert len({holders[i] for i in members}) == 1  # one holder set per block
        assert np.array_equal(slot[members], np.arange(members.size))  # ascending ids
    firsts = [np.flatnonzero(block == b)[0] for b in range(layout.n_blocks)]
    assert firsts == sorted(firsts)  # numbered by their first sample
    for k, I in enumerate(sample_ids):
        blocks = layout.client_blocks[k]
        inside = np.flatnonzero(np.isin(block, blocks))
        assert np.array_equal(inside, I)  # whole blocks, nothing else
        members = layout.members[k]
        filled = members >= 0
        assert np.array_equal(np.sort(members[filled]), np.arange(I.size))
        rows, cols = np.nonzero(filled)  # member (j, s): I_k[p] sits in block j, slot s
        np.testing.assert_array_equal(block[I[members[rows, cols]]], blocks[rows])
        np.testing.assert_array_equal(slot[I[members[rows, cols]]], cols)
    if slots == 1:
        assert np.array_equal(block, np.arange(n))


def test_a_client_packs_and_reads_its_blocks():
    members = np.array([[0, 2, 5], [1, 3, -1], [4, -1, -1]])
    blocks = ClientBlocks(members)
    base = np.arange(6) * 10.0
    flat = blocks.pack(np.array([3, 0]), np.array([-3.0, -0.5]), base)
    # blocks 0 and 1 hold positions 0 and 3: requested values there, base elsewhere
    np.testing.assert_array_equal(flat, [-0.5, 20.0, 50.0, 10.0, -3.0, 0.0])
    np.testing.assert_array_equal(blocks.read(np.array([3, 0, 3]), flat), [-3.0, -0.5, -3.0])
    np.testing.assert_array_equal(blocks.pack(np.array([4]), np.array([7.0])), [7.0, 0, 0])


def _overlapping(cancer):
    """Six clients whose sample sets overlap in many holder sets (groups of 1-60)."""
    X, y = cancer
    X, y = X[:150], y[:150]
    return P.from_blocks(X, y, [(range(0, 90), range(0, 12)), (range(60, 150), range(0, 12)),
                                (range(0, 150, 2), range(12, 20)),
                                (range(1, 150, 2), range(12, 20)),
                                (range(30, 120), range(20, 30)),
                                (list(range(0, 30)) + list(range(120, 150)), range(20, 30))])


def _run(fed, crypto, settings_, rounds, transport=None, **options):
    run = HyFDCARun(fed, settings_, crypto=crypto, crypto_options=options, seed=5,
                    transport=transport)
    records = []
    for _ in range(rounds):
        records.append(run.step())
        assert_stored_parts_are_what_each_client_sent(run)
    return run, records, run.certificate()


def assert_stored_parts_are_what_each_client_sent(run):
    """The server's stored Enc(x_i^k . w) of client k hold, slot by slot, the parts k
    records as sent (what it fills the rest of a block with)."""
    for k, client in enumerate(run.clients):
        if client._blocks is None:  # away after a restart, before its rejoin
            continue
        everything = np.arange(client.n_local)
        stored = client.keys.decrypt(run.server.parts[k])
        sent = client._blocks.pack(everything, client._sent_parts[everything])
        np.testing.assert_array_equal(stored, client.keys.codec.decode(
            client.keys.codec.encode(sent)))  # as encrypted: at 2^-f


def test_bfv_runs_give_the_plaintext_bits(cancer):
    """BFV (8,192 slots: each holder set is one block here) against the plaintext backend
    at fraction 0.5: the same alpha, w and certificate, bit for bit."""
    fed = _overlapping(cancer)
    s = HyFDCASettings.from_variant("auto", lam=0.01, participation="fraction", fraction=0.5)
    (plain, _, plain_cert), (bfv, _, bfv_cert) = (_run(fed, crypto, s, 8)
                                                   for crypto in ("plain", "bfv"))
    assert bfv.server.blocks.n_blocks == len({tuple(k for k, I in enumerate(
        fed.layout().sample_ids) if i in I) for i in range(150)})  # one per holder set
    assert bfv.server.w.tobytes() == plain.server.w.tobytes()
    for a, b in zip(bfv.clients, plain.clients):
        assert a.alpha.tobytes() == b.alpha.tobytes()
    assert bfv_cert[:2] == plain_cert[:2]


@pytest.mark.parametrize("participation", [dict(participation="full"),
                                           dict(participation="fraction", fraction=0.5)])
def test_packed_runs_give_the_bits_of_one_value_per_ciphertext(cancer, participation):
    """fast-paillier with 3 values per ciphertext against the plaintext backend on six
    overlapping clients (absent holders' stored parts in play at fraction 0.5): the same
    alpha, w, steps and certificate, bit for bit, with fewer ciphertext operations than
    fast-paillier with one value each."""
    fed = _overlapping(cancer)
    s = HyFDCASettings.from_variant("auto", lam=0.01, **participation)
    plain, plain_records, plain_cert = _run(fed, "plain", s, 12)
    packed, packed_records, packed_cert = _run(fed, "fast-paillier", s, 12, **SMALL)
    single, single_records, _ = _run(fed, "fast-paillier", s, 12, **{**SMALL, "slots": 1})
    assert packed.server.evaluator.slots == 3 and packed.server.blocks.n_blocks < 150
    assert packed.server.w.tobytes() == plain.server.w.tobytes()
    for a, b in zip(packed.clients, plain.clients):
        assert a.alpha.tobytes() == b.alpha.tobytes()
    assert [r["step"] for r in packed_records] == [r["step"] for r in plain_records]
    assert packed_cert[:2] == plain_cert[:2]
    assert single.server.w.tobytes() == plain.server.w.tobytes()
    for op in ("encrypt", "decrypt", "add"):
        assert sum(r[op] for r in packed_records) < sum(r[op] for r in single_records)
    # one value per ciphertext counts what the plaintext backend counts
    for op in ("encrypt", "decrypt", "add", "multiply"):
        assert [r[op] for r in single_records] == [r[op] for r in plain_records]


@pytest.mark.parametrize("participation", [dict(participation="full"),
                                           dict(participation="fraction", fraction=0.5)])
def test_block_draws_move_whole_ciphertexts_with_the_plaintext_bits(cancer, participation):
    """draw_block = the backend's 3 slots: each client's draws are whole blocks of its
    ciphertext layout (the last one cut at H), the packed run gives the plaintext run's
    bits, and it encrypts and decrypts fewer ciphertexts than with sample-by-sample
    draws."""
    fed = _overlapping(cancer)
    # no phase E (which "auto" would run here, mu > 3 lam at f = 0.5): it encrypts every
    # part of a present client whatever the draws, which is not what this test measures
    s = HyFDCASettings.from_variant("auto", lam=0.01, iic=0.2, second_inner_product=False,
                                    **participation)
    blocked = HyFDCASettings.from_variant("auto", lam=0.01, iic=0.2, draw_block=3,
                                          second_inner_product=False, **participation)
    plain, plain_records, plain_cert = _run(fed, "plain", blocked, 10)
    packed, packed_records, packed_cert = _run(fed, "fast-paillier", blocked, 10, **SMALL)
    _, sample_records, _ = _run(fed, "fast-paillier", s, 10, **SMALL)
    for client in packed.clients:  # the last round's draws
        _whole_blocks(client.drawn, client._blocks.members)
    assert packed.server.w.tobytes() == plain.server.w.tobytes()
    for a, b in zip(packed.clients, plain.clients):
        assert a.alpha.tobytes() == b.alpha.tobytes()
    assert [r["step"] for r in packed_records] == [r["step"] for r in plain_records]
    assert packed_cert[:2] == plain_cert[:2]
    for op in ("encrypt", "decrypt"):
        assert (sum(r[op] for r in packed_records)
                < 0.7 * sum(r[op] for r in sample_records))


def test_the_dual_box_packs_more_values_per_ciphertext(cancer):
    """By default a hinge run declares its dual updates below 2^(f + 1) and its slots are
    sized for that (packing_options): 6 slots at 512 bits instead of the codec range's 3,
    the plaintext run's bits at fraction 0.5, and Enc(alpha)'s tracked bound within the
    stated 2^(f + 1) m R K (K the clients taking part, m the largest step). The squared
    loss (no dual box) gets slots for the codec's range: 4. Keys sized for the hinge are
    refused at set-up for a squared-loss run."""
    fed = _overlapping(cancer)
    s = HyFDCASettings.from_variant("auto", lam=0.01, participation="fraction", fraction=0.5)
    rounds = 12
    plain, plain_records, plain_cert = _run(fed, "plain", s, rounds)
    packed, packed_records, packed_cert = _run(fed, "fast-paillier", s, rounds,
                                               n_length=512, insecure=True)
    assert packed.server.evaluator.slots == 6
    assert packed.server.w.tobytes() == plain.server.w.tobytes()
    for a, b in zip(packed.clients, plain.clients):
        assert a.alpha.tobytes() == b.alpha.tobytes()
    assert packed_cert[:2] == plain_cert[:2]
    largest_step = max(round(r["step"] * 2 ** STEP_BITS) for r in packed_records)
    taking_part = sum(r["available"] for r in packed_records)
    assert 0 < packed.server.enc_alpha.bound <= 2 ** 33 * largest_step * taking_part
    squared = HyFDCASettings.from_variant("auto", loss="squared", lam=0.01)
    run = HyFDCARun(fed, squared, crypto="fast-paillier",
                    crypto_options=dict(n_length=512, insecure=True))
    assert run.server.evaluator.slots == 4
    hinge_keys = deal_keys("fast-paillier", n_length=512, insecure=True,
                           **packing_options("fast-paillier", s, 32))
    with pytest.raises(ValueError, match="squared run .* needs 2"):
        HyFDCARun(fed, squared, crypto="fast-paillier", dealt=hinge_keys)


def _whole_blocks(drawn, members):
    """The blocks (rows of ``members``, -1: empty slot) holding ``drawn``; fails unless
    each of them but one is drawn whole and no position is drawn twice."""
    assert np.unique(drawn).size == drawn.size
    blocks = [j for j, row in enumerate(members) if np.isin(row[row >= 0], drawn).any()]
    partial = [j for j in blocks if not np.isin(members[j][members[j] >= 0], drawn).all()]
    assert len(partial) <= 1, (drawn, partial)
    return blocks


def test_a_packed_client_that_restarts_rejoins_with_the_plaintext_bits(cancer):
    """A restart under packing: the rejoined client's stored parts restart from 0 on both
    sides, so the run keeps giving the plaintext run's bits."""
    fed = _overlapping(cancer)
    s = HyFDCASettings.from_variant("auto", lam=0.01, participation="fraction",
                                    fraction=0.5)
    probe = HyFDCARun(fed, s, seed=5)  # a client drawn in round 4 and once before
    drawn = [set(probe.participation.available(t)) for t in range(5)]
    k = min(drawn[4] & set().union(*drawn[:4]))

    def faulty(clients, evaluator, record):
        return FaultyTransport(clients, evaluator, record,
                               script=[(4, "secure inner product", k, "restart")])

    runs = [_run(fed, crypto, s, 20, transport=faulty, **options)
            for crypto, options in (("plain", {}), ("fast-paillier", SMALL))]
    (plain, _, plain_cert), (packed, _, packed_cert) = runs
    assert [r["client"] for r in packed.rejoin_costs] == [k]
    assert packed.server.w.tobytes() == plain.server.w.tobytes()
    assert packed_cert[:2] == plain_cert[:2]


def test_a_client_refuses_blocks_that_do_not_fit_its_keys(cancer):
    from hyfdca import _messages as msg

    fed = _overlapping(cancer)
    run = HyFDCARun(fed, HyFDCASettings.from_variant("auto", lam=0.01), crypto="plain")
    client = run.clients[0]
    members = np.arange(client.n_local).reshape(-1, 1)
    bad = msg.SetupRequest(np.ones(client.n_local, dtype=np.int64), 6,
                           np.concatenate([members, members], axis=1))
    with pytest.raises(ValueError, match="key or layout mismatch"):
        client.handle(bad)


def test_a_client_refuses_draw_units_that_do_not_fit_its_settings(cancer):
    """Units of the wrong width, that hold a position twice or that leave their first slot
    empty are a layout mismatch."""
    from hyfdca import _messages as msg

    fed = _overlapping(cancer)
    run = HyFDCARun(fed, HyFDCASettings.from_variant("auto", lam=0.01, draw_block=2))
    client = run.clients[0]
    members = np.arange(client.n_local).reshape(-1, 1)
    holes = np.full((client.n_local, 2), -1)
    holes[:, 1] = np.arange(client.n_local)
    for units in (members, np.concatenate([members, members], axis=1), holes):
        bad = msg.SetupRequest(np.ones(client.n_local, dtype=np.int64), 6, members, units)
        with pytest.raises(ValueError, match="draw units .*layout mismatch"):
            client.handle(bad)


@pytest.mark.parametrize("draw_block", [0, 2.0, True])
def test_settings_refuse_a_draw_block_that_is_not_a_positive_integer(draw_block):
    with pytest.raises(ValueError, match="draw_block must be an integer >= 1"):
        HyFDCASettings.from_variant("auto", draw_block=draw_block)
