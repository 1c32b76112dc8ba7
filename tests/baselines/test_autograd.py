"""The autograd: every op against central finite differences, the Bures-Wasserstein distance
against SciPy's sqrtm, optimisers against hand-computed steps, seeded reproducibility, and a
digits MLP against scikit-learn's MLPClassifier."""

import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.special
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

import baselines.autograd as ag
from baselines.autograd import MLP, SGD, Adam, Linear, Parameter, Tensor

FAST = settings(max_examples=25, deadline=None)
H = 1e-6  # central-difference step: truncation O(H^2), round-off O(1e-16 / H)


def _numeric_gradients(f, arrays, upstream):
    """d/dx_k sum(upstream * f(x)) by central differences, entry by entry."""
    def value(xs):
        return float(np.sum(upstream * f(*[Tensor(x) for x in xs]).data))

    grads = []
    for k, a in enumerate(arrays):
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            plus, minus = [x.copy() for x in arrays], [x.copy() for x in arrays]
            plus[k][idx] += H
            minus[k][idx] -= H
            g[idx] = (value(plus) - value(minus)) / (2 * H)
        grads.append(g)
    return grads


def check_gradients(f, *arrays, seed=0):
    """Back-propagate a random upstream gradient through f and compare with finite differences."""
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    tensors = [Tensor(a, requires_grad=True) for a in arrays]
    out = f(*tensors)
    upstream = np.random.default_rng(seed).normal(size=out.shape)
    out.backward(upstream)
    for t, numeric in zip(tensors, _numeric_gradients(f, arrays, upstream)):
        assert t.grad.shape == t.shape
        assert_allclose(t.grad, numeric, rtol=1e-6, atol=1e-6)


def arrays(shape, low=-2.0, high=2.0):
    return hnp.arrays(np.float64, shape, elements=st.floats(low, high))


SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


def _away_from_zero(x):
    """Move entries off the kink at 0 by more than the finite-difference step."""
    return np.where(np.abs(x) < 0.05, 0.5, x)


# --- elementwise and broadcasting -----------------------------------------------------------------

UNARY = {
    "neg": (lambda x: -x, lambda x: x),
    "exp": (lambda x: x.exp(), lambda x: x),
    "log": (lambda x: x.log(), lambda x: np.abs(x) + 0.5),
    "sqrt": (lambda x: x.sqrt(), lambda x: np.abs(x) + 0.5),
    "pow3": (lambda x: x**3, lambda x: x),
    "pow-1.5": (lambda x: x**-1.5, lambda x: np.abs(x) + 0.5),
    "tanh": (lambda x: x.tanh(), lambda x: x),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: x),
    "relu": (lambda x: x.relu(), _away_from_zero),
    "leaky_relu": (lambda x: x.leaky_relu(0.1), _away_from_zero),
    "rdiv": (lambda x: 2.0 / x, lambda x: np.abs(x) + 0.5),
    "rsub": (lambda x: 1.0 - x, lambda x: x),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@FAST
@given(data=st.data())
def test_unary_gradients(name, data):
    op, domain = UNARY[name]
    check_gradients(op, domain(data.draw(arrays(data.draw(SHAPES)))))


