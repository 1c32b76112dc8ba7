"""The certificate's own check: weak duality, D(alpha) <= P* <= P(w), holds for every
alpha and w, so a gap P - D below -(rounding) proves that a sum went wrong (a lost or
forged share, an encoding error), never that the run converged."""

import numpy as np


class CertificateError(RuntimeError):
    """A certificate that contradicts weak duality beyond fixed-point rounding."""


def rounding_allowance(primal, dual, w, *, lam, frac_bits, n_clients, max_sq_norm):
    """A bound on how far fixed-point rounding can move P - D below 0.

    Every value crosses the protocol as a multiple of 2^-f, so each of the at most K
    parts of a coordinate of w or of a margin is off by at most 2^-f: |dw_j| <= K 2^-f,
    |d(x_i . w)| <= K 2^-f (1 + ||x_i|| sqrt(d)); the losses' slopes are bounded by
    1 + |P| + |D| on the values met, and the regulariser moves by lam ||w||_1 K 2^-f.
    """
    d = w.size
    scale = 2.0 ** -frac_bits * max(n_clients, 1)
    slope = 1.0 + abs(primal) + abs(dual)
    return scale * (4.0 + np.sqrt(max_sq_norm * d) + lam * float(np.abs(w).sum())) * slope


def checked_certificate(primal, dual, w, *, lam, frac_bits, n_clients, max_sq_norm, round_):
    """(primal, dual, w) unchanged, or CertificateError when P - D < -allowance.

    A non-finite gap is returned as it is: that is divergence, which the run reports.
    """
    gap = primal - dual
    if np.isfinite(gap):
        allowance = rounding_allowance(primal, dual, w, lam=lam, frac_bits=frac_bits,
                                       n_clients=n_clients, max_sq_norm=max_sq_norm)
        if gap < -allowance:
            raise CertificateError(
                f"round {round_}: the certificate's duality gap is {gap:.6g} (primal "
                f"{primal:.6g}, dual {dual:.6g}), below -{allowance:.3g}, the most that "
                f"fixed-point rounding can explain: weak duality says P(w) >= D(alpha), "
                f"so a secure sum or an encoded value is wrong (a lost, duplicated or "
                f"forged share?); the run is not converged")
    return primal, dual, w
