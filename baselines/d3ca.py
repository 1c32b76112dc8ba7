"""D3CA, doubly distributed dual coordinate ascent (Nathan and Klabjan 2017), on a
FederatedDataset.

Source: A. Nathan and D. Klabjan, "Optimization for Large-Scale Machine Learning with
Distributed Features and Observations", MLDM 2017, pp. 132-146, arXiv:1610.10060
(deepai.org/publication/
optimization-for-large-scale-machine-learning-with-distributed-features-and-observations).
What we could read of it (the introduction; the search tool did not return the algorithm
box) fixes the scheme: "the main idea ... is to approximately solve many smaller
subproblems (partitions) instead of solving a large one. Upon the completion of the local
optimization procedure, the primal and dual variables are aggregated ... Since each
subproblem contains only a subset of the original features, the same dual variables are
present in multiple partitions of the data. ... To ensure dual feasibility, we average
them and retrieve the primal variables" from the averaged duals. It "builds on previous
distributed dual coordinate ascent methods" (CoCoA, Jaggi et al. 2014; DisDCA, Yang
2013). The HyFDCA paper (Overman, Blum and Klabjan 2023, section 2) adds that "D3CA has no
convergence analysis and has convergence problems in practice with small regularization
constant". The formulas below are our reading, with each choice named.

One round, available blocks K_t, global duals alpha (N) and primal w (d):

1. Local subproblem (block k, samples I_k, features J_k). SDCA (Shalev-Shwartz and Zhang
   2013) on the block's own data as if it were the whole problem over its features, from
   the current alpha[I_k] and w[J_k], with the global scaling lam N (CoCoA's local
   subproblem, so that w_k = w[J_k] + X^k^T dalpha / (lam N) stays on the global map):

       for each drawn i:  z = x_i^k . w_k                        (own features only)
                          delta = coordinate step at (alpha_i, z, s = sigma ||x_i^k||^2 / (lam N))
                          alpha_i += delta;  w_k += delta x_i^k / (lam N)

   Choice: the curvature uses the LOCAL row norm ||x_i^k||^2 (the local problem's own
   SDCA step; HyFDCA uses the full norm q_i), sigma = 1 by default. H_k =
   max(1, round(iic |I_k|)) steps, rows drawn as successive seeded permutations of the
   local rows (iic = 1: one local epoch); a row with no entry in the block (possible in
   overlapping layouts) is skipped. This is the kernel
   ``solvers.kernels.sdca_pass`` run on the block.
2. Dual averaging. The copies of alpha_i held by the blocks C_i are averaged (the paper's
   "we average them"): alpha_i += gamma * (1/|C_i|) sum_{k in C_i, present} dalpha_i^k
   (absent holders contribute 0, as in HyFDCA's aggregation).
   Choice: gamma, the factor over the blocks that add updates to the same primal
   coordinate. The paper builds on CoCoA, whose safe combination is averaging (1/K over
   the K blocks sharing w); in a P x Q grid the blocks sharing a feature are the P sample
   groups, in general the holders of a feature. Default ``gamma="averaging"``:
   gamma = 1 / max_j |{k : j in J_k}| (P on a grid, K on a horizontal split, 1 on a
   vertical one); ``"adding"`` is gamma = 1 (CoCoA+ with sigma = 1, unsafe when several
   sample groups share features); or a number.
3. Primal recovery from the duals: every available block sends
   v_k = X^k^T alpha[I_k] / (lam N) over J_k (second round trip) and the server forms
   w = sum_k v_k (stale v_k of absent blocks, as in HyFDCA). Under full participation
   w = X^T alpha / (lam N) exactly.

Two round trips per round: (down alpha[I_k], w[J_k]; up dalpha_k) and (down the new
alpha[I_k]; up v_k). With one block holding everything, sigma = 1, gamma = 1 and iic = 1,
one round is one epoch of centralized SDCA over the round's permutation.

Fixed point. At convergence sum_k dalpha^k = 0 for every sample, but each block's local
step optimises against its partial margin x_i^k . w_k only, so the fixed point is not the
centralized optimum in general when features are split (vertical, hybrid); with a
horizontal split (each block sees full rows) D3CA is CoCoA and converges to it.
Measured on standardised breast cancer (569 x 30, defaults, relative loss after 300
rounds): 3x1 horizontal hinge 1e-6 (lam 0.1) / 1.6e-3 (lam 0.01); 2x2 grid hinge 0.77 /
4.3, squared 15 / 440; 1x3 vertical hinge 7.5 / 62: stalled, not diverging to inf, far
from P*. sigma = Q (the number of feature blocks per sample) reduced but did not remove
the error (1x3 hinge lam 0.01: 41).
"""

import time

import numpy as np

from baselines._base import ConvexBaseline
from solvers import check_positive, is_number
from feddata import local_work
from solvers.kernels import row_sq_norms, sdca_pass

GAMMAS = ("averaging", "adding")


