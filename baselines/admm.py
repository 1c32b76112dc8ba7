"""Block-splitting ADMM (Parikh and Boyd 2014) on a FederatedDataset.

Source: N. Parikh and S. Boyd, "Block splitting for distributed optimization", Math. Prog.
Comp. 6(1):77-102, 2014 (https://www.nparikh.org/publications/block_splitting/). The
paper puts a problem in *graph form*

    minimize  f(y) + g(x)   subject to  y = A x,

solves it serially by *graph projection splitting* (ADMM / Douglas-Rachford with the
projection onto the graph {(x, y): y = A x} as one step) and derives *block splitting* from
it: A is cut into blocks A_ij, block ij keeps its own copies (x_ij, y_ij) with
y_ij = A_ij x_ij, every copy x_ij of feature group j must equal x_j (consensus) and the
partial margins must add up, y_i = sum_j y_ij (exchange). ADMM is then applied to

    minimize  sum_i f_i(y_i) + sum_j g_j(x_j) + sum_ij I{y_ij = A_ij x_ij}
    subject to the consensus and exchange constraints,

with the separable part (prox of f_i, prox of g_j, graph projection of each block) in one
step and the projection onto the consensus/exchange set (``avg`` and ``exch`` in the
paper) in the other. The full text of the paper was not available to us (the search tool
returned the abstract only), so the iteration below is that derivation written out in
the standard scaled form of ADMM for  min F(phi) + I_C(psi)  s.t.  phi = psi  (Boyd et
al. 2011, "Distributed optimization and statistical learning via ADMM", sections 3.1 and
7; as far as we can tell also the form the paper writes graph projection splitting in,
with x^{k+1/2} for the prox step and x-tilde for the scaled duals):

    phi^{k+1/2} = prox_{F/rho}(psi^k - u^k)             (all blocks and the prox, in parallel)
    psi^{k+1}   = Pi_C(phi^{k+1/2} + u^k)               (averaging and exchange)
    u^{k+1}     = u^k + phi^{k+1/2} - psi^{k+1}

We keep every dual variable (u for y_i, x_j, x_ij and y_ij); the paper's simplified
iteration (some duals are equal or opposite after the first step) gives the same iterates
from a zero start.

Mapping to our problem. f(y) = (1/N) sum_i l(y_i, label_i), g(x) = (lam/2) ||x||^2, A = X.
ADMM runs on N times that objective, f(y) = sum_i l(y_i, label_i) and
g(x) = (lam N / 2) ||x||^2 (same minimiser; the sum-of-losses form of the paper's
examples), so that rho does not have to shrink with N: prox of g is
x = v / (1 + lam N / rho) and prox of f_i is the 1-D problem
argmin_y l(y, label_i) / rho + (y - v)^2 / 2 (``baselines._admm_kernels``, t = 1/rho).
The graph projection of block k onto {y = A_k x},
A_k = X^k (|I_k| x |J_k|), is

    x = (I + A^T A)^{-1} (c + A^T d)            if |J_k| <= |I_k|,
    x = c - A^T (I + A A^T)^{-1} (A c - d)      otherwise,          y = A x,

with the smaller matrix factored once (dense Cholesky up to ``_DENSE_MAX`` rows, else a
sparse LU) and reused every round.

Non-grid layouts (our generalisation; the paper treats a grid). A client block is one
A_ij block with its own sample set I_k and feature set J_k. Because the blocks partition
the entries of X (sum_k X^k = X), y = X x holds exactly when y_i = sum_{k in C_i} y_k[i]
for every sample (exchange over the holders C_i of sample i) and x_k = x[J_k] for every
block (consensus over the holders of feature j). The projection onto that set is the
paper's avg/exch, done per feature over its 1 + (number of holder blocks) copies and per
sample over its 1 + |C_i| terms. For a grid this is exactly block splitting.

Roles. Block k does its graph projection; the holder of sample i with the lowest client id
does the prox of f_i (it has the label); the server holds x, does the prox of g and the
averaging/exchange. One round trip per iteration: each block uploads its (x_k, y_k) plus
duals and gets back its consensus and exchange values.

Participation. Block splitting needs every block every iteration (the HyFDCA paper's point:
"block-splitting ADMM requires full client participation"): any participation model that
can leave a client out raises ValueError.

rho: the penalty on N P(w). ADMM converges for every rho > 0; only the speed depends on
it. Default 1.0 (the usual untuned start; not a value taken from the paper). On
standardised breast cancer rho in [0.3, 3] suited hinge and logistic and 3 to 30 the
squared loss; rho = 1 on the 1/N-scaled objective (rho = N here) crawled. Measured
(569 x 30, lam = 0.01, rho = 1, relative loss after 300 / 2000 rounds): hinge 2x2
3e-2 / 4e-4, squared 2x2 2e-3 / 3e-4 (rho = 10: 1e-5 after 1500).
"""

