"""The set-up's holding check (hyfdca._holdings): a server that sees only the parties' ids
still refuses blocks whose holders disagree on a label or that hold an entry twice, and a
party that rejoins with other data, from keyed tags that show it neither labels nor
entries."""

from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from feddata import partition as P
from feddata.federated import ClientBlock, FederatedDataset
from hyfdca import HyFDCARun, HyFDCASettings
from hyfdca._holdings import HoldingsError


def unchecked(blocks, n_samples, n_features):
    """Blocks as a deployed server meets them: no FederatedDataset validation (each party
    reads its own file), only the public layout they report."""
    fed = FederatedDataset.__new__(FederatedDataset)
    fed.blocks, fed.n_samples, fed.n_features = list(blocks), n_samples, n_features
    return fed


def start(fed, **options):
    settings = HyFDCASettings.from_variant("auto", lam=0.05, participation="fraction",
                                           fraction=0.5)
    return HyFDCARun(fed, settings, seed=1, **options)


def test_holders_that_disagree_on_a_label_are_refused_by_name(cancer):
    X, y = cancer
    fed = P.hybrid_grid(X[:120], y[:120], 2, 2)
    start(fed)   # the honest blocks set up
    blocks = list(fed.blocks)
    flip = blocks[1]
    y1 = flip.y.copy()
    y1[[3, 7]] *= -1
    blocks[1] = ClientBlock(flip.sample_ids, flip.feature_ids, flip.X, y1)
    wrong = sorted(flip.sample_ids[[3, 7]].tolist())
    with pytest.raises(HoldingsError, match=rf"holders disagree on the label of samples "
                                            rf"\[{wrong[0]}, {wrong[1]}\]$"):
        start(unchecked(blocks, fed.n_samples, fed.n_features))


def overlapping(X, y):
    """Two clients over every sample: features 0-19 and 10-29, the overlap 10-19 with
    client 0 (from_blocks: the lowest id keeps an entry)."""
    n = X.shape[0]
    return P.from_blocks(X, y, [(np.arange(n), np.arange(20)), (np.arange(n), np.arange(10, 30))])


def test_an_entry_held_twice_is_refused_naming_the_clients(cancer):
    X, y = cancer
    X, y = X[:80], y[:80]
    fed = overlapping(X, y)
    start(fed)   # overlapping rectangles, each entry held once: no refusal
    one = fed.blocks[1]
    assert one.X[:, :10].nnz == 0   # the overlap's entries are client 0's
    doubled = one.X.tolil()
    doubled[5, 2] = X[5, 12]        # client 1 stores an entry of client 0's too
    doubled[9, 0] = X[9, 10]
    blocks = [fed.blocks[0], ClientBlock(one.sample_ids, one.feature_ids, doubled.tocsr(),
                                         one.y)]
    with pytest.raises(HoldingsError, match=r"2 entries \(sample, feature\) are held more "
                                            r"than once \(clients 0, 1: 2\)"):
        start(unchecked(blocks, fed.n_samples, fed.n_features))
    # a stored 0 holds nothing (a LIBSVM party file may write j:0): not refused
    stored = sp.csr_matrix((np.append(one.X.data, 0.0), np.append(one.X.indices, 2),
                            one.X.indptr + (np.arange(one.X.shape[0] + 1) > 5)),
                           shape=one.X.shape)
    assert stored.nnz == one.X.nnz + 1 and stored[5, 2] == 0
    start(unchecked([fed.blocks[0], ClientBlock(one.sample_ids, one.feature_ids, stored,
                                                one.y)], fed.n_samples, fed.n_features))
    # an entry of three holders is one entry, named with its three holders
    third = ClientBlock(np.array([5]), np.array([12]), sp.csr_matrix([[X[5, 12]]]), y[[5]])
    with pytest.raises(HoldingsError, match=r"2 entries \(sample, feature\) are held more "
                                            r"than once \(clients 0, 1: 1; clients 0, 1, 2: 1\)"):
        start(unchecked([*blocks, third], fed.n_samples, fed.n_features))


def test_the_server_receives_tags_that_show_no_label_and_no_entry(cancer):
    """The recorded set-up replies: a label tag per shared sample, all distinct (equal
    labels of different samples give different tags), none equal to a label's or an id's
    bits; the entry tags sorted, as many as the stored entries of the overlap region."""
    X, y = cancer
    fed = overlapping(X[:80], y[:80])
    run = start(fed, record=True)
    replies = [r for phase, k, r in run.transport.server_inbox
               if phase == "set-up: shared row norms"]
    assert len(replies) == 2
    for reply, block in zip(replies, fed.blocks):
        tags = reply.label_tags
        assert tags.size == reply.positions.size == 80
        assert np.unique(tags).size == tags.size
        plain = np.concatenate([block.y.view(np.uint64), block.sample_ids.astype(np.uint64)])
        assert not np.isin(tags, plain).any()
        entries = reply.entry_tags
        assert entries.shape == (fed.blocks[0].X[:, 10:].nnz if block is fed.blocks[0]
                                 else 0, 2)
        assert np.all(np.diff(entries[:, 0].astype(np.float64)) >= 0)


