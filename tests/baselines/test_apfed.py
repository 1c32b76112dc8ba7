"""APFed: the passive-to-active gradient hand-off against end-to-end backprop, the returned
passive gradient against finite differences, NT-Xent against a NumPy loop, APFed-R's
reconstruction loss going down, lam = 0 = SingleVL bit for bit, inference on the active client
alone, seeded reproducibility, and (slow) APFed against the active client alone on digits."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from baselines._deep_views import horizontal_strips, stratified_split
from baselines.apfed import APFed, PooledVL, SingleVL, digits_views, nt_xent
from baselines.autograd import Tensor, cross_entropy

RNG = np.random.default_rng(123)
XA = RNG.random((8, 4))
XP = [RNG.random((8, 3)), RNG.random((8, 5))]
Y = np.array([0, 1, 2, 0, 1, 2, 0, 1])


def _tiny(variant, lam=0.7, contrastive="symmetric"):
    model = APFed(variant, lam=lam, hidden=6, d=5, head_hidden=4, proj_dim=3, p_drop=0.0,
                  lr=0.1, momentum=0.0, weight_decay=0.0, contrastive=contrastive, seed=3)
    model._build(XA, 3, XP)
    return model


def _states(model):
    out = {"f": model.f_A.state_dict(), "g": model.g_T.state_dict()}
    if model.variant == "C":
        out["P"] = model.P_A.state_dict()
    for p, passive in enumerate(model.passives):
        out[p] = [x.data.copy() for x in passive.params]
    return out


@pytest.mark.parametrize("variant,contrastive",
                         [("R", "symmetric"), ("C", "symmetric"), ("C", "paper")])
def test_hand_off_equals_end_to_end_backprop(variant, contrastive):
    """One protocol step (plain SGD) moves every module by lr x its gradient of the joint
    objective L_A + lam sum_p L_p computed in one graph (passives by their own L_p)."""
    lam, lr = 0.7, 0.1
    model = _tiny(variant, lam, contrastive)
    before = _states(model)
    model._step(XA, Y, np.arange(8), None)
    after = _states(model)

    ref = _tiny(variant, lam, contrastive)  # same seed: same initial weights
    h = ref.f_A(Tensor(XA))
    sent = ref.P_A(h) if variant == "C" else h
    loss = cross_entropy(ref.g_T(h), Y)
    for passive in ref.passives:
        loss = loss + lam * passive.loss(np.arange(8), sent)
    loss.backward()

    def check(module_params, b, a, scale=1.0):
        for name, p in module_params:
            assert_allclose((b[name] - a[name]) / lr, scale * p.grad, rtol=1e-9, atol=1e-12)

    check(ref.f_A.named_parameters(), before["f"], after["f"])
    check(ref.g_T.named_parameters(), before["g"], after["g"])
    if variant == "C":
        check(ref.P_A.named_parameters(), before["P"], after["P"])
    for p, passive in enumerate(ref.passives):  # each passive steps on its own, unscaled L_p
        for b, a, param in zip(before[p], after[p], passive.params):
            assert_allclose((b - a) / lr, param.grad / lam, rtol=1e-9, atol=1e-12)
    assert np.abs(ref.f_A.parameters()[0].grad).max() > 0


@pytest.mark.parametrize("variant", ["R", "C"])
def test_passive_gradient_matches_finite_differences(variant):
    model = _tiny(variant)
    passive = model.passives[1]
    ids = np.arange(6)
    received = RNG.normal(size=(6, 3 if variant == "C" else 5))
    leaf = Tensor(received, requires_grad=True)
    passive.loss(ids, leaf).backward()
    numeric = np.zeros_like(received)
    for idx in np.ndindex(received.shape):
        plus, minus = received.copy(), received.copy()
        plus[idx] += 1e-6
        minus[idx] -= 1e-6
        numeric[idx] = (passive.loss(ids, Tensor(plus)).item()
                        - passive.loss(ids, Tensor(minus)).item()) / 2e-6
    assert_allclose(leaf.grad, numeric, rtol=1e-5, atol=1e-8)
    if variant == "C":  # cosine ignores scale: each row's gradient is orthogonal to the row
        assert_allclose((leaf.grad * received).sum(axis=1), 0.0, atol=1e-10)


def _nt_xent_loop(za, zp, tau, symmetric):
    z = np.vstack([za, zp])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    n = len(za)
    losses = []
    for i in range(2 * n):
        pos = i + n if i < n else i - n
        num = np.exp(z[i] @ z[pos] / tau)
        den = sum(np.exp(z[i] @ z[j] / tau) for j in range(2 * n) if j != i)
        losses.append(-np.log(num / den))
    return np.mean(losses) if symmetric else np.mean(losses[:n])


@pytest.mark.parametrize("tau", [1.0, 0.3])
@pytest.mark.parametrize("symmetric", [True, False])
def test_nt_xent_matches_numpy(tau, symmetric):
    za, zp = RNG.normal(size=(5, 4)), RNG.normal(size=(5, 4))
    value = nt_xent(Tensor(za), Tensor(zp), tau, symmetric).item()
    assert_allclose(value, _nt_xent_loop(za, zp, tau, symmetric), rtol=1e-12)
    # identical views are easier than unrelated ones
    assert nt_xent(Tensor(za), Tensor(za), tau, symmetric).item() < value


@pytest.fixture(scope="module")
def digits():
    return digits_views(m=2, active=0, seed=0)


@pytest.fixture(scope="module")
def small(digits):
    """The first 300 training samples (mechanics tests)."""
    xa, xp, y = digits["train"]
    return {"train": (xa[:300], [v[:300] for v in xp], y[:300]), "test": digits["test"]}


def test_reconstruction_loss_decreases(digits):
    xa, xp, y = digits["train"]
    model = APFed("R", seed=0).fit(xa, y, xp, epochs=8)
    losses = [h["passive_loss"][0] for h in model.history]
    assert losses[-1] < 0.7 * losses[0]
    assert all(np.isfinite(losses))


@pytest.mark.parametrize("variant", ["R", "C"])
def test_lam_zero_is_single_view_bit_for_bit(small, variant):
    xa, xp, y = small["train"]
    a = APFed(variant, lam=0.0, seed=1).fit(xa, y, xp, epochs=2)
    b = SingleVL(variant, seed=1).fit(xa, y, xp, epochs=2)
    for (name, p), q in zip(a.f_A.named_parameters(), b.f_A.parameters()):
        assert_array_equal(p.data, q.data, err_msg=name)
    assert_array_equal(a.decision_function(xa), b.decision_function(xa))
    assert [h["train_loss"] for h in a.history] == [h["train_loss"] for h in b.history]
    # with lam > 0 the passive gradients do change the active encoder
    c = APFed(variant, lam=1.0, seed=1).fit(xa, y, xp, epochs=2)
    assert not np.array_equal(c.decision_function(xa), a.decision_function(xa))


@pytest.mark.parametrize("variant", ["R", "C"])
def test_inference_uses_the_active_client_only(small, variant):
    xa, xp, y = small["train"]
    ta, tp, ty = small["test"]
    model = APFed(variant, seed=2).fit(xa, y, xp, epochs=3)
    logits = model.decision_function(ta)
    for passive in model.passives:  # scramble every passive network: nothing changes
        for p in passive.params:
            p.data = RNG.normal(size=p.shape) * 100
    if variant == "C":
        model.P_A.weight.data = RNG.normal(size=model.P_A.weight.shape)
    assert_array_equal(model.decision_function(ta), logits)
    model.passives = None  # no passive client at all
    assert_array_equal(model.predict(ta), logits.argmax(axis=1))
    # the active encoder does matter
    model.f_A.parameters()[0].data = model.f_A.parameters()[0].data * 0.0
    assert not np.array_equal(model.decision_function(ta), logits)


@pytest.mark.parametrize("variant", ["R", "C"])
def test_same_seed_same_bits(small, variant):
    xa, xp, y = small["train"]
    runs = [APFed(variant, seed=s).fit(xa, y, xp, epochs=2) for s in (5, 5, 6)]
    assert runs[0].history == runs[1].history
    for p, q in zip(runs[0].f_A.parameters(), runs[1].f_A.parameters()):
        assert_array_equal(p.data, q.data)
    for pa, pb in zip(runs[0].passives, runs[1].passives):
        for p, q in zip(pa.params, pb.params):
            assert_array_equal(p.data, q.data)
    assert runs[0].history != runs[2].history


def test_short_run_beats_chance_and_pooled_is_best(digits):
    xa, xp, y = digits["train"]
    ta, tp, ty = digits["test"]
    apfed = APFed("C", seed=0).fit(xa, y, xp, epochs=12, eval_data=(ta, ty))
    pooled = PooledVL(seed=0).fit([xa] + xp, y, epochs=12, eval_data=([ta] + tp, ty))
    assert apfed.history[-1]["accuracy"] > 0.6  # chance is 0.1
    assert pooled.history[-1]["accuracy"] > apfed.history[-1]["accuracy"]  # sees all pixels


def test_views():
    X = np.arange(2 * 64).reshape(2, 64)
    strips = horizontal_strips(X, 8, 8, 3)  # floor(8/3) = 2 rows each, rows 6-7 dropped
    assert [s.shape for s in strips] == [(2, 16)] * 3
    assert_array_equal(strips[1][0], np.arange(16, 32))
    y = np.repeat(np.arange(3), 10)
    train, test = stratified_split(y, 0.3, 0)
    assert len(np.intersect1d(train, test)) == 0 and len(train) + len(test) == 30
    assert np.bincount(y[test]).tolist() == [3, 3, 3]
    with pytest.raises(ValueError, match="variant must be 'R' or 'C', got 'X'"):
        APFed("X")


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["R", "C"])
def test_apfed_beats_single_view_on_average(variant):
    """Mean over 5 seeds, digits 2-1 (top half active), 100 epochs."""
    gains = []
    for seed in range(5):
        d = digits_views(m=2, active=0, seed=seed)
        (xa, xp, y), (ta, _, ty) = d["train"], d["test"]
        single = SingleVL(seed=seed).fit(xa, y, epochs=100).score(ta, ty)
        gains.append(APFed(variant, seed=seed).fit(xa, y, xp, epochs=100).score(ta, ty) - single)
    assert np.mean(gains) > 0, gains
