"""HyFEM (Zhang, Yin, Chen, Hong, TMLR 2024) with deep per-block models, on the torch-free
autograd (``baselines.autograd``), following docs/baselines.md, section HyFEM (deep).

Model. Client m owns blocks I_m and keeps one extractor per block, h_i(x_i) = ReLU(x_i A_i +
c_i) (raw block -> e = 32), their outputs concatenated into v_m (d_m e wide), and a one-hidden-
layer classifier F_m(v) = ReLU(v W1 + b1) W2 + b2 with H_m hidden neurons. The server model has
all d0 extractors and an H_0-wide classifier of the same form. Float64 throughout.

Client update (Alg. 2, lines 1-7). Every round each client resets to its slice of the server,
Theta_m <- P_m Theta_0 and w_m <- Pi_m w_0, then takes Q plain SGD steps on minibatches of its
own data (drawn independently per client), a simultaneous step on

    CE + (mu1/2) |Theta_m - P_m Theta_0^t|^2 + (mu2/2) |w_m - Pi_m w_0^t|^2,

the gradient not scaled by p_m. The proximal anchors are the round's server slices.

Server (Alg. 1, lines 7-8).
* Extractors: theta_{0,i} = sum_{m: i in I_m} p_m theta_{m,i} / sum_{m: i in I_m} p_m, the exact
  minimiser of (10); a block no client holds keeps its value.
* Classifier: ``ModelMatching``. Pi_m is, for the hidden layer, an injection pi_m: client
  neuron j -> server neuron pi_m[j] (input side: the block selector P_m; output layer: the
  identity). The hidden bias is treated as an input column every client owns (so it moves with
  its neuron), the output bias as a column of the last layer matched by identity. P times
  (default 2M): pick a client m' uniformly (Alg. 3 -- the reading chosen here; ``matching=
  "all"`` re-solves every client each iteration against the same leave-one-out estimates, the
  Alg. 2 "in parallel" reading), form the leave-one-out server estimate w^_0 as the entrywise
  p-weighted average of the other clients' matched entries (pseudo-inverse: entries no other
  client covers are 0), and re-solve pi_{m'} by ``scipy.optimize.linear_sum_assignment`` on

      C(j, i) = |W1_{m'}[:, j] - W^1_0[rows(I_{m'}), i]|^2 + (b1_{m'}[j] - b^1_0[i])^2
                + |W2_{m'}[j, :] - W^2_0[i, :]|^2,

  squared Euclidean on incoming plus outgoing weights (an uncovered server neuron costs the
  client neuron's squared norm, the "new neuron" penalty). Then w_0 = the entrywise p-weighted
  average of all matched client entries (the minimiser of (11) at fixed Pi), entries covered by
  no client keeping their previous value.

Defaults for what the paper leaves open (docs/baselines.md, section HyFEM (deep)): p_m = 1/M
(``weights="samples"`` gives |N_m|/N), mu1 = mu2 = 0.5, P = 2M, H_m = H_0 = 64 (so pi_m is a
permutation), pi_m^0 = identity, He initialisation, batch 32.

Inference: the global model F_0(w_0; H_0(Theta_0; x_0)) on full-feature samples
(:meth:`HyFEMDeep.predict_global`, which also zero-pads the embeddings of missing blocks, an
untested heuristic), and client m's final local model (after the last round's Q steps)
on its own blocks of any sample (:meth:`HyFEMDeep.predict_client`).

Every random draw (initialisation, minibatches, which client is re-matched) comes from one
``numpy.random.Generator`` seeded by ``seed``: the same seed gives the same bits.
"""

import time

import numpy as np
from scipy.optimize import linear_sum_assignment

from baselines._deep_data import accuracy, columns_of, train_classifier
from baselines.autograd import Linear, Module, Tensor, as_generator, concat, cross_entropy, no_grad

__all__ = [
    "BlockMLP",
    "HyFEMDeep",
    "average_extractors",
    "average_classifier",
    "match_hidden",
    "train_local_only",
    "train_pooled",
]


