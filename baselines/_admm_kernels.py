"""Numba kernels for block-splitting ADMM: the proximal operator of each per-sample loss.

For a sample with label b and the step t = 1 / rho, the prox of f_i(y) = l(y, b) with
penalty rho (``baselines.admm`` solves the problem scaled by N: the sum of the losses)
is

    prox(v) = argmin_y  t l(y, b) + (1/2) (y - v)^2.

Squared loss l = (y - b)^2 / 2: y = (v + t b) / (1 + t). The classification losses depend
on the margin m = b y only (labels +-1, so y = b m); with m0 = b v the minimiser m is

=============== ==============================================================
hinge           m0 if m0 >= 1;  m0 + t if m0 <= 1 - t;  1 otherwise
smoothed hinge  m0 if m0 >= 1;  m0 + t if m0 <= 1 - g - t;  (g m0 + t) / (g + t)
squared hinge   m0 if m0 >= 1;  (m0 + 2t) / (1 + 2t) otherwise
logistic        root of  m - m0 - t / (1 + e^m) = 0  on [m0, m0 + t]: safeguarded
                Newton (the left side is increasing, slope 1 + t s(m) s(-m))
=============== ==============================================================
"""

import math

from numba import njit

from solvers import HINGE, LOGISTIC, SMOOTHED_HINGE, SQUARED, SQUARED_HINGE

_NEWTON_MAX_ITER = 50
_NEWTON_TOL = 1e-14


@njit(cache=True)
def _logistic_margin(m0, t):
    """Root of m - m0 - t / (1 + exp(m)) = 0, bracketed by [m0, m0 + t]."""
    lo = m0
    hi = m0 + t
    m = m0
    for _ in range(_NEWTON_MAX_ITER):
        if m > 0.0:
            e = math.exp(-m)
            sig_neg = e / (1.0 + e)          # 1 / (1 + e^m)
        else:
            sig_neg = 1.0 / (1.0 + math.exp(m))
        h = m - m0 - t * sig_neg
        if h > 0.0:
            hi = m
        else:
            lo = m
        slope = 1.0 + t * sig_neg * (1.0 - sig_neg)
        nm = m - h / slope
        if not (lo <= nm <= hi):
            nm = 0.5 * (lo + hi)
        if abs(nm - m) <= _NEWTON_TOL * max(1.0, abs(m)):
            return nm
        m = nm
    return m


@njit(cache=True)
def loss_prox(code, v, b, t, smoothing):
    """argmin_y  t l(y, b) + (y - v)^2 / 2 (see the module docstring)."""
    if code == SQUARED:
        return (v + t * b) / (1.0 + t)
    m0 = b * v
    if m0 >= 1.0 and code != LOGISTIC:
        return v
    if code == HINGE:
        m = m0 + t if m0 <= 1.0 - t else 1.0
    elif code == SMOOTHED_HINGE:
        if m0 <= 1.0 - smoothing - t:
            m = m0 + t
        else:
            m = (smoothing * m0 + t) / (smoothing + t)
    elif code == SQUARED_HINGE:
        m = (m0 + 2.0 * t) / (1.0 + 2.0 * t)
    else:
        m = _logistic_margin(m0, t)
    return b * m


@njit(cache=True)
def prox_losses(code, v, labels, t, smoothing, out):
    """out[i] = loss_prox(code, v[i], labels[i], t, smoothing) for every i."""
    for i in range(v.shape[0]):
        out[i] = loss_prox(code, v[i], labels[i], t, smoothing)
    return out
