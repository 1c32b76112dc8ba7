"""CHFL (baselines/chfl.py): the cosine temperature schedule, the DKD loss and its gradient
(closed form and finite differences, both temperature readings), the protocol invariants
(alpha = 0 is SOLO bit for bit, round 1 is CE only, head-only traffic, aggregation rules), a
short cross-domain digits run against SOLO, and seeded reproducibility."""

import numpy as np
import pytest
import scipy.special
from numpy.testing import assert_allclose, assert_array_equal

from baselines._deep_data import digits_domains
from baselines.autograd import Tensor
from baselines.chfl import CHFL, dkd_loss, temperature, train_local_only, train_pooled

# --- temperature schedule ---------------------------------------------------------------------


def test_temperature_schedule_start_middle_end():
    assert temperature(0, 100) == pytest.approx(11.0)
    assert temperature(50, 100) == pytest.approx(6.0)
    assert temperature(100, 100) == pytest.approx(1.0)
    assert temperature(25, 100) == pytest.approx(5 * (1 + np.sqrt(0.5)) + 1)
    assert temperature(3, 6, beta=2.0) == pytest.approx(3.0)
    values = [temperature(t, 40) for t in range(1, 41)]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_fit_records_the_schedule():
    clients = digits_domains(seed=0)
    model = CHFL(seed=0).fit(clients, 4, evaluate=False)
    assert_allclose([h["temperature"] for h in model.history],
                    [temperature(t, 4) for t in range(1, 5)])
    assert model.history[-1]["temperature"] == pytest.approx(1.0)


# --- DKD ----------------------------------------------------------------------------------------


def _closed_form_grad(z, zb, y, tau, variant):
    """The closed-form d DKD / dz, per row, divided by n (the loss is a batch mean)."""
    ts, tt_b, tt_p, scale = (tau, tau, tau, tau * tau) if variant == "B" else (1, 1, tau, 1)
    n, C = z.shape
    grad = np.zeros_like(z)
    for r in range(n):
        t = y[r]
        q = scipy.special.softmax(z[r] / ts)
        qb = scipy.special.softmax(zb[r] / tt_b)
        mask = np.arange(C) != t
        p = np.zeros(C)
        pb = np.zeros(C)
        p[mask] = scipy.special.softmax(z[r, mask] / ts)
        pb[mask] = scipy.special.softmax(zb[r, mask] / tt_p)
        g = np.zeros(C)
        g[t] = (q[t] - qb[t]) / ts
        g[mask] = (-(q[t] - qb[t]) * p[mask] + p[mask] - pb[mask]) / ts
        grad[r] = scale * g / n
    return grad


def _reference_dkd(z, zb, y, tau, variant):
    """DKD from SciPy softmaxes, written out directly."""
    ts, tt_b, tt_p, scale = (tau, tau, tau, tau * tau) if variant == "B" else (1, 1, tau, 1)
    total = 0.0
    for r in range(len(y)):
        t = y[r]
        mask = np.arange(z.shape[1]) != t
        q, qb = scipy.special.softmax(z[r] / ts), scipy.special.softmax(zb[r] / tt_b)
        b, bb = np.array([q[t], 1 - q[t]]), np.array([qb[t], 1 - qb[t]])
        p = scipy.special.softmax(z[r, mask] / ts)
        pb = scipy.special.softmax(zb[r, mask] / tt_p)
        total += (bb * np.log(bb / b)).sum() + (pb * np.log(pb / p)).sum()
    return scale * total / len(y)


@pytest.mark.parametrize("variant", ["A", "B"])
@pytest.mark.parametrize("tau", [1.0, 3.5, 11.0])
def test_dkd_value_and_gradient(variant, tau):
    rng = np.random.default_rng(int(tau * 10) + (variant == "A"))
    n, C = 3, 4
    z0, zb = 2.0 * rng.standard_normal((n, C)), 2.0 * rng.standard_normal((n, C))
    y = np.array([0, 3, 1])
    z = Tensor(z0, requires_grad=True)
    loss = dkd_loss(z, zb, y, tau, variant)
    assert loss.item() == pytest.approx(_reference_dkd(z0, zb, y, tau, variant), rel=1e-10)
    loss.backward()
    assert_allclose(z.grad, _closed_form_grad(z0, zb, y, tau, variant), atol=1e-12)
    eps, fd = 1e-6, np.zeros_like(z0)
    for idx in np.ndindex(*z0.shape):
        up, down = z0.copy(), z0.copy()
        up[idx] += eps
        down[idx] -= eps
        fd[idx] = (dkd_loss(Tensor(up), zb, y, tau, variant).item()
                   - dkd_loss(Tensor(down), zb, y, tau, variant).item()) / (2 * eps)
    assert_allclose(z.grad, fd, atol=1e-8)


def test_dkd_is_zero_at_the_teacher_and_has_no_teacher_gradient():
    rng = np.random.default_rng(0)
    z0 = rng.standard_normal((4, 5))
    y = np.array([0, 1, 2, 4])
    assert dkd_loss(Tensor(z0), z0, y, 4.0, "B").item() == pytest.approx(0.0, abs=1e-12)
    teacher = Tensor(z0 + 1.0 * rng.standard_normal(z0.shape), requires_grad=True)
    student = Tensor(z0, requires_grad=True)
    dkd_loss(student, teacher, y, 2.0).backward()
    assert teacher.grad is None and student.grad is not None