class BlockMLP(Module):
    """Per-block extractors ReLU(x_i A_i + c_i) (width ``embed_dim``), concatenated, then
    Linear(d e -> hidden) -> ReLU -> Linear(hidden -> n_classes).

    ``forward(X)`` takes the blocks' columns side by side, in the order of ``block_widths``.
    """

    def __init__(self, block_widths, embed_dim, hidden, n_classes, *, rng=None):
        rng = as_generator(rng)
        self.block_widths = tuple(int(b) for b in block_widths)
        self.extractors = [Linear(b, embed_dim, rng=rng) for b in self.block_widths]
        self.hidden = Linear(len(self.block_widths) * embed_dim, hidden, rng=rng)
        self.out = Linear(hidden, n_classes, rng=rng)
        self._cuts = np.concatenate([[0], np.cumsum(self.block_widths)])

    def embed(self, X, present=None):
        """v = [h_i(x_i)]_i; blocks with ``present[k] == False`` give zeros (P^T v padding)."""
        data = X.data if isinstance(X, Tensor) else np.asarray(X)
        feats = []
        for k, ext in enumerate(self.extractors):
            block = Tensor(data[:, self._cuts[k]:self._cuts[k + 1]])
            h = ext(block).relu()
            if present is not None and not present[k]:
                h = h * 0.0
            feats.append(h)
        return concat(feats, axis=1)

    def forward(self, X, present=None):
        return self.out(self.hidden(self.embed(X, present)).relu())

    # arrays: theta = [(A_i, c_i)], w = (W1, b1, W2, b2)
    def get_arrays(self):
        theta = [(e.weight.data.copy(), e.bias.data.copy()) for e in self.extractors]
        w = (self.hidden.weight.data.copy(), self.hidden.bias.data.copy(),
             self.out.weight.data.copy(), self.out.bias.data.copy())
        return theta, w

    def set_arrays(self, theta, w):
        for ext, (a, c) in zip(self.extractors, theta):
            ext.weight.data, ext.bias.data = a.copy(), c.copy()
        W1, b1, W2, b2 = w
        self.hidden.weight.data, self.hidden.bias.data = W1.copy(), b1.copy()
        self.out.weight.data, self.out.bias.data = W2.copy(), b2.copy()


# --- server-side pieces (pure functions, tested against closed forms) ------------------------


def _rows(blocks, embed_dim):
    """Rows of W1 (input side) that belong to ``blocks``, in block order."""
    return np.concatenate([np.arange(i * embed_dim, (i + 1) * embed_dim) for i in blocks])


def average_extractors(client_thetas, client_blocks, p, previous):
    """theta_{0,i} = sum_{m: i in I_m} p_m theta_{m,i} / sum_{m: i in I_m} p_m, per block i
    (arrays of any shape); a block no client holds keeps ``previous[i]``."""
    out = []
    for i, prev in enumerate(previous):
        holders = [(m, blocks.index(i)) for m, blocks in enumerate(client_blocks) if i in blocks]
        if not holders:
            out.append(tuple(a.copy() for a in prev))
            continue
        total = sum(p[m] for m, _ in holders)
        out.append(tuple(sum(p[m] * client_thetas[m][k][j] for m, k in holders) / total
                         for j in range(len(prev))))
    return out


def average_classifier(client_ws, client_blocks, pis, p, server_shapes, embed_dim, *,
                       exclude=None, fallback=None):
    """Entrywise p-weighted average of the client classifier entries matched to each server
    entry: (sum_m p_m Pi_m^T Pi_m)^+ (sum_m p_m Pi_m^T w_m).

    ``server_shapes`` = shapes of (W1, b1, W2, b2) of the server; client m's W1 sits at rows
    ``rows(I_m)`` and columns ``pis[m]``, b1 at ``pis[m]``, W2 at rows ``pis[m]``, b2 everywhere.
    Clients in ``exclude`` are left out (the leave-one-out estimate). Entries covered by nobody
    are 0 when ``fallback`` is None (pseudo-inverse) and ``fallback``'s value otherwise.
    Returns (w0, coverage), coverage = the summed p weights per entry.
    """
    exclude = () if exclude is None else exclude
    sums = [np.zeros(s) for s in server_shapes]
    cover = [np.zeros(s) for s in server_shapes]
    for m, (w, blocks, pi) in enumerate(zip(client_ws, client_blocks, pis)):
        if m in exclude:
            continue
        rows = _rows(blocks, embed_dim)
        index = [np.ix_(rows, pi), pi, pi, slice(None)]
        for s, c, part, idx in zip(sums, cover, w, index):
            s[idx] += p[m] * part
            c[idx] += p[m]
    w0 = []
    for k, (s, c) in enumerate(zip(sums, cover)):
        avg = np.divide(s, c, out=np.zeros_like(s), where=c > 0)
        if fallback is not None:
            avg = np.where(c > 0, avg, fallback[k])
        w0.append(avg)
    return tuple(w0), tuple(cover)


