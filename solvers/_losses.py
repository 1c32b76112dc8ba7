"""Convex losses, their conjugates and the SDCA coordinate step (docs/algorithm.md
section 1).

Every loss is a function of the margin ``z = x_i . w`` and the label ``y``. The dual
variable ``alpha_i`` enters the dual through ``-l*(-alpha_i)``; for the classification
losses it is written with ``beta = alpha_i * y_i``, which must lie in the loss's domain
(``[0, 1]`` for hinge, smoothed hinge and logistic, ``[0, inf)`` for squared hinge).

Coordinate step. Given the current ``alpha_i``, the margin ``z`` and the curvature
``s = sigma * q_i / (lam N)``, the step ``delta`` maximises::

    -l*(-(alpha_i + delta)) - z delta - (s / 2) delta^2

=============== ============================ ======================================
loss            l(z)                         -l*(-alpha)  (beta = alpha y)
=============== ============================ ======================================
hinge           max(0, 1 - yz)               beta,                 beta in [0, 1]
smoothed hinge  0 if yz >= 1;                beta - g beta^2 / 2,  beta in [0, 1]
                1 - yz - g/2 if yz <= 1 - g;
                (1 - yz)^2 / (2g) otherwise
squared hinge   max(0, 1 - yz)^2             beta - beta^2 / 4,    beta >= 0
logistic        log(1 + exp(-yz))            -beta log beta - (1-beta) log(1-beta)
squared         (z - y)^2 / 2                alpha y - alpha^2 / 2
=============== ============================ ======================================

The functions are Numba-compiled scalars so that every kernel (centralized and
federated) shares one definition. Losses are passed to kernels as integer codes.
"""

import math

import numpy as np
from numba import njit

HINGE = 0
SMOOTHED_HINGE = 1
SQUARED_HINGE = 2
LOGISTIC = 3
SQUARED = 4

LOSS_CODES = {
    "hinge": HINGE,
    "smoothed_hinge": SMOOTHED_HINGE,
    "squared_hinge": SQUARED_HINGE,
    "logistic": LOGISTIC,
    "squared": SQUARED,
}
CLASSIFICATION_LOSSES = ("hinge", "smoothed_hinge", "squared_hinge", "logistic")

_NEWTON_MAX_ITER = 60
_NEWTON_TOL = 1e-13


def loss_code(loss):
    """Integer code of a loss name, with an error that lists the known names."""
    try:
        return LOSS_CODES[loss]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown loss {loss!r}; expected one of {sorted(LOSS_CODES)}"
        ) from None


@njit(cache=True)
def loss_value(code, z, y, smoothing):
    """l(z) for label y."""
    if code == SQUARED:
        return 0.5 * (z - y) * (z - y)
    m = y * z
    if code == HINGE:
        return max(0.0, 1.0 - m)
    if code == SMOOTHED_HINGE:
        if m >= 1.0:
            return 0.0
        if m <= 1.0 - smoothing:
            return 1.0 - m - 0.5 * smoothing
        return (1.0 - m) * (1.0 - m) / (2.0 * smoothing)
    if code == SQUARED_HINGE:
        r = max(0.0, 1.0 - m)
        return r * r
    # logistic, computed without overflow: log(1 + exp(-m))
    if m > 0.0:
        return math.log1p(math.exp(-m))
    return -m + math.log1p(math.exp(m))


@njit(cache=True)
def loss_derivative(code, z, y, smoothing):
    """dl/dz at margin z (for hinge the subgradient -y where yz < 1, else 0)."""
    if code == SQUARED:
        return z - y
    m = y * z
    if code == HINGE:
        return -y if m < 1.0 else 0.0
    if code == SMOOTHED_HINGE:
        if m >= 1.0:
            return 0.0
        if m <= 1.0 - smoothing:
            return -y
        return -y * (1.0 - m) / smoothing
    if code == SQUARED_HINGE:
        return -2.0 * y * max(0.0, 1.0 - m)
    # logistic: -y / (1 + exp(m)), computed without overflow
    if m > 0.0:
        e = math.exp(-m)
        return -y * e / (1.0 + e)
    return -y / (1.0 + math.exp(m))


