"""FedAvg for hybrid federated learning as the HyFDCA paper defines it (its section 2), and
HyFEM restricted to linear models.

FedAvg. Each available client k takes H_k = max(1, round(iic |I_k|)) SGD steps (batch size
one, samples drawn uniformly with replacement, step a / (b + t) with t = round H_k + step)
on its own block, starting from the server model on its features J_k:

    w_k <- w_k - eta_t (l'(x_i^k . w_k) x_i^k + lam w_k)

then the server averages the client models where they overlap, weighting client k by
|I_k| (McMahan et al.): w_j = sum_k |I_k| w_k[j] / sum_k |I_k| over the present clients
holding feature j; features held only by absent clients keep their value. The margin
x_i^k . w_k sees only the client's features: the naive lift the paper calls FedAvg.

HyFEM-linear (docs/baselines.md, section HyFEM (linear): HyFEM with identity extractors and
a linear classifier, so the matching Pi_m is the feature selector P_m): the same local SGD
with the matching regulariser (mu/2) ||w_k - P_k w_0||^2 added to each client's objective,
clients weighted p_m = 1/M in the server's entrywise average.

One round trip per round: the server sends w on J_k, the client returns w_k.
"""

import time

import numpy as np

from baselines._base import ConvexBaseline
from solvers import check_positive
from baselines._local_sgd import local_sgd
from baselines._server_average import add_weighted, divide_covered
from feddata import local_work


class FedAvg(ConvexBaseline):
    """FedAvg on a FederatedDataset (see the module docstring).

    Parameters
    ----------
    dataset : FederatedDataset
    loss, lam, smoothing : the L2-regularised problem, as for HyFDCA
    iic : float, default=0.1
        Inner-iterations constant: H_k = max(1, round(iic |I_k|)) local steps.
    a, b : float
        Step size a / (b + t); a (lam + mu) / b < 1 is required (each step shrinks w).
    participation, fraction, seed : as for HyFDCA
    """

    name = "FedAvg"
    mu = 0.0

    def __init__(self, dataset, *, iic=0.1, a=1.0, b=10.0, **kwargs):
        super().__init__(dataset, **kwargs)
        for name, value in (("iic", iic), ("a", a), ("b", b)):
            check_positive(value, name)
        if a * (self.lam + self.mu) / b >= 1.0:
            raise ValueError(f"step too large: a (lam + mu) / b = "
                             f"{a * (self.lam + self.mu) / b:.3g} must be < 1")
        self.iic, self.a, self.b = float(iic), float(a), float(b)
        self.H = [max(1, int(round(iic * blk.X.shape[0]))) for blk in dataset.blocks]

    def _weight(self, k):
        return float(self.dataset.blocks[k].X.shape[0])

    @staticmethod
    def _add_client(total, weight, feature_ids, w_k, c_k):
        """total[J_k] += c_k w_k, weight[J_k] += c_k (a Numba kernel)."""
        add_weighted(total, weight, feature_ids, w_k, c_k)

    def _divide_covered(self, total, weight):
        """w_j = total_j / weight_j where some present client holds j (a Numba kernel)."""
        divide_covered(self.w, total, weight)

    def _round(self, available):
        total = np.zeros(self.dataset.n_features)
        weight = np.zeros(self.dataset.n_features)
        slowest, slowest_ops, traffic = 0.0, 0, 0
        for k in available:
            block, H = self.dataset.blocks[k], self.H[k]
            X, J = block.X, block.feature_ids
            order = self.rng(3, int(k), self.round).integers(0, X.shape[0], size=H)
            start = time.perf_counter()
            w_k = local_sgd(X.data, X.indices, X.indptr, block.y, self.w[J], order,
                            self.a, self.b, float(self.round * H), self.lam, self.mu,
                            self.code, self.smoothing)
            slowest = max(slowest, time.perf_counter() - start)
            slowest_ops = max(slowest_ops, local_work(X.indptr, order))
            self._add_client(total, weight, J, w_k, self._weight(k))
            traffic += 8 * J.size
        self._divide_covered(total, weight)
        return dict(compute_seconds=slowest, compute_ops=slowest_ops, rtc=1, bytes_up=traffic,
                    bytes_down=traffic)


class HyFEMLinear(FedAvg):
    """HyFEM with identity extractors and a linear classifier: FedAvg's local SGD plus the
    matching regulariser (mu/2) ||w_k - P_k w_0||^2, clients weighted 1/M.

    Parameters as :class:`FedAvg`, plus ``mu`` (the matching weight, > 0)."""

    name = "HyFEM"

    def __init__(self, dataset, *, mu=0.5, **kwargs):
        check_positive(mu, "mu")
        self.mu = float(mu)
        super().__init__(dataset, **kwargs)

    def _weight(self, k):
        return 1.0
