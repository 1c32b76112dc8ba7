"""Server-side arithmetic of HyFDCA as pure functions (testable without the roles)."""

import numpy as np


def line_search_step(shares, w, dw, lam, gamma):
    """g* maximising D(alpha + g dalpha) over [0, 1] for losses whose dual term is
    a y - (gamma/2) a^2 on its domain (design 5c):

        D(g) = -(lam/2)||w + g dw||^2 + S1 g - gamma (S2 g + S3 g^2 / 2) + const
        g*   = clip((S1 - gamma S2 - lam w.dw) / (lam ||dw||^2 + gamma S3), 0, 1)

    with the secure sums S1 = (1/N) sum y_i dalpha_i, S2 = (1/N) sum alpha_i dalpha_i,
    S3 = (1/N) sum dalpha_i^2 (``shares``).
    """
    s1, s2, s3 = shares
    curvature = lam * float(dw @ dw) + gamma * s3
    if curvature <= 0.0:
        return 1.0
    return float(np.clip((s1 - gamma * s2 - lam * float(w @ dw)) / curvature, 0.0, 1.0))


LINE_SEARCH_GRID = np.linspace(0.0, 1.0, 33)


def grid_line_search_step(conj_gains, w, dw, lam, grid=LINE_SEARCH_GRID):
    """g maximising D(alpha + g dalpha) over ``grid`` (any loss; used for logistic, whose
    conjugate is not quadratic). ``conj_gains[j]`` is the secure sum
    (1/N) sum_i [-l*(-(alpha_i + g_j dalpha_i)) + l*(-alpha_i)]; the server adds
    -(lam/2)(||w + g_j dw||^2 - ||w||^2). D is concave in g and g = 0 is on the grid, so
    the step never lowers the dual."""
    grid = np.asarray(grid)
    reg = -0.5 * lam * (2.0 * grid * float(w @ dw) + grid**2 * float(dw @ dw))
    return float(grid[int(np.argmax(reg + np.asarray(conj_gains)))])


def quantize_step(g, step_bits):
    """(m, m / 2^step_bits): the step as the integer the server multiplies ciphertexts by."""
    m = int(round(g * (1 << step_bits)))
    return m, m / float(1 << step_bits)