BINARY = {
    "add": (lambda a, b: a + b, lambda b: b),
    "sub": (lambda a, b: a - b, lambda b: b),
    "mul": (lambda a, b: a * b, lambda b: b),
    "div": (lambda a, b: a / b, lambda b: np.abs(b) + 0.5),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@FAST
@given(data=st.data())
def test_binary_gradients_with_broadcasting(name, data):
    op, domain = BINARY[name]
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    a, b = (data.draw(arrays(s)) for s in shapes.input_shapes)
    check_gradients(op, a, domain(b))


@pytest.mark.parametrize(
    "shape_a, shape_b", [((3, 1), (1, 4)), ((5,), (2, 5)), ((2, 1, 3), (4, 1))]
)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_named_broadcasting_cases(name, shape_a, shape_b):
    op, domain = BINARY[name]
    rng = np.random.default_rng(1)
    check_gradients(op, rng.normal(size=shape_a), domain(rng.normal(size=shape_b)))


def test_broadcast_gradient_is_summed_over_the_broadcast_axes():
    a = Tensor(np.ones((3, 1)), requires_grad=True)
    b = Tensor(np.ones((1, 4)), requires_grad=True)
    (a * b).sum().backward()
    assert_array_equal(a.grad, np.full((3, 1), 4.0))
    assert_array_equal(b.grad, np.full((1, 4), 3.0))


# --- linear algebra, reductions, shapes -----------------------------------------------------------


@FAST
@given(
    nkm=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4)),
    batch=st.sampled_from([(), (2,), (2, 1)]),
    data=st.data(),
)
def test_matmul_gradients(nkm, batch, data):
    """Batched (leading axes broadcast: (2, 1, n, k) @ (3, k, m)) and plain matrices."""
    n, k, m = nkm
    a = data.draw(arrays(batch + (n, k)))
    b = data.draw(arrays((3,) * (len(batch) == 2) + (k, m)))
    check_gradients(lambda x, y: x @ y, a, b)


@pytest.mark.parametrize("shape_a, shape_b", [((4,), (4, 3)), ((2, 4), (4,)), ((4,), (4,))])
def test_matmul_with_vectors(shape_a, shape_b):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=shape_a), rng.normal(size=shape_b)
    assert (Tensor(a) @ Tensor(b)).shape == np.shape(a @ b)   # () for two vectors
    assert_allclose((Tensor(a) @ Tensor(b)).data, a @ b)
    check_gradients(lambda x, y: x @ y, a, b)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
@FAST
@given(data=st.data())
def test_reduction_gradients(reduction, data):
    x = data.draw(arrays(data.draw(SHAPES)))
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1) | st.just(tuple(range(x.ndim))))
    keepdims = data.draw(st.booleans())
    op = lambda t: getattr(t, reduction)(axis=axis, keepdims=keepdims)  # noqa: E731
    assert_allclose(op(Tensor(x)).data, getattr(np, reduction)(x, axis=axis, keepdims=keepdims))
    check_gradients(op, x)


@FAST
@given(data=st.data())
def test_reshape_and_transpose_gradients(data):
    x = data.draw(arrays(data.draw(SHAPES)))
    perm = data.draw(st.permutations(range(x.ndim)))
    negative = [data.draw(st.sampled_from([a, a - x.ndim])) for a in perm]  # -1 is the last
    check_gradients(lambda t: t.reshape(-1, 1) * 2.0, x)
    check_gradients(lambda t: t.transpose(*perm), x)
    assert_allclose(Tensor(x).transpose(*negative).data, x.transpose(negative))
    check_gradients(lambda t: t.transpose(*negative), x)
    check_gradients(lambda t: t.T, x)


@FAST
@given(data=st.data(), axis=st.integers(0, 1))
def test_concat_gradients(data, axis):
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    parts = [data.draw(arrays((s, 2) if axis == 0 else (2, s))) for s in sizes]
    check_gradients(lambda *ts: ag.concat(ts, axis=axis) ** 2, *parts)


@FAST
@given(data=st.data())
def test_integer_array_indexing_with_repeated_indices(data):
    x = data.draw(arrays((4, 3)))
    rows = np.array(data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=8)))
    check_gradients(lambda t: t[rows], x)
    check_gradients(lambda t: t[rows, rows % 3], x)
    check_gradients(lambda t: t[1:, ::2], x)


def test_repeated_index_accumulates_gradient():
    x = Tensor(np.arange(3.0), requires_grad=True)
    x[np.array([0, 0, 2, 0])].sum().backward()
    assert_array_equal(x.grad, [3.0, 0.0, 1.0])


