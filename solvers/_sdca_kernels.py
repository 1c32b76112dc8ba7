"""Numba kernels for SDCA over a CSR matrix (data, indices, indptr).

Shapes: N samples, d features, C one-vs-rest problems (C = 1 for binary and regression).
``W`` is (d, C), ``alpha`` and ``Y`` are (N, C), all float64 C-contiguous; kernels update
``W`` and ``alpha`` in place and keep the SDCA invariant W = X^T alpha / (lam N).
"""

import numpy as np
from numba import njit

from solvers._losses import coordinate_step, loss_value, neg_conjugate


@njit(cache=True)
def sdca_pass(data, indices, indptr, Y, alpha, W, sq_norms, order, code, lam_n, sigma,
              smoothing):
    """Coordinate steps at the samples listed in ``order``, in that order.

    For each sample i: z = x_i . w_c, s = sigma q_i / (lam N),
    delta = coordinate_step(...), alpha_ic += delta, w_c += delta x_i / (lam N).
    """
    n_classes = W.shape[1]
    z = np.empty(n_classes)
    delta = np.empty(n_classes)
    for t in range(order.shape[0]):
        i = order[t]
        start = indptr[i]
        end = indptr[i + 1]
        for c in range(n_classes):
            z[c] = 0.0
        for p in range(start, end):
            j = indices[p]
            x = data[p]
            for c in range(n_classes):
                z[c] += x * W[j, c]
        s = sigma * sq_norms[i] / lam_n
        changed = False
        for c in range(n_classes):
            d = coordinate_step(code, alpha[i, c], z[c], Y[i, c], s, smoothing)
            delta[c] = d
            if d != 0.0:
                alpha[i, c] += d
                changed = True
        if not changed:
            continue
        for c in range(n_classes):
            delta[c] /= lam_n
        for p in range(start, end):
            j = indices[p]
            x = data[p]
            for c in range(n_classes):
                W[j, c] += x * delta[c]


@njit(cache=True)
def objective_sums(data, indices, indptr, Y, alpha, W, code, smoothing):
    """Per class: sum_i l(x_i . w_c) and sum_i -l*(-alpha_ic) (shape (2, C))."""
    n_samples = indptr.shape[0] - 1
    n_classes = W.shape[1]
    out = np.zeros((2, n_classes))
    z = np.empty(n_classes)
    for i in range(n_samples):
        for c in range(n_classes):
            z[c] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            x = data[p]
            for c in range(n_classes):
                z[c] += x * W[j, c]
        for c in range(n_classes):
            out[0, c] += loss_value(code, z[c], Y[i, c], smoothing)
            out[1, c] += neg_conjugate(code, alpha[i, c], Y[i, c], smoothing)
    return out


@njit(cache=True)
def row_sq_norms(data, indptr):
    """q_i = ||x_i||^2 for every row of a CSR matrix."""
    n_rows = indptr.shape[0] - 1
    out = np.zeros(n_rows)
    for i in range(n_rows):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            acc += data[p] * data[p]
        out[i] = acc
    return out