def match_hidden(w_client, blocks, w0_hat, embed_dim):
    """Hungarian re-solve of the hidden-layer matching of one client against the server
    estimate ``w0_hat``: pi[j] = server neuron of client neuron j, minimising the summed squared
    Euclidean distance of incoming (W1 rows of the client's blocks, plus the hidden bias) and
    outgoing (W2 row) weights. Returns (pi, cost matrix)."""
    W1, b1, W2, _ = w_client
    S1, s1, S2, _ = w0_hat
    rows = _rows(blocks, embed_dim)
    F = np.concatenate([W1.T, b1[:, None], W2], axis=1)          # (H_m, D)
    G = np.concatenate([S1[rows].T, s1[:, None], S2], axis=1)    # (H_0, D)
    cost = ((F[:, None, :] - G[None, :, :]) ** 2).sum(axis=-1)   # (H_m, H_0)
    r, c = linear_sum_assignment(cost)
    pi = np.empty(len(F), dtype=np.int64)
    pi[r] = c
    return pi, cost


# --- the method ------------------------------------------------------------------------------


class HyFEMDeep:
    """HyFEM with per-block MLP extractors and a one-hidden-layer classifier (module docstring).

    Parameters
    ----------
    embed_dim : int, default 32            extractor output width e
    hidden : int, default 64               server hidden width H_0
    client_hidden : int or None            H_m (default H_0; smaller gives an injection)
    lr : float, default 0.05               SGD step eta
    mu1, mu2 : float, default 0.5          extractor / classifier proximal weights
    local_steps : int, default 32          Q
    batch_size : int, default 32
    matching_iters : int or None           P (default 2M)
    matching : "sample" (Alg. 3, default) or "all" (Alg. 2 "in parallel" reading)
    weights : "uniform" (p_m = 1/M, default) or "samples" (p_m = |N_m| / sum |N_m|)
    init_matching : "identity" (default) or "random" (random injections pi_m^0)
    seed : int or numpy Generator

    After ``fit``: ``theta0``, ``w0`` (server), ``pis`` (per-client hidden matchings),
    ``client_models`` (final local models), ``coverage`` (summed p weights per server
    classifier entry), ``history`` (list of per-round dicts: round, train_loss = mean minibatch
    cross-entropy over all clients' local steps, before the proximal terms; with test data also
    server_acc, client_acc_mean, client_acc_std; seconds).
    """

    def __init__(self, *, embed_dim=32, hidden=64, client_hidden=None, lr=0.05, mu1=0.5,
                 mu2=0.5, local_steps=32, batch_size=32, matching_iters=None, matching="sample",
                 weights="uniform", init_matching="identity", seed=0):
        if matching not in ("sample", "all"):
            raise ValueError(f"matching must be 'sample' or 'all', got {matching!r}")
        if weights not in ("uniform", "samples"):
            raise ValueError(f"weights must be 'uniform' or 'samples', got {weights!r}")
        if init_matching not in ("identity", "random"):
            raise ValueError(f"init_matching must be 'identity' or 'random', got {init_matching!r}")
        self.embed_dim, self.hidden = embed_dim, hidden
        self.client_hidden = hidden if client_hidden is None else client_hidden
        if self.client_hidden > hidden:
            raise ValueError("client_hidden must not exceed hidden (H_m <= H_0)")
        self.lr, self.mu1, self.mu2 = lr, mu1, mu2
        self.local_steps, self.batch_size = local_steps, batch_size
        self.matching_iters, self.matching = matching_iters, matching
        self.weights, self.init_matching = weights, init_matching
        self.rng = as_generator(seed)
        self.history = []

    # --- setup ---
    def _setup(self, X, block_columns, clients, n_classes):
        empty = [m for m, c in enumerate(clients) if len(c.samples) == 0]
        if empty:
            raise ValueError(f"HyFEM: clients {empty} hold no samples (a local step needs "
                             f"a minibatch)")
        self.block_columns = [np.asarray(c) for c in block_columns]
        self.clients = clients
        self.n_classes = n_classes
        widths = [len(c) for c in self.block_columns]
        server = BlockMLP(widths, self.embed_dim, self.hidden, n_classes, rng=self.rng)
        self.theta0, self.w0 = server.get_arrays()
        self.server_shapes = tuple(a.shape for a in self.w0)
        M = len(clients)
        sizes = np.array([len(c.samples) for c in clients], dtype=float)
        self.p = np.full(M, 1.0 / M) if self.weights == "uniform" else sizes / sizes.sum()
        Hm, H0 = self.client_hidden, self.hidden
        if self.init_matching == "identity":
            self.pis = [np.arange(Hm) for _ in range(M)]
        else:
            self.pis = [self.rng.permutation(H0)[:Hm] for _ in range(M)]
        self.client_X = [c.features(X, self.block_columns) for c in clients]
        self.client_models = [
            BlockMLP([widths[i] for i in c.blocks], self.embed_dim, Hm, n_classes, rng=self.rng)
            for c in clients
        ]
        self.P = 2 * M if self.matching_iters is None else self.matching_iters
        self.round = 0

    def client_slice(self, m):
        """(P_m Theta_0, Pi_m w_0): client m's reset point."""
        blocks, pi = self.clients[m].blocks, self.pis[m]
        theta = [tuple(a.copy() for a in self.theta0[i]) for i in blocks]
        W1, b1, W2, b2 = self.w0
        w = (W1[np.ix_(_rows(blocks, self.embed_dim), pi)], b1[pi].copy(), W2[pi].copy(),
             b2.copy())
        return theta, w

    # --- one round ---
    def _local_update(self, m):
        model = self.client_models[m]
        theta_anchor, w_anchor = self.client_slice(m)
        model.set_arrays(theta_anchor, w_anchor)
        anchors = [a for pair in theta_anchor for a in pair] + list(w_anchor)
        params = [q for e in model.extractors for q in (e.weight, e.bias)] + [
            model.hidden.weight, model.hidden.bias, model.out.weight, model.out.bias]
        mus = [self.mu1] * (2 * len(model.extractors)) + [self.mu2] * 4
        X, y = self.client_X[m], self.clients[m].labels
        losses = []
        for _ in range(self.local_steps):
            batch = self.rng.choice(len(y), min(self.batch_size, len(y)), replace=False)
            model.zero_grad()
            loss = cross_entropy(model(X[batch]), y[batch])
            loss.backward()
            for q, anchor, mu in zip(params, anchors, mus):  # simultaneous step on all params
                q.data = q.data - self.lr * (q.grad + mu * (q.data - anchor))
            losses.append(loss.item())
        return float(np.mean(losses))

    def _server_update(self):
        thetas, ws = zip(*(mdl.get_arrays() for mdl in self.client_models))
        blocks = [c.blocks for c in self.clients]
        self.theta0 = average_extractors(thetas, blocks, self.p, self.theta0)
        M = len(self.clients)
        if M > 1:
            for _ in range(self.P):
                chosen = [int(self.rng.integers(M))] if self.matching == "sample" else range(M)
                new = {}
                for m in chosen:
                    w_hat, _ = average_classifier(ws, blocks, self.pis, self.p, self.server_shapes,
                                                  self.embed_dim, exclude=(m,))
                    new[m], _ = match_hidden(ws[m], blocks[m], w_hat, self.embed_dim)
                for m, pi in new.items():
                    self.pis[m] = pi
        self.w0, self.coverage = average_classifier(
            ws, blocks, self.pis, self.p, self.server_shapes, self.embed_dim, fallback=self.w0)

    def fit(self, X, y, block_columns, clients, rounds, *, n_classes=None, X_test=None,
            y_test=None):
        """Run ``rounds`` rounds (continuing if called again with the same data).

        X : full-feature training matrix (client m only ever sees X[N_m][:, cols(I_m)]);
        y : unused beyond n_classes (labels come from ``clients``); block_columns : column
        indices per block; clients : list of ClientData. With (X_test, y_test) each round
        records the server accuracy on full features and the clients' accuracies on their
        own blocks of all test samples.
        """
        if n_classes is None:
            n_classes = int(np.max(y)) + 1
        if not self.history:
            self._setup(X, block_columns, clients, n_classes)
        for _ in range(rounds):
            start = time.perf_counter()
            loss = float(np.mean([self._local_update(m) for m in range(len(self.clients))]))
            self._server_update()
            self.round += 1
            record = dict(round=self.round, train_loss=loss)
            if X_test is not None:
                record["server_acc"] = self.score_global(X_test, y_test)
                accs = [self.score_client(m, X_test, y_test) for m in range(len(self.clients))]
                record.update(client_acc_mean=float(np.mean(accs)),
                              client_acc_std=float(np.std(accs)))
            record["seconds"] = time.perf_counter() - start
            self.history.append(record)
        return self

    # --- inference ---
    def server_model(self):
        model = BlockMLP([len(c) for c in self.block_columns], self.embed_dim, self.hidden,
                         self.n_classes, rng=0)
        model.set_arrays(self.theta0, self.w0)
        return model

    def predict_global(self, X, present_blocks=None):
        """argmax F_0(w_0; H_0(Theta_0; x_0)) on full-feature rows X (all blocks' columns in
        the original layout). ``present_blocks``: the blocks actually available; the others'
        embeddings are zero-padded (an untested heuristic)."""
        present = None
        if present_blocks is not None:
            present = [i in present_blocks for i in range(len(self.block_columns))]
        cols = columns_of(range(len(self.block_columns)), self.block_columns)
        with no_grad():
            return self.server_model()(X[:, cols], present).numpy().argmax(axis=1)

    def predict_client(self, m, X):
        """Client m's final local model on its own blocks of full-feature rows X."""
        cols = columns_of(self.clients[m].blocks, self.block_columns)
        with no_grad():
            return self.client_models[m](X[:, cols]).numpy().argmax(axis=1)

    def score_global(self, X, y):
        return float(np.mean(self.predict_global(X) == y))

    def score_client(self, m, X, y):
        return float(np.mean(self.predict_client(m, X) == y))