# --- softmax family and losses --------------------------------------------------------------------

LOGITS = hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=4)


@FAST
@given(data=st.data())
def test_softmax_family_gradients(data):
    x = data.draw(arrays(data.draw(LOGITS), -5.0, 5.0))
    check_gradients(lambda t: ag.log_softmax(t, axis=1), x)
    check_gradients(lambda t: ag.softmax(t, axis=0), x)
    check_gradients(lambda t: ag.logsumexp(t, axis=1), x)
    assert_allclose(ag.log_softmax(Tensor(x)).data, scipy.special.log_softmax(x, axis=-1))


def test_log_softmax_and_cross_entropy_are_stable_for_huge_logits():
    z = np.array([[1000.0, 0.0, -1000.0], [-800.0, 800.0, 0.0]])
    assert_allclose(ag.logsumexp(Tensor(z)).data, scipy.special.logsumexp(z, axis=1))
    loss = ag.cross_entropy(Tensor(z, requires_grad=True), np.array([2, 1]))
    assert_allclose(loss.data, 1000.0)
    loss.backward()


@FAST
@given(data=st.data())
def test_cross_entropy_value_and_gradient(data):
    n, c = data.draw(st.integers(1, 5)), data.draw(st.integers(2, 4))
    z = data.draw(arrays((n, c), -5.0, 5.0))
    y = np.array(data.draw(st.lists(st.integers(0, c - 1), min_size=n, max_size=n)))
    expected = -np.mean(scipy.special.log_softmax(z, axis=1)[np.arange(n), y])
    assert_allclose(ag.cross_entropy(Tensor(z), y).data, expected, rtol=1e-12)
    check_gradients(lambda t: ag.cross_entropy(t, y), z)


def test_cross_entropy_rejects_bad_targets():
    z = Tensor(np.zeros((2, 3)))
    with pytest.raises(TypeError, match="integer"):
        ag.cross_entropy(z, np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        ag.cross_entropy(z, np.array([0, 3]))


@FAST
@given(data=st.data())
def test_kl_divergence_on_log_probabilities(data):
    shape = data.draw(LOGITS)
    log_p = scipy.special.log_softmax(data.draw(arrays(shape)), axis=-1)
    log_q = scipy.special.log_softmax(data.draw(arrays(shape)), axis=-1)
    expected = np.mean(np.sum(np.exp(log_p) * (log_p - log_q), axis=-1))
    assert_allclose(ag.kl_div(Tensor(log_p), Tensor(log_q)).data, expected, rtol=1e-10, atol=1e-14)
    check_gradients(lambda a, b: ag.kl_div(ag.log_softmax(a), ag.log_softmax(b)), log_p, log_q)


@FAST
@given(data=st.data())
def test_mse_and_cosine_similarity(data):
    shape = data.draw(LOGITS)
    a, b = data.draw(arrays(shape)) + 3.0, data.draw(arrays(shape)) - 3.0  # rows far from 0
    assert_allclose(ag.mse(Tensor(a), Tensor(b)).data, np.mean((a - b) ** 2))
    cos = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert_allclose(ag.cosine_similarity(Tensor(a), Tensor(b)).data, cos, rtol=1e-10)
    check_gradients(ag.mse, a, b)
    check_gradients(ag.cosine_similarity, a, b)


def test_cosine_gradient_is_orthogonal_to_its_row():
    rng = np.random.default_rng(3)
    a = Tensor(rng.normal(size=(5, 4)), requires_grad=True)
    ag.cosine_similarity(a, Tensor(rng.normal(size=(5, 4)))).sum().backward()
    assert_allclose(np.sum(a.grad * a.data, axis=1), 0.0, atol=1e-12)


# --- Bures-Wasserstein ----------------------------------------------------------------------------


def _w2_scipy(m1, s1, m2, s2):
    """||m1 - m2||^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2) with scipy's sqrtm."""
    root = scipy.linalg.sqrtm(s1)
    cross = scipy.linalg.sqrtm(root @ s2 @ root)
    return np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2 * cross).real


