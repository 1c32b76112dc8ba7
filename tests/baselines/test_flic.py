"""FLIC: the W2 alignment term against a direct (sqrtm) computation and finite differences,
anchors moving toward the class embeddings under both anchor readings, the server average,
a short run above chance, seeded reproducibility, the references, and (slow) FLIC against
local-only training on the paper's toy problem."""

import numpy as np
import pytest
import scipy.linalg
from numpy.testing import assert_allclose, assert_array_equal

from baselines._deep_views import heterogeneous_toy, pad_blocks
from baselines.autograd import Tensor
from baselines.flic import FLIC, FLICLocal, FLICPooled, HetFedRep, w2_to_isotropic

RNG = np.random.default_rng(7)


def _w2_direct(v, Z, sigma):
    m = Z.mean(axis=0)
    S = np.cov(Z.T) if len(Z) > 1 else np.zeros((Z.shape[1],) * 2)
    A = sigma**2 * np.eye(Z.shape[1])
    root_a = scipy.linalg.sqrtm(A)
    cross = scipy.linalg.sqrtm(root_a @ S @ root_a)
    return float(np.sum((v - m) ** 2) + np.trace(A) + np.trace(S) - 2 * np.trace(cross).real)


@pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")  # sqrtm of a rank-1 matrix
@pytest.mark.parametrize("n,k,sigma", [(7, 4, 1.0), (3, 5, np.sqrt(np.e)), (1, 3, 1.0),
                                       (12, 6, 0.5)])
def test_w2_matches_direct_computation(n, k, sigma):
    v, Z = RNG.normal(size=k) * 3, RNG.normal(size=(n, k))
    value = w2_to_isotropic(Tensor(v), Tensor(Z), sigma).item()
    assert_allclose(value, _w2_direct(v, Z, sigma), rtol=1e-8)


def test_w2_gradient_matches_finite_differences():
    v, Z = RNG.normal(size=4), RNG.normal(size=(6, 4))
    tv, tz = Tensor(v, requires_grad=True), Tensor(Z, requires_grad=True)
    w2_to_isotropic(tv, tz, 1.3).backward()
    for arr, grad in ((v, tv.grad), (Z, tz.grad)):
        numeric = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += 1e-6
            minus[idx] -= 1e-6
            args_p = (plus, Z) if arr is v else (v, plus)
            args_m = (minus, Z) if arr is v else (v, minus)
            numeric[idx] = (_w2_direct(*args_p, 1.3) - _w2_direct(*args_m, 1.3)) / 2e-6
        assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    assert_allclose(tv.grad, 2 * (v - Z.mean(axis=0)))  # dW/dv = 2 (v - m_hat)


def _toy(seed=0, scale=2.0, **kw):
    args = dict(n_clients=4, n_classes=6, classes_per_client=3, n_train_per_class=60,
                n_test_per_class=60, dim_range=(3, 20), centre_scale=scale, rng=seed)
    args.update(kw)
    return heterogeneous_toy("linear_mapping", **args)


def _setup(anchor_update, **kw):
    """A FLIC with every client built and no round run (rounds=0)."""
    clients = _toy()
    model = FLIC(6, k=8, anchor_update=anchor_update, pretrain_epochs=0, final_round=False,
                 seed=0, **kw)
    return model.fit(clients, rounds=0), clients


def _distances(model, i, anchors):
    client = model.clients[i]
    emb = model.embed(i, client.X)
    return {int(c): np.linalg.norm(anchors[c] - emb[client.y == c].mean(axis=0))
            for c in client.classes}


def test_anchors_move_toward_class_embeddings_code_reading():
    model, _ = _setup("code", anchor_lr=0.05)
    client = model.clients[0]
    client.anchors.data = model.anchors.data.copy()
    start = _distances(model, 0, client.anchors.data)
    emb = model.embed(0, client.X)
    for _ in range(50):
        model._anchor_step_code(client, emb, client.y)
    end = _distances(model, 0, client.anchors.data)
    for c in start:
        assert end[c] < start[c] - 1.0, (c, start[c], end[c])


def test_anchors_move_toward_class_embeddings_paper_reading():
    model, _ = _setup("paper", lam1=1.0, lam2=0.0, anchor_lr=0.1)
    client = model.clients[1]
    client.anchors.data = model.anchors.data.copy()
    start = _distances(model, 1, client.anchors.data)
    model._anchor_step_paper(client, np.random.default_rng(0))
    end = _distances(model, 1, client.anchors.data)
    for c in start:  # v <- v - 0.1 * 2 (v - m_hat): the distance shrinks by exactly 0.8
        assert_allclose(end[c], 0.8 * start[c], rtol=1e-10)
    others = np.setdiff1d(np.arange(6), client.classes)
    assert_array_equal(client.anchors.data[others], model.anchors.data[others])


