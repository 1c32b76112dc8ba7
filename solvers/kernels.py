"""Numba kernels for SDCA over a CSR matrix (data, indices, indptr).

Shapes: N samples, d features, C one-vs-rest problems (C = 1 for binary and regression).
``W`` is (d, C), ``alpha`` and ``Y`` are (N, C), all float64 C-contiguous; kernels update
``W`` and ``alpha`` in place and keep the SDCA invariant W = X^T alpha / (lam N).
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from solvers._losses import coordinate_step, loss_value, neg_conjugate
from solvers._random import splitmix64


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


# --------------------------------------------------------------------------- binary hinge
#
# Fast paths for one binary hinge problem: 1-D ``w`` (d,), ``alpha`` and ``y`` (N,), a
# scalar margin accumulator and no class loop. ``error_model="numpy"`` drops Python's
# zero-division checks: an empty row (q_i = 0) gives s = 0 and the step (1 - m) / s = inf,
# which the clip turns into the exact maximiser beta = 1.
#
# Visiting rows in random order is bound by memory latency (every row starts two cache
# misses, one in ``data`` and one in ``indices``), so the kernels prefetch the row visited
# ``_ROW_AHEAD`` steps later and the entries of w it reads ``_W_AHEAD`` steps later (the
# order is known in advance). Prefetches are hints: they change no result.

_ROW_AHEAD = 4
_W_AHEAD = 2
_PG_ZERO = 1e-12   # liblinear's threshold below which a projected gradient is no step
_U32 = np.uint64(32)


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Hint the CPU to load the cache line of ``arr[idx]`` (llvm.prefetch, read, L1)."""
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(ary.data, [args[1]])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        name = "llvm.prefetch.p0i8"
        fn = builder.module.globals.get(name) or ir.Function(builder.module, fnty, name=name)
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@njit(cache=True, inline="always")
def _prefetch_row(data, indices, indptr, i):
    start = indptr[i]
    end = indptr[i + 1]
    if end > start:
        _prefetch(data, start)
        _prefetch(indices, start)
        _prefetch(data, end - 1)
        _prefetch(indices, end - 1)


@njit(cache=True, inline="always")
def _prefetch_w(indices, indptr, w, i):
    for p in range(indptr[i], indptr[i + 1]):
        _prefetch(w, indices[p])


@njit(cache=True, inline="always")
def _prefetch_ahead(data, indices, indptr, w, order, t, n):
    """Prefetch the row visited ``_ROW_AHEAD`` steps after step t of ``order[:n]`` and the
    entries of w read ``_W_AHEAD`` steps after it."""
    if t + _ROW_AHEAD < n:
        _prefetch_row(data, indices, indptr, order[t + _ROW_AHEAD])
    if t + _W_AHEAD < n:
        _prefetch_w(indices, indptr, w, order[t + _W_AHEAD])


@njit(cache=True, error_model="numpy")
def hinge_pass_binary(data, indices, indptr, y, alpha, w, sq_norms, order, lam_n, sigma):
    """``sdca_pass`` for one binary hinge problem, with 1-D ``y``, ``alpha`` and ``w``.

    Takes the same floating-point operations in the same order as ``sdca_pass`` with
    ``code = HINGE`` and one class, so the iterates are identical bit for bit.
    """
    n_steps = order.shape[0]
    for t in range(n_steps):
        _prefetch_ahead(data, indices, indptr, w, order, t, n_steps)
        i = order[t]
        start = indptr[i]
        end = indptr[i + 1]
        z = 0.0
        for p in range(start, end):
            z += data[p] * w[indices[p]]
        s = sigma * sq_norms[i] / lam_n
        yi = y[i]
        a = alpha[i]
        nb = a * yi + (1.0 - yi * z) / s
        nb = min(max(nb, 0.0), 1.0)
        d = yi * nb - a
        if d == 0.0:
            continue
        alpha[i] = a + d
        d = d / lam_n
        for p in range(start, end):
            w[indices[p]] += data[p] * d


@njit(cache=True, inline="always")
def _row_dot4(data, indices, w, start, end):
    """sum_p data[p] w[indices[p]] over [start, end), in four interleaved partial sums."""
    z0 = 0.0
    z1 = 0.0
    z2 = 0.0
    z3 = 0.0
    p = start
    while p + 3 < end:
        z0 += data[p] * w[indices[p]]
        z1 += data[p + 1] * w[indices[p + 1]]
        z2 += data[p + 2] * w[indices[p + 2]]
        z3 += data[p + 3] * w[indices[p + 3]]
        p += 4
    while p < end:
        z0 += data[p] * w[indices[p]]
        p += 1
    return (z0 + z1) + (z2 + z3)