@FAST
@given(k=st.integers(1, 5), data=st.data())
def test_bures_wasserstein_diag_matches_sqrtm(k, data):
    m1, m2 = data.draw(arrays((k,))), data.draw(arrays((k,)))
    s1, s2 = data.draw(arrays((k,), 0.1, 3.0)), data.draw(arrays((k,), 0.1, 3.0))
    value = ag.bures_wasserstein_diag(Tensor(m1), Tensor(s1), Tensor(m2), Tensor(s2)).data
    assert_allclose(value, _w2_scipy(m1, np.diag(s1**2), m2, np.diag(s2**2)), rtol=1e-9, atol=1e-9)
    check_gradients(ag.bures_wasserstein_diag, m1, s1, m2, s2)


@FAST
@given(k=st.integers(1, 4), extra=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       seed=st.integers(0, 2**32 - 1))
def test_bures_wasserstein_full_matches_sqrtm(k, extra, seed):
    """Factors with r >= k rows: full-rank covariances, where sqrtm is reliable."""
    rng = np.random.default_rng(seed)
    r1, r2 = k + extra[0], k + extra[1]
    m1, m2 = rng.normal(size=k), rng.normal(size=k)
    a, b = rng.normal(size=(r1, k)), rng.normal(size=(r2, k))
    value = ag.bures_wasserstein(Tensor(m1), Tensor(a), Tensor(m2), Tensor(b)).data
    assert_allclose(value, _w2_scipy(m1, a.T @ a, m2, b.T @ b), rtol=1e-6, atol=1e-6)
    check_gradients(ag.bures_wasserstein, m1, a, m2, b, seed=seed)


@FAST
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, 4)), seed=st.integers(0, 2**32 - 1))
def test_nuclear_norm_value_and_gradient(shape, seed):
    x = np.random.default_rng(seed).normal(size=shape)
    assert_allclose(ag.nuclear_norm(Tensor(x)).data, np.linalg.norm(x, "nuc"), rtol=1e-12)
    check_gradients(ag.nuclear_norm, x, seed=seed)


def test_bures_wasserstein_of_samples_against_identity_anchor():
    """FLIC's term: empirical N(mean Z, cov Z) against the anchor N(v, I)."""
    rng = np.random.default_rng(4)
    z, v = rng.normal(size=(6, 3)) * 2.0 + 1.0, rng.normal(size=3)
    zt = Tensor(z, requires_grad=True)
    mean = zt.mean(axis=0)
    w2 = ag.bures_wasserstein(mean, (zt - mean) / np.sqrt(5.0), Tensor(v), Tensor(np.eye(3)))
    assert_allclose(w2.data, _w2_scipy(z.mean(0), np.cov(z, rowvar=False), v, np.eye(3)), rtol=1e-8)
    check_gradients(
        lambda t: ag.bures_wasserstein(t.mean(axis=0), (t - t.mean(axis=0)) / np.sqrt(5.0),
                                       Tensor(v), Tensor(np.eye(3))), z)


def test_bures_wasserstein_with_fewer_samples_than_dimensions():
    """Rank-deficient covariances (2 samples in 3-d), against an eigh-based PSD square root."""
    def psd_sqrt(s):
        values, vectors = np.linalg.eigh(s)
        return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T

    rng = np.random.default_rng(8)
    z, v = rng.normal(size=(2, 3)), rng.normal(size=3)
    cov = np.cov(z, rowvar=False)
    root = psd_sqrt(cov)
    cross = psd_sqrt(root @ root)
    expected = np.sum((z.mean(0) - v) ** 2) + np.trace(cov + np.eye(3) - 2 * cross)
    value = ag.bures_wasserstein(Tensor(z.mean(0)), Tensor(z - z.mean(0)), Tensor(v),
                                 Tensor(np.eye(3)))
    # the reference's zero eigenvalues come out as +-1e-16, and their square roots as 1e-8
    assert_allclose(value.data, expected, rtol=1e-12, atol=1e-7)
    check_gradients(
        lambda t: ag.bures_wasserstein(t.mean(axis=0), t - t.mean(axis=0), Tensor(v),
                                       Tensor(np.eye(3))), z)


