"""Composite operations and losses, built from the Tensor primitives (plus two new primitives,
``concat`` and ``nuclear_norm``, which carry their own backward)."""

import numpy as np

from baselines.autograd._backend import get_array_module, to_numpy
from baselines.autograd._tensor import Tensor, _node


def concat(tensors, axis=0):
    """Join tensors along ``axis``; the gradient is split back at the same places."""
    tensors = tuple(tensors)
    xp = get_array_module()
    cuts = [int(c) for c in np.cumsum([t.shape[axis] for t in tensors])[:-1]]
    data = xp.concatenate([t.data for t in tensors], axis=axis)
    return _node(data, tensors, lambda g: tuple(xp.split(g, cuts, axis=axis)), "concat")


def logsumexp(x, axis=-1, keepdims=False):
    """log sum_j exp(x_j) = m + log sum_j exp(x_j - m), with m = max_j x_j held constant.

    Shifting by a constant leaves the value and the gradient (the softmax) unchanged, so m
    needs no gradient; it only keeps exp from overflowing.
    """
    m = Tensor(x.data.max(axis=axis, keepdims=True), dtype=x.dtype)
    out = (x - m).exp().sum(axis=axis, keepdims=True).log() + m
    return out if keepdims else out.sum(axis=axis)  # drops the size-1 axis


def log_softmax(x, axis=-1):
    """log softmax(x)_j = x_j - logsumexp(x)."""
    return x - logsumexp(x, axis=axis, keepdims=True)


def softmax(x, axis=-1):
    """softmax(x)_j = exp(x_j) / sum_k exp(x_k)."""
    return log_softmax(x, axis=axis).exp()


def cross_entropy(logits, targets):
    """Mean softmax cross-entropy -(1/n) sum_i log softmax(z_i)_{y_i}; ``targets`` are class ints.

    Stable for any logits: it goes through ``log_softmax`` (max-shifted log-sum-exp).
    """
    targets = to_numpy(targets)
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"cross_entropy needs logits (n, classes) and targets (n,); got {logits.shape} and "
            f"{targets.shape}"
        )
    if not np.issubdtype(targets.dtype, np.integer):
        raise TypeError(f"targets must be integer class indices, got dtype {targets.dtype}")
    if targets.size and (targets.min() < 0 or targets.max() >= logits.shape[1]):
        raise ValueError(
            f"targets must lie in [0, {logits.shape[1]}); got {targets.min()}..{targets.max()}"
        )
    xp = get_array_module()
    rows = xp.arange(len(targets))
    return -log_softmax(logits, axis=1)[rows, xp.asarray(targets)].mean()


def kl_div(log_p, log_q):
    """KL(p || q) = sum_j p_j (log p_j - log q_j), both given as LOG-probabilities.

    Summed over the last axis and averaged over the rest (a batch of rows). p is the first
    argument (the target, e.g. a teacher); gradients flow into both unless one is detached.
    """
    per_row = (log_p.exp() * (log_p - log_q)).sum(axis=-1)
    return per_row.mean()


def mse(prediction, target):
    """Mean squared error, mean over every entry of (prediction - target)**2."""
    return ((prediction - target) ** 2).mean()


def cosine_similarity(a, b, eps=1e-12):
    """Row-wise cos(a_i, b_i) = a_i . b_i / sqrt(|a_i|^2 |b_i|^2 + eps), over the last axis.

    ``eps`` only keeps zero rows finite (their similarity is 0).
    """
    dot = (a * b).sum(axis=-1)
    return dot * ((a * a).sum(axis=-1) * (b * b).sum(axis=-1) + eps) ** -0.5


def dropout(x, p, rng):
    """Inverted dropout: zero each entry with probability ``p``, scale the rest by 1/(1-p).

    The mask is drawn from the ``numpy.random.Generator`` ``rng`` (on the CPU, so the same
    seed gives the same mask under either backend).
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be in [0, 1), got {p}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if p == 0.0:
        return x
    keep = (rng.random(x.shape) >= p) / (1.0 - p)
    return x * Tensor(get_array_module().asarray(keep), dtype=x.dtype)


def nuclear_norm(x, tol=1e-8):
    """||X||_* = sum of the singular values of the matrix X.

    Gradient U V^T from the thin SVD X = U S V^T, over the singular values above ``tol``; it
    is the gradient when X has full rank and a subgradient otherwise.
    """
    if x.ndim != 2:
        raise ValueError(f"nuclear_norm needs a matrix, got shape {x.shape}")
    u, s, vt = get_array_module().linalg.svd(x.data, full_matrices=False)
    keep = s > tol
    direction = u[:, keep] @ vt[keep]
    return _node(s.sum(), (x,), lambda g: (g * direction,), "nuclear_norm")


def bures_wasserstein_diag(m1, s1, m2, s2):
    """Squared 2-Wasserstein distance between diagonal Gaussians, over the last axis.

    W^2(N(m1, diag s1^2), N(m2, diag s2^2)) = |m1 - m2|^2 + |s1 - s2|^2, with s1, s2 >= 0 the
    standard deviations. Exact: diagonal covariances commute, so the Bures term
    tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2) is sum_j (s1_j - s2_j)^2.
    """
    return ((m1 - m2) ** 2).sum(axis=-1) + ((s1 - s2) ** 2).sum(axis=-1)


def bures_wasserstein(m1, a, m2, b):
    """Squared 2-Wasserstein distance between N(m1, A^T A) and N(m2, B^T B), full covariance.

    The covariances come as factors A (r1, k) and B (r2, k): for samples Z (n, k), A is the
    centred Z / sqrt(n - 1); for a given covariance S, A = L^T with the Cholesky S = L L^T.
    With S1 = A^T A and S2 = B^T B,

        W^2 = |m1 - m2|^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2)
            = |m1 - m2|^2 + |A|_F^2 + |B|_F^2 - 2 |A B^T|_*,

    since the singular values of A B^T are those of S1^1/2 S2^1/2 (A = Q S1^1/2 with Q an
    isometry on the range of S1^1/2, likewise B). No matrix square root is needed, and the
    gradient is exact wherever A B^T has full rank (see ``nuclear_norm``).
    """
    return (
        ((m1 - m2) ** 2).sum()
        + (a * a).sum()
        + (b * b).sum()
        - 2.0 * nuclear_norm(a @ b.T)
    )
