"""HyFEM with deep per-block models (baselines/hyfem_deep.py): the server steps against their
closed forms, the Hungarian matching against a planted permutation, Remark 3's FedAvg limit,
a short digits run against stand-alone training, and seeded reproducibility."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from baselines._deep_data import ClientData, digits_blocks, image_blocks, load_digits_split
from baselines.hyfem_deep import (
    HyFEMDeep,
    _rows,
    average_classifier,
    average_extractors,
    match_hidden,
    train_local_only,
    train_pooled,
)


def _random_classifier(rng, d0, e, H, C):
    return (rng.standard_normal((d0 * e, H)), rng.standard_normal(H),
            rng.standard_normal((H, C)), rng.standard_normal(C))


def _client_slice(w0, blocks, pi, e):
    W1, b1, W2, b2 = w0
    return W1[np.ix_(_rows(blocks, e), pi)], b1[pi], W2[pi], b2


# --- matching ----------------------------------------------------------------------------------


@pytest.mark.parametrize("H_m", [8, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matching_recovers_planted_permutation(H_m, seed):
    rng = np.random.default_rng(seed)
    d0, e, H0, C = 4, 3, 8, 5
    w0 = _random_classifier(rng, d0, e, H0, C)
    blocks = (0, 2, 3)
    planted = rng.permutation(H0)[:H_m]
    client = tuple(a + 1e-3 * rng.standard_normal(a.shape)
                   for a in _client_slice(w0, blocks, planted, e))
    pi, cost = match_hidden(client, blocks, w0, e)
    assert_array_equal(pi, planted)
    assert cost.shape == (H_m, H0)
    # the cost is squared Euclidean on incoming (own blocks + hidden bias) and outgoing weights
    j, i = 1, 4
    W1, b1, W2, _ = client
    expected = (((W1[:, j] - w0[0][_rows(blocks, e), i]) ** 2).sum()
                + (b1[j] - w0[1][i]) ** 2 + ((W2[j] - w0[2][i]) ** 2).sum())
    assert_allclose(cost[j, i], expected)


def test_matching_against_a_zero_server_neuron_costs_the_client_norm():
    rng = np.random.default_rng(3)
    w0 = list(_random_classifier(rng, 2, 2, 4, 3))
    w0[0][:, 2], w0[1][2], w0[2][2] = 0.0, 0.0, 0.0
    client = _client_slice(tuple(w0), (1,), np.arange(4), 2)
    _, cost = match_hidden(client, (1,), tuple(w0), 2)
    W1, b1, W2, _ = client
    assert_allclose(cost[:, 2], (W1**2).sum(0) + b1**2 + (W2**2).sum(1))


# --- server averages against the closed-form minimisers ---------------------------------------


def test_extractor_average_is_the_minimiser_of_eq10():
    rng = np.random.default_rng(0)
    d0, shapes = 3, [(4, 2), (2,)]
    client_blocks = [(0, 1), (1, 2), (1,), (0, 2)]
    p = rng.dirichlet(np.ones(len(client_blocks)))
    thetas = [[tuple(rng.standard_normal(s) for s in shapes) for _ in b] for b in client_blocks]
    previous = [tuple(np.zeros(s) for s in shapes) for _ in range(d0)]
    got = average_extractors(thetas, client_blocks, p, previous)
    # min_Theta0 sum_m p_m |Theta_m - P_m Theta0|^2 via the normal equations with explicit P_m
    size = sum(int(np.prod(s)) for s in shapes)
    lhs, rhs = np.zeros((d0 * size,) * 2), np.zeros(d0 * size)
    for m, blocks in enumerate(client_blocks):
        P = np.kron(np.eye(d0)[list(blocks)], np.eye(size))
        vec = np.concatenate([np.concatenate([a.ravel() for a in t]) for t in thetas[m]])
        lhs += p[m] * P.T @ P
        rhs += p[m] * P.T @ vec
    solution = np.linalg.solve(lhs, rhs).reshape(d0, size)
    for i in range(d0):
        assert_allclose(np.concatenate([a.ravel() for a in got[i]]), solution[i])


def _explicit_pi(shapes, blocks, pi, e):
    """Pi_m as a 0/1 matrix from vec(server w0) to vec(client w_m), built entry by entry."""
    rows = _rows(blocks, e)
    sizes = [int(np.prod(s)) for s in shapes]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    targets = []
    for r in rows:
        for j in pi:
            targets.append(offsets[0] + np.ravel_multi_index((r, j), shapes[0]))
    targets += [offsets[1] + j for j in pi]
    for j in pi:
        for c in range(shapes[2][1]):
            targets.append(offsets[2] + np.ravel_multi_index((j, c), shapes[2]))
    targets += [offsets[3] + c for c in range(shapes[3][0])]
    Pi = np.zeros((len(targets), offsets[-1]))
    Pi[np.arange(len(targets)), targets] = 1.0
    return Pi


@pytest.mark.parametrize("exclude", [None, 1])
def test_classifier_average_is_the_minimiser_of_eq11(exclude):
    rng = np.random.default_rng(1)
    d0, e, H0, C = 3, 2, 6, 3
    shapes = ((d0 * e, H0), (H0,), (H0, C), (C,))
    client_blocks = [(0, 1), (1, 2), (2,), (0, 2)]
    H_ms = [6, 4, 6, 3]  # injections: some server neurons covered by few clients
    pis = [rng.permutation(H0)[:h] for h in H_ms]
    p = rng.dirichlet(np.ones(4))
    ws = [(rng.standard_normal((len(b) * e, h)), rng.standard_normal(h),
           rng.standard_normal((h, C)), rng.standard_normal(C))
          for b, h in zip(client_blocks, H_ms)]
    got, cover = average_classifier(ws, client_blocks, pis, p, shapes, e,
                                    exclude=None if exclude is None else (exclude,))
    n = sum(int(np.prod(s)) for s in shapes)
    lhs, rhs = np.zeros((n, n)), np.zeros(n)
    for m, (w, b, pi) in enumerate(zip(ws, client_blocks, pis)):
        if m == exclude:
            continue
        Pi = _explicit_pi(shapes, b, pi, e)
        lhs += p[m] * Pi.T @ Pi
        rhs += p[m] * Pi.T @ np.concatenate([a.ravel() for a in w])
    expected = np.linalg.pinv(lhs) @ rhs  # uncovered entries -> 0
    assert_allclose(np.concatenate([a.ravel() for a in got]), expected, atol=1e-12)
    assert_allclose(np.concatenate([c.ravel() for c in cover]), np.diag(lhs))


def test_classifier_average_keeps_uncovered_entries():
    rng = np.random.default_rng(2)
    e, H0, C = 2, 4, 2
    shapes = ((2 * e, H0), (H0,), (H0, C), (C,))
    previous = tuple(rng.standard_normal(s) for s in shapes)
    ws = [(rng.standard_normal((e, 2)), rng.standard_normal(2), rng.standard_normal((2, C)),
           rng.standard_normal(C))]
    got, _ = average_classifier(ws, [(0,)], [np.array([3, 1])], np.ones(1), shapes, e,
                                fallback=previous)
    assert_allclose(got[0][e:], previous[0][e:])          # block 1 rows: nobody holds them
    assert_allclose(got[0][:e][:, [0, 2]], previous[0][:e][:, [0, 2]])  # unmatched neurons
    assert_allclose(got[0][:e][:, [3, 1]], ws[0][0])
    assert_allclose(got[3], ws[0][3])


# --- Remark 3: d0 = 1 ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_block_data():
    X, y, _, _ = load_digits_split(seed=0)
    X, y = X[:600], y[:600]
    clients = [ClientData((0,), np.flatnonzero(np.isin(y, cls)), y[np.isin(y, cls)])
               for cls in ([0, 1, 2, 3, 4, 5], [4, 5, 6, 7, 8, 9], [0, 2, 4, 6, 8])]
    return X, y, image_blocks((8, 8), (1, 1)), clients


def test_d0_one_without_penalties_is_a_fedavg_step(one_block_data):
    X, y, blocks, clients = one_block_data
    model = HyFEMDeep(embed_dim=8, hidden=16, mu1=0.0, mu2=0.0, local_steps=4, seed=0)
    model.fit(X, y, blocks, clients, 1)
    for pi in model.pis:  # all clients left the same point: the matching stays the identity
        assert_array_equal(pi, np.arange(16))
    thetas, ws = zip(*(m.get_arrays() for m in model.client_models))
    for j in range(2):
        assert_allclose(model.theta0[0][j], np.mean([t[0][j] for t in thetas], axis=0))
    for j in range(4):
        assert_allclose(model.w0[j], np.mean([w[j] for w in ws], axis=0))


def _extractor_spread(model):
    A = np.stack([m.extractors[0].weight.data for m in model.client_models])
    return float(np.abs(A - A.mean(axis=0)).max())


def test_large_mu1_keeps_the_extractors_together(one_block_data):
    X, y, blocks, clients = one_block_data
    spreads = []
    for mu1 in (0.0, 2.0, 19.0):  # lr * mu1 <= 0.95 keeps the proximal step stable
        model = HyFEMDeep(embed_dim=8, hidden=16, mu1=mu1, mu2=0.5, lr=0.05, local_steps=16,
                          seed=0).fit(X, y, blocks, clients, 1)
        spreads.append(_extractor_spread(model))
    assert spreads[0] > spreads[1] > spreads[2]
    assert spreads[2] < 0.2 * spreads[0]


# --- digits quadrants (App. C.1 pattern) --------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    return digits_blocks(seed=0)


def test_short_run_beats_chance_and_stand_alone(digits):
    d = digits
    rounds, Q, lr = 10, 32, 0.05
    model = HyFEMDeep(lr=lr, local_steps=Q, seed=0).fit(
        d["X_train"], d["y_train"], d["block_columns"], d["clients"], rounds,
        X_test=d["X_test"], y_test=d["y_test"])
    last = model.history[-1]
    assert set(last) >= {"round", "train_loss", "server_acc", "client_acc_mean", "client_acc_std"}
    assert model.history[0]["train_loss"] > last["train_loss"]
    local = train_local_only(d["X_train"], d["block_columns"], d["clients"], steps=rounds * Q,
                             X_test=d["X_test"], y_test=d["y_test"], lr=lr, seed=0)
    # each client sees 5 of 10 classes, so stand-alone clients are capped at about 50%
    assert last["server_acc"] > 0.6
    assert last["server_acc"] > np.mean(local) + 0.15
    assert last["client_acc_mean"] > 0.2
    # the global model also works from a subset of blocks (zero-padded embeddings)
    partial = np.mean(model.predict_global(d["X_test"], present_blocks=(0, 2)) == d["y_test"])
    assert partial > 0.2


def test_same_seed_same_bits(digits):
    d = digits
    runs = []
    for seed in (5, 5, 6):
        m = HyFEMDeep(local_steps=4, seed=seed).fit(
            d["X_train"], d["y_train"], d["block_columns"], d["clients"], 2)
        runs.append(m)
    a, b, c = runs
    for x, y in zip(a.w0 + tuple(t for pair in a.theta0 for t in pair),
                    b.w0 + tuple(t for pair in b.theta0 for t in pair)):
        assert_array_equal(x, y)
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    assert all(np.array_equal(p, q) for p, q in zip(a.pis, b.pis))
    assert not np.array_equal(a.w0[0], c.w0[0])


def test_matching_all_variant_and_sample_weights_run(digits):
    d = digits
    m = HyFEMDeep(local_steps=4, matching="all", weights="samples", init_matching="random",
                  client_hidden=48, seed=0)
    m.fit(d["X_train"], d["y_train"], d["block_columns"], d["clients"], 2,
          X_test=d["X_test"], y_test=d["y_test"])
    assert all(len(np.unique(pi)) == 48 for pi in m.pis)
    assert np.isfinite(m.history[-1]["train_loss"])


@pytest.mark.slow
def test_longer_run_against_local_only_and_pooled(digits):
    d = digits
    rounds, Q, lr = 64, 32, 0.05
    model = HyFEMDeep(lr=lr, local_steps=Q, seed=0).fit(
        d["X_train"], d["y_train"], d["block_columns"], d["clients"], rounds,
        X_test=d["X_test"], y_test=d["y_test"])
    local = np.mean(train_local_only(d["X_train"], d["block_columns"], d["clients"],
                                     steps=rounds * Q, X_test=d["X_test"], y_test=d["y_test"],
                                     lr=lr, seed=0))
    pooled = train_pooled(d["X_train"], d["y_train"], d["block_columns"], steps=rounds * Q,
                          X_test=d["X_test"], y_test=d["y_test"], lr=lr, seed=0)
    last = model.history[-1]
    assert last["server_acc"] > local + 0.3
    assert last["client_acc_mean"] > local
    assert pooled > last["server_acc"] - 0.02 or pooled > 0.9


def test_a_client_without_samples_is_named():
    """A client holding no samples is refused by name (it failed at its first local step
    with a ZeroDivisionError from the loss's mean)."""
    d = digits_blocks(seed=0)
    empty = ClientData((0, 1), np.array([], dtype=int), np.array([], dtype=int))
    with pytest.raises(ValueError, match=r"HyFEM: clients \[2\] hold no samples"):
        HyFEMDeep(seed=0, local_steps=2).fit(d["X_train"], d["y_train"], d["block_columns"],
                                             list(d["clients"][:2]) + [empty], 1)