def test_bures_wasserstein_is_zero_between_equal_gaussians():
    a = np.random.default_rng(5).normal(size=(4, 3))
    m = np.ones(3)
    assert abs(ag.bures_wasserstein(Tensor(m), Tensor(a), Tensor(m), Tensor(a)).item()) < 1e-10


# --- graph mechanics ------------------------------------------------------------------------------


def test_shared_subexpressions_and_a_composite():
    rng = np.random.default_rng(6)

    def f(x, w):
        h = (x @ w).tanh()
        return (h * h + h).sigmoid() / (1.0 + (x * x).sum(axis=1, keepdims=True))

    check_gradients(f, rng.normal(size=(3, 4)), rng.normal(size=(4, 2)))


def test_external_upstream_gradient_equals_end_to_end_backprop():
    """APFed's hand-off: backward the head on a detached copy, then h.backward(dL/dh)."""
    rng = np.random.default_rng(7)
    x, y = Tensor(rng.normal(size=(5, 3))), np.array([0, 1, 2, 1, 0])
    enc, head = Linear(3, 4, rng=1), Linear(4, 3, rng=2)
    ag.cross_entropy(head(enc(x).relu()), y).backward()
    expected = [p.grad.copy() for p in enc.parameters()]
    enc.zero_grad()
    h = enc(x).relu()
    received = Tensor(h.data, requires_grad=True)
    ag.cross_entropy(head(received), y).backward()
    h.backward(received.grad)
    for p, g in zip(enc.parameters(), expected):
        assert_allclose(p.grad, g, rtol=1e-12)


def test_gradients_accumulate_until_zero_grad():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    for _ in range(2):
        (x * x).sum().backward()
    assert_array_equal(x.grad, [4.0, 8.0])
    loss = (x**3).sum()
    loss.backward()
    loss.backward()  # the same graph twice: intermediate gradients are not stored on nodes
    assert_array_equal(x.grad, [4.0 + 6.0, 8.0 + 24.0])


def test_long_graph_has_no_recursion_limit():
    x = Tensor(np.ones(2), requires_grad=True)
    y = x
    for _ in range(5000):
        y = y * 1.0001
    y.sum().backward()
    assert_allclose(x.grad, 1.0001**5000)


def test_no_grad_and_detach_record_nothing():
    x = Tensor(np.ones(3), requires_grad=True)
    with ag.no_grad():
        y = x * 2.0
    assert not y.requires_grad and not x.detach().requires_grad
    assert (x * 2.0).requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_clear_errors():
    with pytest.raises(ValueError, match=r"\(2, 3\) @ \(4, 5\)"):
        Tensor(np.ones((2, 3))) @ Tensor(np.ones((4, 5)))
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(ValueError, match=r"scalar.*\(2, 3\)"):
        (x * 2.0).backward()
    with pytest.raises(ValueError, match="grad has shape"):
        (x * 2.0).backward(np.ones(3))
    with pytest.raises(FloatingPointError, match="non-finite"):
        (x * np.nan).sum().backward()
    with pytest.raises(FloatingPointError, match="non-finite"), np.errstate(divide="ignore"):
        (x - 1.0).log().sum().backward()  # log(0) = -inf
    with pytest.raises(TypeError, match="scalar exponent"):
        x ** Tensor(2.0)
    with pytest.raises(ValueError, match="unknown backend"):
        ag.set_backend("jax")


def test_cupy_backend_fails_clearly_without_cupy():
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="CuPy is not installed"):
            ag.set_backend("cupy")
        assert ag.get_backend() == "numpy"
    else:
        pytest.skip("CuPy is installed here")