def test_a_party_that_rejoins_with_other_data_is_refused(cancer):
    X, y = cancer
    run = start(P.hybrid_grid(X[:120], y[:120], 2, 2))
    run.step()
    run.clients[1] = run.clients[1].restarted()
    assert run.rejoin(1)   # the same data: it rejoins
    other = run.clients[1].restarted()
    other.y = other.y.copy()
    other.y[0] *= -1
    run.clients[1] = other
    with pytest.raises(HoldingsError, match=r"client 1 rejoins with another block"):
        run.rejoin(1)


def test_a_party_that_rejoins_with_other_values_is_refused_on_a_horizontal_split(cancer):
    """No sample is shared and no rectangle overlaps: the block's own tag is what
    changes."""
    X, y = cancer
    run = start(P.horizontal(X[:120], y[:120], 3))
    run.step()
    other = run.clients[2].restarted()
    other.X = other.X * 7.0
    run.clients[2] = other
    with pytest.raises(HoldingsError, match=r"client 2 rejoins with another block"):
        run.rejoin(2)


def test_the_tags_of_two_runs_under_the_same_keys_cannot_be_compared(cancer):
    """Each run keys its holding tags with its own nonce: the same labels give other
    tags in the next run, so a series of runs (one-vs-rest) shows the server nothing."""
    from crypto import DealtKeys

    X, y = cancer
    fed = P.hybrid_grid(X[:60], y[:60], 2, 2)
    first = start(fed, record=True)
    keys = DealtKeys(first.clients[0].keys, first.server.evaluator, first.clients[0].masker)
    second = start(fed, record=True, dealt=keys)
    tags = [[r.label_tags for phase, k, r in run.transport.server_inbox
             if phase == "set-up: shared row norms"] for run in (first, second)]
    for a, b in zip(*tags):
        assert a.size == b.size > 0 and not np.isin(a, b).any()


@pytest.mark.parametrize("make", [
    lambda X, y: P.hybrid_grid(X, y, 3, 2),
    lambda X, y: P.horizontal(X, y, 4),
    lambda X, y: P.vertical(X, y, 3),
    lambda X, y: P.dealt_features(X, y, 2, 3, seed=4),
    lambda X, y: P.from_blocks(X, y, [(np.arange(0, 60), np.arange(0, 20)),
                                      (np.arange(30, 90), np.arange(10, 30)),
                                      (np.arange(0, 90), np.arange(25, 30)),
                                      (np.arange(50, 90), np.arange(0, 12)),
                                      (np.arange(0, 30), np.arange(18, 26))]),
], ids=["grid", "horizontal", "vertical", "dealt", "explicit"])
def test_the_overlap_regions_hold_every_place_an_entry_could_be_held_twice(make):
    """Layout.overlaps, against a brute force over client pairs: every (i, j) in two
    rectangles lies in each one's overlap rows x columns; grids, horizontal and vertical
    splits have none."""
    rng = np.random.default_rng(3)
    X = sp.random(90, 30, density=0.4, random_state=5, format="csr")
    y = np.where(rng.random(90) < 0.5, -1.0, 1.0)
    fed = make(X, y)
    layout = fed.layout()
    regions = layout.overlaps()
    for k in range(fed.n_clients):
        I, J = layout.sample_ids[k], layout.feature_ids[k]
        need = np.zeros((I.size, J.size), dtype=bool)
        for l in range(fed.n_clients):
            if l != k:
                need |= np.isin(I, layout.sample_ids[l])[:, None] & \
                    np.isin(J, layout.feature_ids[l])[None, :]
        rows, columns = regions[k]
        given = np.zeros_like(need)
        given[np.ix_(rows, columns)] = True
        assert not (need & ~given).any()
        if not need.any():
            assert rows.size == columns.size == 0 or not given.any()