# --- references -------------------------------------------------------------------------------


class _Cols(Module):
    """Wrap a BlockMLP so it reads given columns of a full-feature matrix."""

    def __init__(self, net, cols):
        self.net, self.cols = net, cols

    def forward(self, X):
        data = X.data if isinstance(X, Tensor) else X
        return self.net(data[:, self.cols])


def train_local_only(X, block_columns, clients, *, steps, X_test, y_test, n_classes=10,
                     embed_dim=32, hidden=64, lr=0.05, batch_size=32, seed=0):
    """Stand-alone: each client trains the same BlockMLP on its own data and blocks for
    ``steps`` SGD steps (the same T Q budget), no communication. Returns per-client accuracies
    on all test samples (own blocks)."""
    rng = as_generator(seed)
    accs = []
    for c in clients:
        cols = columns_of(c.blocks, block_columns)
        net = BlockMLP([len(block_columns[i]) for i in c.blocks], embed_dim, hidden, n_classes,
                       rng=rng)
        model = _Cols(net, cols)
        train_classifier(model, X[c.samples], c.labels, steps=steps, batch_size=batch_size,
                         lr=lr, rng=rng)
        accs.append(accuracy(model, X_test, y_test))
    return accs


def train_pooled(X, y, block_columns, *, steps, X_test, y_test, n_classes=10, embed_dim=32,
                 hidden=64, lr=0.05, batch_size=32, seed=0):
    """Centralised: one server-sized BlockMLP on all training samples with all blocks.
    Returns its full-feature test accuracy."""
    rng = as_generator(seed)
    cols = columns_of(range(len(block_columns)), block_columns)
    net = BlockMLP([len(c) for c in block_columns], embed_dim, hidden, n_classes, rng=rng)
    model = _Cols(net, cols)
    train_classifier(model, X, y, steps=steps, batch_size=batch_size, lr=lr, rng=rng)
    return accuracy(model, X_test, y_test)
