"""Federated partitions: exact round trips, the paper's schemes, validation errors."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from feddata import partition as P
from feddata import ClientBlock, FederatedDataset, make_block
from feddata.federated import label_problems


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = sp.random(90, 40, density=0.2, random_state=rng, format="csr")
    X.data = rng.normal(size=X.nnz)
    return X, np.where(rng.random(90) < 0.5, 1.0, -1.0)


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(3)
    X = sp.random(60, 36, density=0.4, random_state=rng, format="csr")  # 6 x 6 images
    return X, rng.integers(0, 10, 60).astype(float)


def assert_round_trip(fd, X, y):
    X2, y2 = fd.reassemble()
    assert X2.shape == X.shape and (X2 != X).nnz == 0
    np.testing.assert_array_equal(y2, y)


BUILDERS = {
    "horizontal": lambda X, y: P.horizontal(X, y, 4),
    "vertical": lambda X, y: P.vertical(X, y, 3),
    "grid": lambda X, y: P.hybrid_grid(X, y, 3, 3),
    "grid-shuffled": lambda X, y: P.hybrid_grid(X, y, 5, 2, shuffle=True, seed=4),
    "dealt": lambda X, y: P.dealt_features(X, y, 3, 4, seed=1),
    "explicit": lambda X, y: P.from_blocks(X, y, [(range(60), range(30)), (range(40, 90),
                                                  range(40)), (range(90), range(25, 40))]),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_round_trip_is_exact(data, name):
    X, y = data
    fd = BUILDERS[name](X, y)
    assert_round_trip(fd, X, y)
    np.testing.assert_allclose(fd.sq_row_norms, np.asarray(X.multiply(X).sum(axis=1)).ravel(),
                               rtol=1e-14)
    for k, block in enumerate(fd.blocks):
        np.testing.assert_array_equal(block.y, y[block.sample_ids])
        for i in block.sample_ids[:5]:
            assert k in fd.holders(i)


def test_grid_shapes_and_holders(data):
    X, y = data
    fd = P.hybrid_grid(X, y, 3, 2)
    assert fd.n_clients == 6
    assert [b.shape for b in fd.blocks[:2]] == [(30, 20), (30, 20)]
    np.testing.assert_array_equal(fd.holder_counts, 2)
    np.testing.assert_array_equal(fd.holders(0), [0, 1])
    np.testing.assert_array_equal(fd.holders(89), [4, 5])
    assert np.array_equal(P.horizontal(X, y, 3).holder_counts, np.ones(90))
    assert np.array_equal(P.vertical(X, y, 3).holder_counts, np.full(90, 3))


def test_dealt_features_share_every_sample_evenly(data):
    X, y = data
    fd = P.dealt_features(X, y, 3, 4, seed=1)
    per_sample = np.zeros((90, 12), dtype=int)
    for k, block in enumerate(fd.blocks):
        per_sample[block.sample_ids, k] = np.diff(block.X.indptr)
    counts = per_sample.reshape(90, 3, 4).sum(axis=1)   # clients of the sample's group
    assert np.all(counts.max(axis=1) - counts.min(axis=1) <= 1)
    np.testing.assert_array_equal(counts.sum(axis=1), np.diff(X.indptr))
    np.testing.assert_array_equal(fd.holder_counts, 4)
    other = P.dealt_features(X, y, 3, 4, seed=2)
    assert any(not np.array_equal(a.feature_ids, b.feature_ids)
               for a, b in zip(fd.blocks, other.blocks))


def test_dealt_features_cover_all_zero_columns():
    X = sp.csr_matrix(np.array([[1.0, 0, 2, 0], [0, 0, 3, 4]]))
    fd = P.dealt_features(X, [1, -1], 1, 2)
    assert_round_trip(fd, X, np.array([1.0, -1]))
    assert 1 in np.concatenate([b.feature_ids for b in fd.blocks])


def test_dealing_to_more_clients_than_a_groups_rows_hold_is_named():
    """One non-zero per row and no all-zero column: the second client of each group would
    hold no feature, and the builder says why (not "client 1 is empty")."""
    X = sp.csr_matrix(np.eye(4))
    with pytest.raises(ValueError, match=r"dealt 2x2: clients \[\d(, \d)*\] would hold "
                                         r"no feature: the rows of sample group \d have "
                                         r"at most 1 non-zeros to deal to 2 clients"):
        P.dealt_features(X, [1, -1, 1, -1], 2, 2)


@pytest.mark.parametrize("n_clients, groups", [(4, [1, 1, 1, 1]), (5, [2, 1, 1, 1]),
                                               (10, [3, 3, 2, 2])])
def test_mnist_quadrants(images, n_clients, groups):
    X, y = images
    fd = P.mnist_quadrants(X, y, n_clients, image_shape=(6, 6))
    X_bias = sp.hstack([X, np.full((60, 1), 10.0)], format="csr")
    assert_round_trip(fd, X_bias, y)
    np.testing.assert_array_equal(fd.holder_counts, 4)
    quadrant_sets = [set(), set(), set(), set()]
    first = 0
    for q, size in enumerate(groups):
        clients = range(first, first + size)
        first += size
        for k in clients:
            quadrant_sets[q].add(tuple(fd.blocks[k].feature_ids))
        held = np.concatenate([fd.blocks[k].sample_ids for k in clients])
        np.testing.assert_array_equal(np.sort(held), np.arange(60))  # each sample once
    top_left = tuple(r * 6 + c for r in range(3) for c in range(3))
    assert quadrant_sets[0] == {top_left}
    assert all(36 in f for f in quadrant_sets[3])                     # bias with quadrant 3
    assert all(fd.blocks[k].X[:, -1].toarray().ravel().tolist() == [10.0] *
               fd.blocks[k].shape[0] for k in range(first - groups[3], first))


def test_mnist_quadrants_without_bias_and_errors(images):
    X, y = images
    assert_round_trip(P.mnist_quadrants(X, y, 4, image_shape=(6, 6), bias=None), X, y)
    with pytest.raises(ValueError, match="at least 4 clients"):
        P.mnist_quadrants(X, y, 3, image_shape=(6, 6))
    with pytest.raises(ValueError, match="images of shape \\(28, 28\\) have 784 pixels"):
        P.mnist_quadrants(X, y, 4)


def test_explicit_overlap_goes_to_the_lowest_client():
    X = sp.csr_matrix(np.arange(1.0, 13.0).reshape(3, 4))
    fd = P.from_blocks(X, [1, 1, -1], [([0, 1], [0, 1, 2]), ([1, 2], [1, 2, 3]),
                                       ([0, 2], [0, 3])])
    assert_round_trip(fd, X, np.array([1.0, 1, -1]))
    c0, c1, c2 = (b.X.toarray() for b in fd.blocks)
    assert c0[1, 1] == X[1, 1] and c1[0, 0] == 0          # (1,1) held by 0 and 1: 0 keeps it
    assert c2[0, 1] == X[0, 3] and c1[1, 2] == X[2, 3]    # (0,3) only in 2; (2,3) in 1 and 2
    assert c2[1, 1] == 0
    np.testing.assert_array_equal(fd.holder_counts, [2, 2, 2])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 5))
def test_random_overlapping_blocks_round_trip(seed, n_clients):
    rng = np.random.default_rng(seed)
    X = sp.random(20, 12, density=0.3, random_state=rng, format="csr")
    y = rng.integers(0, 3, 20).astype(float)
    blocks = [(rng.choice(20, rng.integers(1, 21), replace=False),
               rng.choice(12, rng.integers(1, 13), replace=False)) for _ in range(n_clients)]
    blocks.append((np.arange(20), np.arange(12)))   # a catch-all so everything is covered
    assert_round_trip(P.from_blocks(X, y, blocks), X, y)


# --- validation -------------------------------------------------------------------------

def _blocks(X, y, spec):
    return [make_block(X[np.ix_(I, J)], y[I], I, J) for I, J in spec]


@pytest.mark.parametrize("spec, message", [
    ([([0, 1], [0, 1, 2])], "samples held by no client: [2]"),
    ([([0, 1, 2], [0, 1])], "features held by no client: [2]"),
    ([([0, 1, 2], [0, 1, 2]), ([], [0])], "client 1 is empty (0 samples, 1 features)"),
    ([([0, 1, 2], [0, 1, 2]), ([0, 1], [0])], "entries (sample, feature) held by more than one"),
])
def test_federated_dataset_lists_problems(spec, message):
    X = sp.csr_matrix(np.arange(1.0, 10.0).reshape(3, 3))
    y = np.array([1.0, -1, 1])
    with pytest.raises(ValueError, match="invalid federated data set") as err:
        FederatedDataset(_blocks(X, y, spec), 3, 3)
    assert message in str(err.value)


def test_a_stored_zero_in_another_clients_entry_holds_nothing():
    """A LIBSVM file may write j:0: a stored 0 where another client holds the entry is
    no entry held twice (the deployed server's tags skip it too: hyfdca._holdings)."""
    X = sp.csr_matrix(np.arange(1.0, 10.0).reshape(3, 3))
    y = np.array([1.0, -1, 1])
    whole, corner = _blocks(X, y, [([0, 1, 2], [0, 1, 2]), ([0], [0])])
    stored_zero = sp.csr_matrix((np.array([0.0]), np.array([0]), np.array([0, 1])),
                                shape=(1, 1))
    assert stored_zero.nnz == 1
    FederatedDataset([whole, ClientBlock(corner.sample_ids, corner.feature_ids, stored_zero,
                                         corner.y)], 3, 3)


def test_out_of_range_ids_and_shape_mismatch_are_listed():
    block = ClientBlock(np.array([0, 5]), np.array([0, 1]), sp.csr_matrix((3, 2)),
                        np.zeros(2))
    with pytest.raises(ValueError) as err:
        FederatedDataset([block], 3, 2)
    text = str(err.value)
    assert "client 0: block shape (3, 2) does not match 2 sample ids x 2 feature ids" in text
    assert "client 0: sample ids out of range [0, 3): [5]" in text


@pytest.mark.parametrize("x, label, message", [
    (1e160, 1.0, "squared norms overflow float64 (||X||_F^2 = inf, largest |x| = 1e+160)"),
    (1.0, 1e160, "squared labels overflow float64 (sum of y_i^2 = inf, largest |y| = 1e+160)"),
])
def test_values_whose_squares_overflow_are_named(x, label, message):
    """Finite values the NaN check lets through, but whose squared norms (q_i, which the
    method divides by) would be inf."""
    X = sp.csr_matrix(np.array([[x, 1.0], [1.0, 2.0]]))
    y = np.array([label, 1.0])
    with pytest.raises(ValueError, match="invalid federated data set") as err:
        FederatedDataset(_blocks(X, y, [([0, 1], [0, 1])]), 2, 2)
    assert message in str(err.value)


def test_conflicting_labels_are_named():
    X = sp.csr_matrix(np.eye(3))
    a = make_block(X[:, :2], [1, 1, -1], [0, 1, 2], [0, 1])
    b = make_block(X[:, 2:], [1, -1, 1], [0, 1, 2], [2])
    with pytest.raises(ValueError, match=r"disagree on the label of samples \[1, 2\]"):
        FederatedDataset([a, b], 3, 3)


@pytest.mark.parametrize("dtype", [np.float64, np.uint64])
def test_label_problems_finds_a_clash_whichever_holder_differs(dtype):
    """Plain labels or the set-up's uint64 tags: sample 4 has three holders, only the middle
    one differs; sample 2 one holder; sample 0 two that agree."""
    ids = [np.array([0, 4]), np.array([0, 2, 4]), np.array([4])]
    labels = [np.array(v, dtype=dtype) for v in ([1, 7], [1, 3, 9], [7])]
    assert label_problems(5, ids, labels) == ["holders disagree on the label of samples [4]"]
    labels[1][2] = 7
    assert label_problems(5, ids, labels) == []
    assert label_problems(5, [], []) == []


def test_from_blocks_refuses_uncovered_entries_and_bad_ids(data):
    X, y = data
    with pytest.raises(ValueError, match="non-zero entries .* held by no client"):
        P.from_blocks(X, y, [(range(90), range(20)), (range(45), range(20, 40))])
    with pytest.raises(ValueError, match=r"client 1: feature ids out of range \[0, 40\): \[40\]"):
        P.from_blocks(X, y, [(range(90), range(40)), (range(3), [40])])


def test_from_blocks_never_truncates_an_id(data):
    X, y = data
    with pytest.raises(ValueError, match=r"client 1: sample ids must be whole numbers, got "
                                         r"\[1.5\]"):
        P.from_blocks(X, y, [(range(90), range(40)), ([0, 1.5], range(40))])
    with pytest.raises(ValueError, match="client 0: feature ids must be integers, got dtype "
                                         "bool"):
        P.from_blocks(X, y, [(range(90), [True] * 40)])
    whole = P.from_blocks(X, y, [(np.arange(90.0), np.arange(40.0))])  # 3.0 is 3
    assert whole.n_clients == 1


def test_builder_argument_errors(data):
    X, y = data
    with pytest.raises(ValueError, match="cannot split 40 features into 41 groups"):
        P.vertical(X, y, 41)
    with pytest.raises(ValueError, match="y has 89 entries but X has 90 samples"):
        P.horizontal(X, y[:-1], 2)
    with pytest.raises(ValueError, match="labels must be numeric"):
        P.horizontal(X, np.array(["a", "b"] * 45), 2)


SPLIT_LIKE = {**BUILDERS, "explicit": lambda X, y: P.from_blocks(
    X, y, [(range(40), range(30)), (range(20, 60), range(40)), (range(60), range(25, 40))])}


@pytest.mark.parametrize("name", SPLIT_LIKE)
def test_new_samples_split_like_the_training_data(data, name):
    """split_like: every new entry has one holder (the pooled matrix comes back exactly),
    each client keeps its training features in order (its block multiplies w_k), and a
    new sample's holders are a training sample's holders wherever they hold its features,
    so on a grid a new sample lies in one sample group."""
    X, y = data
    fed = SPLIT_LIKE[name](X[:60], y[:60])
    new = P.split_like(fed, X[60:], y[60:], seed=5)
    assert_round_trip(new, X[60:], y[60:])
    for trained, dealt in zip(fed.blocks, new.blocks):
        np.testing.assert_array_equal(dealt.feature_ids, trained.feature_ids)
    if name == "grid":
        groups = {tuple(b.sample_ids) for b in new.blocks}
        assert len(groups) == 3 and sum(len(g) for g in groups) == 30
    w = np.random.default_rng(0).normal(size=X.shape[1])
    margins = np.zeros(new.n_samples)
    for block in new.blocks:
        margins[block.sample_ids] += block.X @ w[block.feature_ids]
    np.testing.assert_allclose(margins, X[60:] @ w, atol=1e-12)
    again = P.split_like(fed, X[60:], y[60:], seed=5)
    assert all(np.array_equal(a.sample_ids, b.sample_ids)
               for a, b in zip(new.blocks, again.blocks))


def test_a_new_entry_no_template_holder_holds_goes_to_the_features_first_holder():
    """Sample 0's holders (clients 0 and 1) hold features 0-2 and sample 1's holder
    (client 2) feature 3 only: a new sample modelled on either still has every entry held,
    the ones its template's holders lack by the first client holding that feature."""
    fed = FederatedDataset([make_block(sp.csr_matrix([[1.0, 2.0]]), [1.0], [0], [0, 1]),
                            make_block(sp.csr_matrix([[3.0]]), [1.0], [0], [2]),
                            make_block(sp.csr_matrix([[4.0]]), [-1.0], [1], [3])], 2, 4)
    X_new = sp.csr_matrix(np.arange(1.0, 41.0).reshape(10, 4))
    new = P.split_like(fed, X_new, seed=0)
    assert_round_trip(new, X_new, np.zeros(10))
    np.testing.assert_array_equal(new.blocks[2].sample_ids, np.arange(10))  # feature 3
    np.testing.assert_array_equal(new.blocks[0].sample_ids, np.arange(10))  # features 0-1


def test_as_many_new_samples_as_clients_give_every_client_one(data):
    """20 new samples over 20 horizontal clients: uniform templates alone would leave
    some client without a sample (and split_like refused them all)."""
    X, y = data
    fed = P.horizontal(X[:60], y[:60], 20)
    for seed in range(5):
        new = P.split_like(fed, X[60:80], seed=seed)
        assert sorted(b.sample_ids.size for b in new.blocks) == [1] * 20


def test_split_like_names_what_it_cannot_split(data):
    X, y = data
    fed = P.hybrid_grid(X[:60], y[:60], 3, 3)
    with pytest.raises(ValueError, match="the new samples have 39 features, the training "
                                         "data 40"):
        P.split_like(fed, X[60:, :39])
    with pytest.raises(ValueError, match=r"would hold none of the 1 new samples"):
        P.split_like(fed, X[60:61])


def test_a_layout_refuses_ids_a_dataset_would_refuse():
    """A server builds its Layout from the ids the parties report: a negative id wrapped
    onto the last sample, 1.7 became 1, an empty client or unequal lists passed."""
    from feddata.federated import Layout

    good = ([[0, 1], [1, 2]], [[0], [1]])
    assert Layout.from_ids(*good).n_samples == 3
    for samples, features, message in (
            ([[0, 1], [-1, 2]], [[0], [1]], "client 1: sample ids must be >= 0"),
            ([[0, 1.7]], [[0]], "client 0: sample ids must be whole numbers"),
            ([[0, 1], []], [[0], [1]], "client 1 holds no samples"),
            ([[1, 0]], [[0]], "strictly increasing"),
            ([[0, 1]], [[0, 2]], r"features \[1\] are held by no client"),
            ([[0, 1]], [[0], [1]], "one sample-id list and one feature-id list per client")):
        with pytest.raises(ValueError, match=message):
            Layout.from_ids(samples, features)
    a = Layout.from_ids(*good)
    assert a == a and a != Layout.from_ids(*good)   # compared as objects, never raises


def test_a_spec_with_a_count_that_is_not_a_number_is_named(data):
    for spec in ("horizontal:abc", "vertical:-2", "quadrants:2.5"):
        with pytest.raises(ValueError, match="must be a whole number"):
            P.partition_from_spec(*data, spec)


def test_cyclic_participation_at_one_over_k_forgives_rounding():
    """1/(1/49) is 49.00000000000001: ceil gave 50 subsets and refused 49 clients,
    suggesting the fraction passed; K = 98, 103, ... got one subset too many."""
    from feddata.participation import Participation, cyclic_subsets

    assert [cyclic_subsets(1 / k) for k in (3, 49, 98, 103, 196)] == [3, 49, 98, 103, 196]
    assert cyclic_subsets(0.34) == 3 and cyclic_subsets(0.1) == 10
    assert len(Participation("cyclic", 1 / 49, 49, 0).cycles) == 49
    for name, kwargs in (("seed", dict(seed=1.7)), ("seed", dict(seed=-1)),
                         ("n_clients", dict(n_clients=4.6)), ("n_clients", dict(n_clients=0))):
        arguments = dict(kind="fraction", fraction=0.5, n_clients=4, seed=0, **{})
        arguments.update(kwargs)
        with pytest.raises(ValueError, match=f"{name} must be a whole number"):
            Participation(**arguments)


@pytest.mark.parametrize("kind, fraction, n_clients", [
    ("full", 1.0, 5), ("fraction", 0.9, 4), ("fraction", 0.3, 1), ("fraction", 0.5, 4),
    ("fraction", 0.1, 9), ("cyclic", 1.0, 3), ("cyclic", 0.5, 4)])
def test_everyone_each_round_says_what_the_draws_do(kind, fraction, n_clients):
    """everyone_each_round is True exactly where every round's draw holds every client
    (a fraction of one client draws it: at least one is drawn)."""
    from feddata.participation import Participation

    part = Participation(kind, fraction, n_clients, 0)
    drawn_all = all(part.available(t).size == n_clients for t in range(20))
    assert part.everyone_each_round == drawn_all
