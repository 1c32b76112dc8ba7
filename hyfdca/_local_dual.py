"""LocalDualMethod (design section 3, step 4; the paper's Algorithm 5) as a Numba kernel.

Client k, H drawn local samples, margins z_i = x_i . w from the SecureInnerProduct:

    u = 0 (over J_k); dalpha = 0 (over I_k)
    for each drawn i:  z~ = z_i + rho_i sigma (x_i^k . u)
                       delta = coordinate step at (alpha_i + dalpha_i, z~, s = sigma q_i/(lam N))
                       dalpha_i += delta;  u += delta x_i^k / (lam N)

q_i is the FULL squared row norm. With one client holding everything, sigma = rho = 1 and
H = N this is exactly an SDCA epoch.
"""

import numpy as np
from numba import njit

from hyfdca._primal_change import add_row
from solvers._losses import coordinate_step


@njit(cache=True)
def local_step(data, indices, start, end, u, z, rho_i, sigma, q_i, lam_n, code, alpha_i, y_i,
               smoothing):
    """One inner step at the row data[start:end]: the margin corrected by the local change
    u, the coordinate step delta, and u += delta x_i^k / (lam N). Returns delta."""
    corr = 0.0
    for p in range(start, end):
        corr += data[p] * u[indices[p]]
    z_local = z + rho_i * sigma * corr
    s = sigma * q_i / lam_n
    delta = coordinate_step(code, alpha_i, z_local, y_i, s, smoothing)
    if delta != 0.0:
        add_row(data, indices, start, end, delta, lam_n, u)
    return delta


@njit(cache=True)
def local_dual_method(data, indices, indptr, y, alpha, z, sq_norms, rho, order, code,
                      lam_n, sigma, smoothing, n_features):
    """Return (dalpha over the client's samples, u over its features)."""
    dalpha = np.zeros(y.shape[0])
    u = np.zeros(n_features)
    for t in range(order.shape[0]):
        i = order[t]
        dalpha[i] += local_step(data, indices, indptr[i], indptr[i + 1], u, z[i], rho[i],
                                sigma, sq_norms[i], lam_n, code, alpha[i] + dalpha[i], y[i],
                                smoothing)
    return dalpha, u