# --- protocol -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clients():
    return digits_domains(seed=0)


def _state(model):
    return [a for m in model.models for a in m.state_dict().values()]


def test_alpha_zero_is_solo_bit_for_bit(clients):
    ours = CHFL(alpha=0.0, seed=3).fit(clients, 3, evaluate=False)
    solo = CHFL(strategy="solo", seed=3).fit(clients, 3, evaluate=False)
    for a, b in zip(_state(ours), _state(solo)):
        assert_array_equal(a, b)


def test_round_one_is_cross_entropy_only(clients):
    ours = CHFL(seed=4).fit(clients, 1, evaluate=False)
    solo = CHFL(strategy="solo", seed=4).fit(clients, 1, evaluate=False)
    for a, b in zip(_state(ours), _state(solo)):
        assert_array_equal(a, b)
    two = CHFL(seed=4).fit(clients, 2, evaluate=False)
    solo2 = CHFL(strategy="solo", seed=4).fit(clients, 2, evaluate=False)
    assert not np.array_equal(_state(two)[0], _state(solo2)[0])


def test_only_heads_travel_and_aggregation_rules(clients):
    model = CHFL(seed=0, embed_dim=16).fit(clients, 2, evaluate=False)
    assert model.uploads == [[16 * 10 + 10] * 3] * 2
    heads = [(m.head.weight.data, m.head.bias.data) for m in model.models]
    assert_allclose(model.global_head[0], np.mean([h[0] for h in heads], axis=0))
    # identical heads average to themselves; "sum" is K times; "weighted" weights by N_k
    for m in model.models:
        m.head.weight.data, m.head.bias.data = heads[0][0].copy(), heads[0][1].copy()
    assert_allclose(model._aggregate()[0], heads[0][0])
    model.agg = "sum"
    assert_allclose(model._aggregate()[0], 3 * heads[0][0])
    model.agg = "weighted"
    assert_allclose(model._aggregate()[1], heads[0][1])


@pytest.mark.parametrize("options", [dict(variant="A"), dict(agg="sum"), dict(agg="weighted"),
                                     dict(teacher="epoch"), dict(strategy="avg"),
                                     dict(strategy="avgkd")])
def test_variants_run(clients, options):
    model = CHFL(seed=0, **options).fit(clients, 3)
    assert np.isfinite(model.history[-1]["train_loss"])
    assert model.history[-1]["client_acc_mean"] > 0.1
    if options.get("strategy") in ("avg", "avgkd"):  # the local head is replaced by the average
        assert_allclose(model.models[0].head.weight.data, model.global_head[0])


def test_same_seed_same_bits(clients):
    a, b, c = (CHFL(seed=s).fit(clients, 3) for s in (7, 7, 8))
    for x, y in zip(_state(a), _state(b)):
        assert_array_equal(x, y)
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    assert not np.array_equal(_state(a)[0], _state(c)[0]) or \
        _state(a)[0].shape != _state(c)[0].shape


# --- short run against SOLO -------------------------------------------------------------------


def test_short_run_beats_chance_and_keeps_up_with_solo():
    """A 15-round run on one seed: well above chance (10%), and within 3 points of SOLO on the
    paper's metric (best-over-rounds mean client accuracy). CHFL does NOT beat SOLO on this
    proxy (see the slow test below), so "keeps up with" is what is asserted."""
    data = digits_domains(seed=0)
    ours = CHFL(seed=0).fit(data, 15)
    solo = train_local_only(data, 15, seed=0)
    assert ours.best_mean_accuracy() > 0.6
    assert ours.best_mean_accuracy() > solo.best_mean_accuracy() - 0.03
    assert ours.history[-1]["train_loss"] < ours.history[0]["train_loss"]


@pytest.mark.slow
def test_never_much_worse_than_solo_over_five_seeds():
    """40 rounds, Dir(0.5) label skew, seeds 0-4, best-over-rounds mean client accuracy.
    Measured (SGD lr 0.01, momentum 0.9): CHFL 0.947 +- 0.011, SOLO 0.950 +- 0.011 (IID:
    0.886 vs 0.901). The paper's "Ours > SOLO" does not reproduce here; the assertion is the
    weaker "never worse than training alone" within 1.5 points on average."""
    ours, solo = [], []
    for seed in range(5):
        data = digits_domains(seed=seed)
        ours.append(CHFL(seed=seed).fit(data, 40).best_mean_accuracy())
        solo.append(train_local_only(data, 40, seed=seed).best_mean_accuracy())
    assert min(ours) > 0.85
    assert np.mean(ours) > np.mean(solo) - 0.015


@pytest.mark.slow
def test_pooled_reference_runs():
    data = digits_domains(seed=0)
    history = train_pooled(data, 20, seed=0)
    assert len(history) == 20 and len(history[-1]) == 3 and np.mean(history[-1]) > 0.7
    # scoring a round draws nothing: a shorter run is the longer one's beginning
    assert train_pooled(data, 3, seed=0) == history[:3]