def test_float64_by_default():
    assert Tensor([1, 2]).dtype == np.float64
    assert (Tensor([1.0]) * 2).dtype == np.float64
    assert Linear(2, 3, rng=0).weight.dtype == np.float64


# --- modules --------------------------------------------------------------------------------------


def test_parameter_names_and_state_dict_round_trip():
    net = MLP([4, 8, 3], rng=0)
    names = [n for n, _ in net.named_parameters()]
    assert names == ["layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"]
    other = MLP([4, 8, 3], rng=1)
    other.load_state_dict(net.state_dict())
    x = Tensor(np.random.default_rng(0).normal(size=(2, 4)))
    assert_array_equal(other(x).data, net(x).data)
    state = net.state_dict()
    state["layers.0.weight"][:] = 0.0  # a copy: the network is unchanged
    assert np.any(net.layers[0].weight.data != 0.0)
    with pytest.raises(KeyError, match="missing"):
        other.load_state_dict({"layers.0.weight": state["layers.0.weight"]})
    state["layers.0.bias"] = np.zeros(9)
    with pytest.raises(ValueError, match=r"layers.0.bias.*\(8,\).*\(9,\)"):
        other.load_state_dict(state)


@pytest.mark.parametrize("init, bound", [("he", np.sqrt(6 / 50)), ("glorot", np.sqrt(6 / 70))])
def test_linear_init_bounds(init, bound):
    w = Linear(50, 20, init=init, rng=0).weight.data
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound


def test_same_seed_same_bits():
    def train(rng):
        net = MLP([5, 7, 3], activation="tanh", rng=rng)
        opt = Adam(net.parameters(), lr=0.01)
        data = np.random.default_rng(0)
        x, y = Tensor(data.normal(size=(16, 5))), data.integers(0, 3, size=16)
        for _ in range(5):
            opt.zero_grad()
            loss = ag.cross_entropy(ag.dropout(net(x), 0.2, np.random.default_rng(1)), y)
            loss.backward()
            opt.step()
        return net.state_dict()

    first, second = train(11), train(np.random.default_rng(11))
    for name in first:
        assert_array_equal(first[name], second[name])
    assert not np.array_equal(train(12)["layers.0.weight"], first["layers.0.weight"])


def test_dropout_mask_scaling_and_gradient():
    x = Tensor(np.ones((200, 50)), requires_grad=True)
    out = ag.dropout(x, 0.25, np.random.default_rng(0))
    kept = out.data != 0
    assert_allclose(out.data[kept], 1 / 0.75)
    assert abs(kept.mean() - 0.75) < 0.02
    out.sum().backward()
    assert_array_equal(x.grad, out.data)
    assert ag.dropout(x, 0.0, np.random.default_rng(0)) is x


# --- optimisers -----------------------------------------------------------------------------------


def _linear_loss_step(opt, p, c):
    """Set p.grad = c (the gradient of c . p) and take one step."""
    opt.zero_grad()
    (Tensor(c) * p).sum().backward()
    opt.step()


def test_sgd_momentum_weight_decay_by_hand():
    p = Parameter(np.array([1.0, -2.0]))
    opt = SGD([p], lr=0.1, momentum=0.9, weight_decay=0.5)
    c = np.array([2.0, 1.0])
    # step 1: g = c + 0.5 p = [2.5, 0]; v = g; p = [1 - 0.25, -2] = [0.75, -2]
    _linear_loss_step(opt, p, c)
    assert_allclose(p.data, [0.75, -2.0], rtol=1e-15)
    # step 2: g = [2.375, 0]; v = 0.9 [2.5, 0] + g = [4.625, 0]; p = [0.75 - 0.4625, -2]
    _linear_loss_step(opt, p, c)
    assert_allclose(p.data, [0.2875, -2.0], rtol=1e-14)