@njit(cache=True)
def neg_conjugate(code, alpha, y, smoothing):
    """-l*(-alpha): the per-sample dual term; -inf outside the domain."""
    if code == SQUARED:
        return alpha * y - 0.5 * alpha * alpha
    beta = alpha * y
    if beta < 0.0:
        return -np.inf
    if code == SQUARED_HINGE:
        return beta - 0.25 * beta * beta
    if beta > 1.0:
        return -np.inf
    if code == HINGE:
        return beta
    if code == SMOOTHED_HINGE:
        return beta - 0.5 * smoothing * beta * beta
    # logistic: binary entropy, 0 log 0 = 0
    h = 0.0
    if beta > 0.0:
        h -= beta * math.log(beta)
    if beta < 1.0:
        h -= (1.0 - beta) * math.log(1.0 - beta)
    return h


@njit(cache=True)
def _logistic_beta(beta, m, s):
    """Root of  log((1 - b) / b) - m - s (b - beta) = 0  on (0, 1).

    The left side is strictly decreasing in b, so the root is unique. Newton steps are
    kept inside a shrinking bracket; a step that would leave it is replaced by bisection.
    """
    lo = 0.0
    hi = 1.0
    b = min(max(beta, 1e-12), 1.0 - 1e-12)
    for _ in range(_NEWTON_MAX_ITER):
        f = math.log((1.0 - b) / b) - m - s * (b - beta)
        if f > 0.0:
            lo = b
        else:
            hi = b
        df = -1.0 / (b * (1.0 - b)) - s
        step = f / df
        nb = b - step
        if not (lo < nb < hi):
            nb = 0.5 * (lo + hi)
        if abs(nb - b) <= _NEWTON_TOL * max(1.0, b):
            return nb
        b = nb
    return b


@njit(cache=True)
def coordinate_step(code, alpha, z, y, s, smoothing):
    """delta maximising -l*(-(alpha + delta)) - z delta - (s/2) delta^2 (closed forms)."""
    if code == SQUARED:
        return (y - z - alpha) / (1.0 + s)
    beta = alpha * y
    m = y * z
    if code == HINGE:
        if s > 0.0:
            nb = min(max(beta + (1.0 - m) / s, 0.0), 1.0)
        else:  # an empty row: the objective is linear in beta, (1 - m) beta
            nb = 1.0 if m < 1.0 else (0.0 if m > 1.0 else beta)
    elif code == SMOOTHED_HINGE:
        nb = beta + (1.0 - m - smoothing * beta) / (s + smoothing)
        nb = min(max(nb, 0.0), 1.0)
    elif code == SQUARED_HINGE:
        nb = max((s * beta + 1.0 - m) / (s + 0.5), 0.0)
    else:
        nb = _logistic_beta(beta, m, s)
    return y * nb - alpha


@njit(cache=True)
def weighted_objective_sums(code, z, y, alpha, weight, smoothing):
    """(sum_i weight_i l(z_i), sum_i weight_i -l*(-alpha_i)).

    beta = alpha y is first projected onto the loss's domain, so that a dual value pushed
    out of it by fixed-point rounding (2^-f) does not count as infeasible.
    """
    loss = 0.0
    conj = 0.0
    for i in range(z.shape[0]):
        loss += weight[i] * loss_value(code, z[i], y[i], smoothing)
        conj += weight[i] * neg_conjugate(code, projected_dual(code, alpha[i], y[i]),
                                          y[i], smoothing)
    return loss, conj


@njit(cache=True)
def projected_dual(code, alpha, y):
    """alpha with beta = alpha y projected onto the loss's domain ([0, 1]; [0, inf) for the
    squared hinge; unconstrained for the squared loss)."""
    if code == SQUARED:
        return alpha
    beta = max(alpha * y, 0.0)
    if code != SQUARED_HINGE:
        beta = min(beta, 1.0)
    return beta * y