class D3CA(ConvexBaseline):
    """Doubly distributed dual coordinate ascent on a FederatedDataset (see the module
    docstring).

    Parameters
    ----------
    dataset : FederatedDataset
    loss, lam, smoothing : the L2-regularised problem, as for HyFDCA
    iic : float, default=1.0
        Inner-iterations constant: H_k = max(1, round(iic |I_k|)) local SDCA steps.
    sigma : float, default=1.0
        Curvature factor of the local SDCA step (s = sigma ||x_i^k||^2 / (lam N)).
    gamma : {"averaging", "adding"} or float in (0, 1], default="averaging"
        Factor applied to the holder-averaged dual update (see the module docstring; 1
        adds the updates, more would push the dual out of the loss's domain).
    participation, fraction, seed : as for HyFDCA

    Attributes
    ----------
    alpha : ndarray (N,)
        The dual variables.
    w : ndarray (d,)
        The primal recovered from the duals, sum_k X^k^T alpha[I_k] / (lam N).
    """

    name = "D3CA"

    def __init__(self, dataset, *, iic=1.0, sigma=1.0, gamma="averaging", **kwargs):
        super().__init__(dataset, **kwargs)
        check_positive(iic, "iic")
        check_positive(sigma, "sigma")
        blocks = dataset.blocks
        if isinstance(gamma, str):
            if gamma not in GAMMAS:
                raise ValueError(f"gamma must be one of {GAMMAS} or a number in (0, 1], "
                                 f"got {gamma!r}")
            holders = np.bincount(np.concatenate([b.feature_ids for b in blocks]),
                                  minlength=dataset.n_features)
            gamma = 1.0 / holders.max() if gamma == "averaging" else 1.0
        elif not (is_number(gamma) and 0 < gamma <= 1):
            raise ValueError(f"gamma must be one of {GAMMAS} or a number in (0, 1] (1 adds "
                             f"the updates; more would push the dual out of the loss's "
                             f"domain), got {gamma!r}")
        self.iic, self.sigma, self.gamma = float(iic), float(sigma), float(gamma)
        self.lam_n = self.lam * dataset.n_samples
        self.H = [max(1, int(round(iic * b.X.shape[0]))) for b in blocks]
        # labels as given (+-1 for classification, as for the other baselines), (n, 1)
        self.targets = [np.asarray(b.y, dtype=np.float64).reshape(-1, 1).copy()
                        for b in blocks]
        self.local_norms = [row_sq_norms(b.X.data, b.X.indptr) for b in blocks]
        self.holder_counts = dataset.holder_counts.astype(np.float64)
        self.alpha = np.zeros(dataset.n_samples)
        self.v = [np.zeros(b.feature_ids.size) for b in blocks]

    def local_order(self, k):
        """Local row ids block k visits this round: successive seeded permutations of its
        rows, less the rows it holds no entry of (no local data: skipped)."""
        n, H = self.dataset.blocks[k].X.shape[0], self.H[k]
        rng = self.rng(4, int(k), self.round)
        order = np.concatenate([rng.permutation(n) for _ in range(-(-H // n))])[:H]
        empty = self.local_norms[k] == 0.0
        return order[~empty[order]] if empty.any() else order

    def _round(self, available):
        blocks = self.dataset.blocks
        total = np.zeros(self.dataset.n_samples)
        seconds = np.zeros(len(blocks))
        ops = np.zeros(len(blocks), dtype=np.int64)
        traffic_up = traffic_down = 0
        for k in available:
            block = blocks[k]
            X, I, J = block.X, block.sample_ids, block.feature_ids
            start = time.perf_counter()
            alpha_k = self.alpha[I].reshape(-1, 1).copy()
            w_k = self.w[J].reshape(-1, 1).copy()
            order = self.local_order(k)
            sdca_pass(X.data, X.indices, X.indptr, self.targets[k], alpha_k, w_k,
                      self.local_norms[k], order, self.code, self.lam_n,
                      self.sigma, self.smoothing)
            ops[k] += local_work(X.indptr, order)
            seconds[k] += time.perf_counter() - start
            total[I] += alpha_k[:, 0] - self.alpha[I]
            traffic_down += 8 * (I.size + J.size)
            traffic_up += 8 * I.size
        self.alpha += self.gamma * total / self.holder_counts
        self.w = np.zeros(self.dataset.n_features)
        for k in available:
            block = blocks[k]
            start = time.perf_counter()
            self.v[k] = block.X.T @ self.alpha[block.sample_ids] / self.lam_n
            seconds[k] += time.perf_counter() - start
            ops[k] += block.X.nnz
            traffic_down += 8 * block.sample_ids.size
            traffic_up += 8 * block.feature_ids.size
        for k, block in enumerate(blocks):
            self.w[block.feature_ids] += self.v[k]
        return dict(compute_seconds=float(seconds.max()), compute_ops=int(ops.max()), rtc=2,
                    bytes_up=traffic_up, bytes_down=traffic_down)
