"""The maths of one HyFDCA round as pure functions, for research code that studies or
changes the update rule outside the engines (``benchmarks/dual_momentum_probe.py``).
Symbols as in docs/algorithm.md sections 3-4; the engines call the same functions.

* :func:`local_dual_method`: a client's LocalDualMethod pass (an SDCA epoch for one
  client holding everything, sigma = rho = 1, H = N);
* :func:`correction_factors`: rho_i, the scale of a holder's local margin correction;
* :func:`aggregation_weights`: the holder weights p_i^k of the aggregated update;
* :func:`line_search_step`: the exact step g* on the dual for the quadratic-conjugate
  losses, from the secure sums S1-S3 (S4, S5).
"""

from hyfdca._round import (aggregation_weights, correction_factors, line_search_step,
                           local_dual_method)

__all__ = ["aggregation_weights", "correction_factors", "line_search_step",
           "local_dual_method"]
