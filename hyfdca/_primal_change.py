"""Changes of a client's primal contribution v_k = (X^k)^T alpha_k / (lam N).

A client never recomputes v_k: for every change dalpha of its copy of alpha (entries a
dual sync brought, its tentative step) it reports

    dv_k = (X^k)^T dalpha / (lam N)        (over J_k; rows with dalpha_i = 0 skipped)

and the server adds the changes into w, so a round costs O(nnz of the changed rows)
instead of O(nnz(X^k)). Both engines call these kernels, so their bits agree.
"""

from numba import njit


@njit(cache=True, inline="always")
def add_row(data, indices, start, end, change, lam_n, out):
    """out += change x / (lam N) for the row x = data[start:end] (local feature indices)."""
    step = change / lam_n
    for p in range(start, end):
        out[indices[p]] += data[p] * step


@njit(cache=True)
def rows_change(data, indices, indptr, positions, changes, lam_n, out):
    """out += sum_t changes[t] x_{positions[t]} / (lam N), rows in the given order."""
    for t in range(positions.shape[0]):
        c = changes[t]
        if c != 0.0:
            p = positions[t]
            add_row(data, indices, indptr[p], indptr[p + 1], c, lam_n, out)