import time

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from baselines._admm_kernels import prox_losses
from baselines._base import ConvexBaseline
from solvers import check_positive

_DENSE_MAX = 2000   # factor I + G densely (Cholesky) when G is at most this size


class GraphProjector:
    """Projection onto {(x, y): y = A x} for one block, with its factorisation cached."""

    def __init__(self, A):
        self.A = sp.csr_matrix(A, dtype=np.float64)
        self.AT = self.A.T.tocsr()
        n_rows, n_cols = self.A.shape
        self.tall = n_cols <= n_rows          # factor I + A^T A (n_cols) else I + A A^T
        gram = (self.AT @ self.A) if self.tall else (self.A @ self.AT)
        size = gram.shape[0]
        if size <= _DENSE_MAX:
            self.chol = sla.cho_factor(np.eye(size) + gram.toarray(), lower=True)
            self.lu = None
        else:
            self.chol = None
            self.lu = spla.splu((sp.identity(size, format="csc") + gram).tocsc())
        solve_ops = size * size if self.chol is not None else self.lu.L.nnz + self.lu.U.nnz
        # one call's entries touched (feddata.local_work's unit): the products with A
        # and A^T (two if tall, else three), the triangular solves, the vector x
        self.ops = (2 if self.tall else 3) * self.A.nnz + solve_ops + n_cols

    def _solve(self, rhs):
        if self.chol is not None:
            return sla.cho_solve(self.chol, rhs)
        return self.lu.solve(rhs)

    def __call__(self, c, d):
        """(x, y) nearest to (c, d) with y = A x."""
        if self.tall:
            x = self._solve(c + self.AT @ d)
        else:
            x = c - self.AT @ self._solve(self.A @ c - d)
        return x, self.A @ x