@njit(cache=True, error_model="numpy")
def hinge_steps(sq_norms, lam_n, sigma):
    """1 / s_i = lam N / (sigma q_i) per sample; inf for an empty row (beta goes to 1)."""
    out = np.empty_like(sq_norms)
    for i in range(sq_norms.shape[0]):
        out[i] = lam_n / (sigma * sq_norms[i])
    return out


@njit(cache=True)
def shuffle_prefix(index, size, state):
    """Fisher-Yates shuffle of ``index[:size]`` in place, drawing from ``state``.

    Bounded draws use Lemire's multiply-shift on the top 32 bits (bias < size / 2^32).
    """
    for k in range(size - 1):
        bound = np.uint64(size - k)
        j = k + np.int64(((splitmix64(state) >> _U32) * bound) >> _U32)
        tmp = index[k]
        index[k] = index[j]
        index[j] = tmp


@njit(cache=True, error_model="numpy")
def hinge_shrinking_epochs(data, indices, indptr, y, alpha, w, step, lam_n, index, bounds,
                           active, rng_state, n_epochs, eps):
    """Up to ``n_epochs`` passes of binary hinge SDCA with liblinear's shrinking.

    Hsieh et al. (2008), as in liblinear's ``solve_l2r_l1l2_svc``: each pass shuffles the
    active prefix ``index[:active[0]]`` and visits it; with beta = alpha_i y_i in [0, 1] and
    gradient G = y_i z - 1, a sample at beta = 0 with G > ``bounds[0]`` (the previous pass's
    largest projected gradient) or at beta = 1 with G < ``bounds[1]`` (the smallest) is
    moved behind the prefix and skipped. When the projected gradients of a pass span at most
    ``eps``, the active set is reset to all samples (unshrinking); if it already was, the
    pass reports convergence. The step is the SDCA hinge step
    beta <- clip(beta - G / s_i, 0, 1) with ``step[i]`` = 1 / s_i = lam N / (sigma q_i)
    (see :func:`hinge_steps`); alpha_i is set to y_i beta exactly, so bound tests are exact.

    The margin is summed in four interleaved partial sums (positions of the row modulo 4),
    which shortens the chain of dependent additions; the rounding therefore differs
    from ``sdca_pass``'s, and so do the iterates, by rounding.

    ``index`` (N,), ``bounds`` (2,), ``active`` (1,) and ``rng_state`` (1,, uint64) carry the
    state between calls. Returns (passes done, converged).
    """
    n = index.shape[0]
    inf = np.inf
    inv_lam_n = 1.0 / lam_n
    for epoch in range(n_epochs):
        size = active[0]
        shuffle_prefix(index, size, rng_state)
        pg_max_old = bounds[0]
        pg_min_old = bounds[1]
        pg_max = -inf
        pg_min = inf
        t = 0
        while t < size:
            _prefetch_ahead(data, indices, indptr, w, index, t, size)
            i = index[t]
            start = indptr[i]
            end = indptr[i + 1]
            z = _row_dot4(data, indices, w, start, end)
            yi = y[i]
            a = alpha[i]
            beta = a * yi
            g = yi * z - 1.0
            pg = g
            if beta == 0.0:
                if g > pg_max_old:
                    size -= 1
                    index[t] = index[size]
                    index[size] = i
                    continue
                if g > 0.0:
                    pg = 0.0
            elif beta == 1.0:
                if g < pg_min_old:
                    size -= 1
                    index[t] = index[size]
                    index[size] = i
                    continue
                if g < 0.0:
                    pg = 0.0
            pg_max = max(pg_max, pg)
            pg_min = min(pg_min, pg)
            t += 1
            if abs(pg) <= _PG_ZERO:
                continue
            nb = min(max(beta - g * step[i], 0.0), 1.0)
            a_new = yi * nb
            d = (a_new - a) * inv_lam_n
            alpha[i] = a_new
            for p in range(start, end):
                w[indices[p]] += data[p] * d
        if pg_max - pg_min <= eps:
            active[0] = n
            bounds[0] = inf
            bounds[1] = -inf
            if size == n:
                return epoch + 1, True
            continue
        active[0] = size
        bounds[0] = pg_max if pg_max > 0.0 else inf
        bounds[1] = pg_min if pg_min < 0.0 else -inf
    return n_epochs, False


@njit(cache=True)
def column_counts(indices, n_features):
    """Number of non-zeros in each column of a CSR matrix."""
    out = np.zeros(n_features, dtype=np.int64)
    for p in range(indices.shape[0]):
        out[indices[p]] += 1
    return out


@njit(cache=True)
def renumber_columns(indices, rank):
    """``rank[indices]`` as int32: column indices renumbered by ``rank``."""
    out = np.empty(indices.shape[0], dtype=np.int32)
    for p in range(indices.shape[0]):
        out[p] = rank[indices[p]]
    return out