def test_tags_are_a_keyed_permutation():
    from crypto import SecureSum

    words = np.array([[0, 1], [1, 0], [0, 1], [2**62, -5]], dtype=np.int64)
    first = SecureSum(b"k" * 32).tags("labels", words)
    assert first.dtype == np.uint64 and first.shape == (4, 2)
    assert np.array_equal(first[0], first[2]) and not np.array_equal(first[0], first[1])
    assert not np.array_equal(first, SecureSum(b"j" * 32).tags("labels", words))
    assert not np.array_equal(first, SecureSum(b"k" * 32).tags("entries", words))
    with pytest.raises(ValueError, match=r"tags take \(n, 2\) 64-bit integers"):
        SecureSum(b"k" * 32).tags("labels", words.astype(np.float64))


@pytest.mark.parametrize("costs, budget", [([4.0, 4.0], 4), ([3.0, 5.0], 4), ([1.0] * 5, 2),
                                           ([5.0, 5.0], 2), ([1.0], 100), ([2.0] * 3, 6)])
def test_the_overlap_pairs_are_checked_in_chunks_that_cover_every_pair(costs, budget):
    """Layout.overlaps checks candidate pairs in chunks of bounded cost: every pair in
    exactly one chunk (a total that is a multiple of the budget lost the last pair)."""
    from feddata.federated import _chunks

    chunks = _chunks(np.array(costs), budget)
    covered = np.concatenate([np.arange(len(costs))[c] for c in chunks])
    np.testing.assert_array_equal(covered, np.arange(len(costs)))


@pytest.mark.parametrize("make", [lambda X, y: P.vertical(X, y, 2),
                                  lambda X, y: P.hybrid_grid(X, y, 2, 2),
                                  lambda X, y: P.horizontal(X, y, 3)],
                         ids=["vertical", "grid", "horizontal"])
def test_a_prediction_split_like_the_training_data_asks_for_no_entry_tags(cancer, make):
    """Where no two holders of a new sample share a feature, no entry can be held twice:
    the server asks for no entry tags (a count of them would tell it each new block's
    non-zeros), and the prediction takes one round trip."""
    from feddata.partition import split_like

    X, y = cancer
    fed = make(X[:100], y[:100])
    new = split_like(fed, X[100:140], y[100:140], seed=1)
    run = start(fed, record=True)
    run.model = np.ones(X.shape[1])
    labels, margins = run.predict(new.n_samples, blocks=new.blocks)
    np.testing.assert_allclose(margins, X[100:140] @ run.model, atol=1e-6)
    phases = {phase for phase, k, r in run.transport.server_inbox}
    assert "prediction" in phases and "prediction: entry tags" not in phases
    assert run.prediction_traffic.rtc == 1


def test_a_prediction_on_a_dealt_split_checks_the_shared_features_entries(cancer):
    """Holders of one new sample that share features (a dealt partition): the server
    asks them for entry tags in one more round trip and finds no entry twice."""
    from feddata.partition import split_like

    X, y = cancer
    fed = P.dealt_features(X[:100], y[:100], 2, 3, seed=2)
    new = split_like(fed, X[100:140], y[100:140], seed=1)
    run = start(fed, record=True)
    run.model = np.ones(X.shape[1])
    labels, margins = run.predict(new.n_samples, blocks=new.blocks)
    np.testing.assert_allclose(margins, X[100:140] @ run.model, atol=1e-6)
    asked = [r for phase, k, r in run.transport.server_inbox
             if phase == "prediction: entry tags"]
    assert asked and sum(r.tags.shape[0] for r in asked) > 0
    assert run.prediction_traffic.rtc == 2


def test_a_resume_whose_parties_hold_other_data_is_refused(cancer, tmp_path):
    """HyFDCARun.from_checkpoint (the path below run_hyfdca's data digest): every party
    restarts, so each must hold the block it set up with, as at a rejoin."""
    from hyfdca import run_hyfdca
    from hyfdca._checkpoint import CheckpointError

    X, y = cancer
    fed = P.horizontal(X[:120], y[:120], 3)
    settings = HyFDCASettings.from_variant("auto", lam=0.05, participation="fraction",
                                           fraction=0.5)
    run_hyfdca(fed, settings, max_rounds=2, crypto="mask", checkpoint=tmp_path,
               checkpoint_every=2)
    folder = tmp_path / "round-000002"
    HyFDCARun.from_checkpoint(folder, fed, settings, crypto="mask")   # the same data
    b = fed.blocks[2]
    other = FederatedDataset([*fed.blocks[:2], ClientBlock(b.sample_ids, b.feature_ids,
                                                           b.X * 7.0, b.y)],
                             fed.n_samples, fed.n_features)
    with pytest.raises(CheckpointError, match=r"clients \[2\] hold other data than the "
                                              r"saved run's"):
        HyFDCARun.from_checkpoint(folder, other, settings, crypto="mask")