class BlockSplittingADMM(ConvexBaseline):
    """Block-splitting ADMM on a FederatedDataset (see the module docstring).

    Parameters
    ----------
    dataset : FederatedDataset
    loss, lam, smoothing : the L2-regularised problem, as for HyFDCA
    rho : float, default=1.0
        ADMM penalty (> 0).
    participation, fraction, seed : as for HyFDCA; only where every client takes part in
        every round (``Participation.everyone_each_round``).

    Attributes
    ----------
    w : ndarray (d,)
        The consensus x after the last iteration.
    """

    name = "BlockSplittingADMM"

    def __init__(self, dataset, *, rho=1.0, **kwargs):
        super().__init__(dataset, **kwargs)
        part = self.participation
        if not part.everyone_each_round:
            raise ValueError(
                f"block-splitting ADMM needs every client in every iteration; got "
                f"participation={part.kind!r} with fraction {part.fraction:g} of "
                f"{part.n_clients} clients")
        check_positive(rho, "rho")
        self.rho = float(rho)
        n, d = dataset.n_samples, dataset.n_features
        self.labels = np.ascontiguousarray(dataset.labels, dtype=np.float64)
        blocks = dataset.blocks
        self.projectors = [GraphProjector(b.X) for b in blocks]
        # consensus / exchange group sizes: 1 + holder blocks of each feature / sample
        self.feature_count = 1.0 + np.bincount(
            np.concatenate([b.feature_ids for b in blocks]), minlength=d)
        self.sample_count = 1.0 + dataset.holder_counts.astype(np.float64)
        # the holder with the lowest id does the prox of f_i
        prox_owner = np.full(n, len(blocks), dtype=np.int64)
        for k, b in enumerate(blocks):
            prox_owner[b.sample_ids] = np.minimum(prox_owner[b.sample_ids], k)
        self.prox_samples = [np.flatnonzero(prox_owner == k) for k in range(len(blocks))]
        # a block's local work per iteration: its projection and its prox of f_i
        self.block_ops = [proj.ops + ids.size
                          for proj, ids in zip(self.projectors, self.prox_samples)]
        # psi (the consensus / exchange side) and the scaled duals u of phi
        self.x, self.y = np.zeros(d), np.zeros(n)
        self.ux, self.uy = np.zeros(d), np.zeros(n)
        self.yk = [np.zeros(b.sample_ids.size) for b in blocks]    # exchange shares
        self.uxk = [np.zeros(b.feature_ids.size) for b in blocks]
        self.uyk = [np.zeros(b.sample_ids.size) for b in blocks]
        self.last_residual = np.nan

    def _round(self, available):
        if len(available) != self.dataset.n_clients:
            raise ValueError("block-splitting ADMM needs every client in every iteration")
        blocks = self.dataset.blocks
        t = 1.0 / self.rho                        # prox of l(., label) / rho
        # --- phi^{k+1/2}: prox of f (label holders), prox of g (server), projections
        seconds = np.zeros(len(blocks))
        v = self.y - self.uy
        y_half = np.empty_like(v)
        for k, ids in enumerate(self.prox_samples):
            start = time.perf_counter()
            out = np.empty(ids.size)
            prox_losses(self.code, v[ids], self.labels[ids], t, self.smoothing, out)
            y_half[ids] = out
            seconds[k] += time.perf_counter() - start
        x_half = (self.x - self.ux) / (1.0 + self.lam * self.dataset.n_samples / self.rho)
        xk_half, yk_half = [], []
        for k, block in enumerate(blocks):
            start = time.perf_counter()
            xh, yh = self.projectors[k](self.x[block.feature_ids] - self.uxk[k],
                                        self.yk[k] - self.uyk[k])
            seconds[k] += time.perf_counter() - start
            xk_half.append(xh)
            yk_half.append(yh)
        # --- psi^{k+1} = Pi_C(phi^{k+1/2} + u): consensus over x copies, exchange over y
        x_sum = x_half + self.ux
        c = y_half + self.uy
        share_sum = np.zeros_like(c)
        for k, block in enumerate(blocks):
            np.add.at(x_sum, block.feature_ids, xk_half[k] + self.uxk[k])
            np.add.at(share_sum, block.sample_ids, yk_half[k] + self.uyk[k])
        x_new = x_sum / self.feature_count
        r = (c - share_sum) / self.sample_count
        y_new = c - r
        # --- dual update u += phi^{k+1/2} - psi^{k+1}
        self.ux += x_half - x_new
        self.uy += y_half - y_new
        traffic_up = traffic_down = 0
        for k, block in enumerate(blocks):
            I, J = block.sample_ids, block.feature_ids
            yk_new = yk_half[k] + self.uyk[k] + r[I]
            self.uxk[k] += xk_half[k] - x_new[J]
            self.uyk[k] += yk_half[k] - yk_new
            self.yk[k] = yk_new
            size = 8 * (I.size + J.size + self.prox_samples[k].size)
            traffic_up += size
            traffic_down += size
        self.last_residual = float(np.sqrt(np.sum((x_half - x_new) ** 2)
                                           + np.sum((y_half - y_new) ** 2)))
        self.x, self.y = x_new, y_new
        self.w = x_new.copy()
        return dict(compute_seconds=float(seconds.max()), compute_ops=max(self.block_ops),
                    rtc=1, bytes_up=traffic_up, bytes_down=traffic_down)