def test_round_averages_participant_anchors_and_alpha():
    clients = _toy()
    model = FLIC(6, k=8, pretrain_epochs=0, align_epochs=0, local_epochs=2, rep_epochs=1,
                 rep_start=0, participation=0.5, final_round=False, seed=1)
    model.fit(clients, rounds=0)
    results = [model._local_round(i, 0) for i in (0, 2)]
    assert_allclose(np.mean([r[1] for r in results], axis=0),
                    0.5 * (model.clients[0].anchors.data + model.clients[2].anchors.data))
    assert not np.allclose(results[0][0]["fc.weight"], results[1][0]["fc.weight"])


@pytest.fixture(scope="module")
def short_run():
    clients = _toy(seed=3)
    kw = dict(k=16, pretrain_epochs=5, pretrain_lr=1e-2, local_epochs=3, rep_start=2,
              participation=0.5, batch_size=50, lr=1e-2, seed=3)
    return clients, kw, FLIC(6, **kw).fit(clients, rounds=8)


def test_short_run_beats_chance(short_run):
    clients, _, model = short_run
    assert len(model.history) == 9 and model.history[-1]["final"]
    assert all(len(h["participants"]) == 2 for h in model.history[:-1])
    assert model.history[-1]["accuracy"] > 0.75  # chance is 1/3 (3 classes per client)
    assert model.history[-1]["accuracy"] == model.score([(c["X_test"], c["y_test"])
                                                         for c in clients])
    # the toy's dicts are scored on their test split, as fit evaluates them
    assert model.score(clients) == model.history[-1]["accuracy"]
    assert model.score(clients) != model.score([(c["X"], c["y"]) for c in clients])
    assert model.client_scores(clients) == model.client_scores(
        [(c["X_test"], c["y_test"]) for c in clients])
    assert model.history[-1]["train_loss"] < model.history[0]["train_loss"]


def test_same_seed_same_bits(short_run):
    clients, kw, model = short_run
    again = FLIC(6, **kw).fit(clients, rounds=8)
    assert again.history == model.history
    assert_array_equal(again.anchors.data, model.anchors.data)
    for i in range(len(clients)):
        assert_array_equal(again.decision_function(i, clients[i]["X_test"]),
                           model.decision_function(i, clients[i]["X_test"]))
    other = FLIC(6, **dict(kw, seed=4)).fit(clients, rounds=8)
    assert not np.array_equal(other.anchors.data, model.anchors.data)


def test_references_and_variants_run():
    clients = _toy(seed=5)
    local = FLICLocal(6, lr=1e-2, seed=0).fit(clients, epochs=10)
    pooled = FLICPooled(6, lr=1e-2, seed=0).fit(clients, epochs=10)
    het = HetFedRep(6, k=8, local_epochs=3, rep_start=0, participation=0.5, lr=1e-2,
                    seed=0).fit(clients, rounds=3)
    # align_epochs=0: after only 2 pre-training epochs the code's per-round alignment epoch
    # (toward anchors the embeddings have not reached yet) wrecks the FLIC-Class heads
    cls = FLIC(6, k=8, head="class", pretrain_epochs=2, pretrain_lr=1e-2, local_epochs=3,
               participation=0.5, lr=1e-2, align_epochs=0, seed=0).fit(clients, rounds=3)
    for model in (local, pooled, het, cls):
        assert 0.5 < model.history[-1]["accuracy"] <= 1, model.name  # chance 1/3
    assert not hasattr(cls, "alpha")
    wide = pad_blocks([np.ones((2, 2)), 2 * np.ones((1, 3))], [2, 3])
    assert_array_equal(wide, [[1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 2, 2, 2]])
    with pytest.raises(ValueError, match="anchor_update must be 'code', 'paper' or 'none'"):
        FLIC(6, anchor_update="other")


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "known gap, measured with exactly this configuration (seeds 0-2): FLIC-HL 0.538 vs "
    "Local 0.576 (HetFedRep 0.563, Pooled 0.558); the noisy-features toy gives FLIC 0.655 vs "
    "Local 0.717. Remove this marker when FLIC beats Local here."))
def test_flic_beats_local_on_average():
    """The paper's toy (linear mapping), 10 clients x 3 of 10 classes, 3 seeds."""
    gains = []
    for seed in range(3):
        clients = heterogeneous_toy("linear_mapping", n_clients=10, n_classes=10,
                                    n_train_per_class=200, n_test_per_class=100, rng=seed)
        flic = FLIC(10, pretrain_epochs=50, pretrain_lr=1e-2, participation=0.3, rep_start=6,
                    seed=seed).fit(clients, rounds=20)
        local = FLICLocal(10, seed=seed).fit(clients, epochs=50)
        assert flic.history[-1]["accuracy"] > 0.4  # chance 1/3; this part must hold
        gains.append(flic.history[-1]["accuracy"] - local.history[-1]["accuracy"])
    assert np.mean(gains) > 0, gains