def test_adam_by_hand():
    p = Parameter(np.array([1.0, -1.0]))
    opt = Adam([p], lr=0.1, betas=(0.5, 0.75), eps=1e-8)
    # step 1: m^ = g, v^ = g^2, so p -= 0.1 g / (|g| + eps)
    _linear_loss_step(opt, p, np.array([2.0, -4.0]))
    assert_allclose(p.data, [1.0 - 0.1 * 2 / (2 + 1e-8), -1.0 + 0.1 * 4 / (4 + 1e-8)], rtol=1e-15)
    # step 1 left m = 0.5 g = [1, -2], v = 0.25 g^2 = [1, 4]; step 2 with g = [1, 1]:
    # m = [1, -0.5], v = 0.75 [1, 4] + 0.25 = [1, 3.25]; m^ = m / 0.75, v^ = v / 0.4375
    before = p.data.copy()
    _linear_loss_step(opt, p, np.array([1.0, 1.0]))
    m_hat, v_hat = np.array([1.0, -0.5]) / 0.75, np.array([1.0, 3.25]) / 0.4375
    assert_allclose(p.data, before - 0.1 * m_hat / (np.sqrt(v_hat) + 1e-8), rtol=1e-14)


def test_adam_weight_decay_is_added_to_the_gradient():
    p, q = Parameter(np.array([3.0])), Parameter(np.array([3.0]))
    decayed, plain = Adam([p], lr=0.1, weight_decay=2.0), Adam([q], lr=0.1)
    for _ in range(3):
        _linear_loss_step(decayed, p, np.array([1.0]))
        plain.zero_grad()
        ((Tensor([1.0]) * q).sum() + q * q).sum().backward()  # d/dq (q + q^2) = 1 + 2q
        plain.step()
    assert_allclose(p.data, q.data, rtol=1e-15)


# --- end to end: digits MLP against scikit-learn --------------------------------------------------

HIDDEN, LR, EPOCHS, BATCH, ALPHA = 64, 1e-3, 30, 32, 1e-4


@pytest.fixture(scope="module")
def digits_split():
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=0, stratify=y
    )
    scaler = StandardScaler().fit(x_train)
    return scaler.transform(x_train), scaler.transform(x_test), y_train, y_test


def _train_autograd_mlp(x, y, seed):
    """Same objective as MLPClassifier: mean log loss + alpha/(2 n_batch) sum of squared weights."""
    rng = np.random.default_rng(seed)
    net = MLP([x.shape[1], HIDDEN, 10], activation="relu", init="glorot", rng=rng)
    opt = Adam(net.parameters(), lr=LR)
    weights = [layer.weight for layer in net.layers[::2]]
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        for start in range(0, len(x), BATCH):
            idx = order[start:start + BATCH]
            penalty = sum((w * w).sum() for w in weights) * (0.5 * ALPHA / len(idx))
            loss = ag.cross_entropy(net(Tensor(x[idx])), y[idx]) + penalty
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net


def test_digits_mlp_matches_sklearn(digits_split):
    x_train, x_test, y_train, y_test = digits_split
    net = _train_autograd_mlp(x_train, y_train, seed=0)
    with ag.no_grad():
        ours = np.mean(np.argmax(net(Tensor(x_test)).data, axis=1) == y_test)
    reference = MLPClassifier(
        hidden_layer_sizes=(HIDDEN,), activation="relu", solver="adam", learning_rate_init=LR,
        max_iter=EPOCHS, batch_size=BATCH, alpha=ALPHA, shuffle=True, random_state=0,
        tol=0.0, n_iter_no_change=EPOCHS + 1,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference.fit(x_train, y_train)
    theirs = reference.score(x_test, y_test)
    print(f"digits test accuracy: autograd MLP {ours:.4f}, sklearn MLPClassifier {theirs:.4f}")
    assert abs(ours - theirs) <= 0.02
    assert ours > 0.9
