"""Numba kernel: proximal SGD on one client's block (FedAvg, HyFEM restricted to linear
models).

Each step at sample i, with step eta_t = a / (b + t):

    w <- w - eta_t (l'(x_i . w) x_i + lam w + mu (w - anchor))

``anchor`` is the server model on the client's features (the proximal centre of HyFEM's
matching regulariser; mu = 0 is plain SGD). The kernel keeps w = s v + c anchor so that a
step costs O(nnz(x_i)), not O(d_k): s <- s (1 - eta (lam + mu)), c <- c (1 - eta (lam +
mu)) + eta mu, v <- v - (eta l' / s) x_i.
"""

import numpy as np
from numba import njit

from solvers import loss_derivative

_RESCALE_BELOW = 1e-9


@njit(cache=True)
def local_sgd(data, indices, indptr, y, anchor, order, a, b, t0, lam, mu, code, smoothing):
    """w after one SGD step per entry of ``order`` (local row ids), starting at ``anchor``;
    step t of the call uses eta = a / (b + t0 + t)."""
    v = np.zeros(anchor.shape[0])
    s = 1.0
    c = 1.0
    for t in range(order.shape[0]):
        i = order[t]
        eta = a / (b + t0 + t)
        xv = 0.0
        xa = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            xv += data[p] * v[indices[p]]
            xa += data[p] * anchor[indices[p]]
        g = loss_derivative(code, s * xv + c * xa, y[i], smoothing)
        decay = 1.0 - eta * (lam + mu)
        s *= decay
        c = c * decay + eta * mu
        if g != 0.0:
            coef = eta * g / s
            for p in range(indptr[i], indptr[i + 1]):
                v[indices[p]] -= coef * data[p]
        if s < _RESCALE_BELOW:
            v *= s
            s = 1.0
    return s * v + c * anchor
