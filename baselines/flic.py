"""FLIC: personalised federated learning on heterogeneous feature spaces (Rakotomamonjy, Vono,
Medina Ruiz, Ralaivola, TMLR 2024), on the torch-free autograd ``baselines.autograd``.

Setting (docs/baselines.md, section FLIC). b clients, each with its own input space
R^{d_i} (no shared features, no shared sample IDs) and a subset Y_i of the C classes. Client i
keeps private an embedding phi_i: R^{d_i} -> R^k into a common latent space and a personal head;
the server and the clients share C Gaussian class anchors mu_c = N(v_c, sigma^2 I_k) and (FLIC-HL)
a global representation layer alpha. Per client (paper eq. 3):

    F_i = CE(y, g_i(phi_i(x)))
        + lam1 sum_{c in Y_i} W2^2(mu_c, N(m_hat_c, Sigma_hat_c))         (alignment)
        + lam2 sum_{c in Y_i} mean_j CE(c, g_i(Z_c^j)),  Z_c^j ~ mu_c      (anchor samples)

with m_hat_c, Sigma_hat_c the mean and covariance of the embedded class-c minibatch. With
E = (Z - 1 m_hat^T)/sqrt(n - 1) (E = 0 for n = 1), W2^2 = |v - m_hat|^2 + k sigma^2 + |E|_F^2
- 2 sigma |E|_* (:func:`w2_to_isotropic`; the nuclear-norm primitive of the autograd gives the
exact gradient).

Model (FedRep instance): phi_i = MLP(d_i -> 64 -> 64 -> k), ReLU after the first two
layers; ``head="hl"`` (default, FLIC-HL): alpha = Linear(k -> 100) + LeakyReLU (global),
beta_i = Linear(100 -> C) (personal); ``head="class"`` (FLIC-Class): g_i = Linear(k -> C)
personal, only the anchors are federated. **k = 32 by default (the paper's 64 halved, for CPU
speed)**; ``k=64`` gives the paper's size.

Training (Algorithm 1/S2 with the authors' code's schedule):
 0. anchors v_c ~ N(0, 10^2 I_k), Sigma_c = sigma^2 I fixed (sigma^2 = 1 as in the paper;
    ``anchor_var=np.e`` is the code's exp(1)); pre-training: each client trains phi_i alone on
    sum_c W2^2 (anchors fixed), Adam (lr ``pretrain_lr``, default = ``lr``), batch 10.
 1. each round the server samples max(floor(r b), 1) clients (r = ``participation``) and sends
    alpha and the anchors;
 2. local loop, ``local_epochs`` M epochs of Adam (lr 1e-3, batch 100): the first
    M - ``rep_epochs`` update phi_i (CE + lam1 W2) and beta_i (CE + lam2 anchor-CE; Adam weight
    decay 1e-3 on weights, not biases, code (d)); the last ``rep_epochs`` update alpha only
    (CE + lam2 anchor-CE), from round ``rep_start`` on (code: 20);
 3. anchors, two readings (``anchor_update``):
    * ``"code"`` (**default**, the authors' code, deviation (a)): a local anchor copy with its
      own Adam (lr 1e-3), stepped after every minibatch with phi and g frozen on
      CE(g_i(v_{1:C}), [0..C-1]) (the means themselves, all classes) + sum over the batch's
      classes of W2^2 (no lambda);
    * ``"paper"`` (Algorithm S2 line 21): after the local loop, one gradient step per class on
      lam1 W2^2(mu_c, client's embedded class c) + lam2 anchor-sample CE, step ``anchor_lr``;
 4. server: alpha and v = means over the participants;
 5. code (c): every client then runs ``align_epochs`` alignment-only epochs of phi_i toward
    the new anchors; code (e): a final round where **all** clients train phi and beta for M
    epochs, alpha frozen (``final_round``).

Inference: client i predicts argmax g_i(phi_i(x)); anchors are not used. Accuracy is
micro-averaged over the clients' test splits (sum correct / sum n_test).

References for the comparison: :class:`HetFedRep` (FLIC-HL with lam1 = lam2 = 0, no
pre-training, no alignment), :class:`FLICLocal` (per-client MLP d_i -> 64 -> 64 -> C, no
communication) and :class:`FLICPooled` (one MLP on all clients' data, each client's features
in its own zero-padded column block: a central oracle, since the feature spaces share nothing).
Not implemented: learnable anchor covariances (all the paper's experiments fix them), the
regression variant, the L2GD / FedAvg-FT instances, FedHeNN.

Randomness: one seed; streams ``default_rng((seed, ...))`` for the anchors, alpha, each client's
initialisation, each client's batches and anchor samples, and the participation draws.
"""

import numpy as np

from baselines._deep_views import minibatches, pad_blocks
from baselines.autograd import (
    MLP,
    Adam,
    Linear,
    Module,
    Parameter,
    Tensor,
    cross_entropy,
    no_grad,
    nuclear_norm,
)


def w2_to_isotropic(v, embeddings, sigma=1.0):
    """W2^2( N(v, sigma^2 I_k), N(m_hat, Sigma_hat) ) for the rows of ``embeddings`` (Tensor).

    m_hat = row mean, Sigma_hat = E^T E with E = (Z - m_hat) / sqrt(n - 1) (E = 0 if n = 1):
    |v - m_hat|^2 + k sigma^2 + |E|_F^2 - 2 sigma |E|_* (Bures with A = sigma I).
    """
    n, k = embeddings.shape
    m_hat = embeddings.mean(axis=0)
    value = ((v - m_hat) ** 2).sum() + k * sigma**2
    if n > 1:
        E = (embeddings - m_hat) * (1.0 / np.sqrt(n - 1))
        value = value + (E * E).sum() - 2.0 * sigma * nuclear_norm(E)
    return value


def _accuracy(models_predict, clients):
    """Micro-averaged accuracy: sum_i correct_i / sum_i n_i over (X, y) pairs."""
    correct = total = 0
    for i, (X, y) in enumerate(clients):
        correct += int(np.sum(models_predict(i, X) == np.asarray(y)))
        total += len(y)
    return correct / total


def _pairs(clients, test=False):
    """Accept [(X, y), ...] or the dicts of ``heterogeneous_toy`` (their test split where
    ``test``: what every evaluation reads)."""
    out = []
    for c in clients:
        if isinstance(c, dict):
            c = (c["X_test"], c["y_test"]) if test else (c["X"], c["y"])
        out.append((np.asarray(c[0], dtype=float), np.asarray(c[1], dtype=np.int64)))
    return out


def _train_and_eval(clients, eval_data):
    """(training pairs, evaluation pairs or None): the toy's dicts carry their test split."""
    if eval_data is None and clients and isinstance(clients[0], dict):
        eval_data = _pairs(clients, test=True)
    elif eval_data is not None:
        eval_data = _pairs(eval_data, test=True)
    return _pairs(clients), eval_data


class _Alpha(Module):
    """The global representation layer of FLIC-HL: Linear(k -> width) + LeakyReLU."""

    def __init__(self, k, width, rng):
        self.fc = Linear(k, width, init="he", rng=rng)

    def forward(self, z):
        return self.fc(z).leaky_relu()


class _Client:
    """One client's private state: data, phi_i, head beta_i, optimisers, anchor copy."""

    def __init__(self, X, y, n_classes, model, rng):
        self.X, self.y = X, y
        self.classes = np.unique(y)
        self.phi = MLP([X.shape[1], model.phi_hidden, model.phi_hidden, model.k], "relu", rng=rng)
        head_in = model.rep_width if model.head == "hl" else model.k
        self.beta = Linear(head_in, n_classes, init="glorot", rng=rng)
        self.opt_phi = Adam(self.phi.parameters(), model.lr)
        self.opt_beta = [Adam([self.beta.weight], model.lr, weight_decay=model.head_weight_decay),
                         Adam([self.beta.bias], model.lr)]
        self.anchors = Parameter(np.zeros((n_classes, model.k)))
        self.opt_anchor = Adam([self.anchors], model.anchor_lr)


class FLIC:
    """FLIC (FedRep instance). ``fit(clients, rounds)``: clients are (X_i, y_i) pairs (or the
    dicts of ``heterogeneous_toy``); ``predict(i, X)`` is client i's personal model.

    ``history``: one dict per round with ``train_loss`` (mean CE over the round's local
    batches), ``w2`` (mean alignment term over those batches), ``accuracy`` (micro-averaged on
    ``eval_data`` if given, else None) and ``participants``; the final all-client round is the
    last record (``final=True``).
    """

    name = "FLIC"

    def __init__(self, n_classes, *, k=32, phi_hidden=64, head="hl", rep_width=100, lam1=1e-3,
                 lam2=1e-3, anchor_update="code", anchor_var=1.0, anchor_init_std=10.0,
                 anchor_lr=1e-3, pretrain_epochs=20, pretrain_batch=10, pretrain_lr=None,
                 local_epochs=10, rep_epochs=1, rep_start=20, participation=0.1, batch_size=100,
                 lr=1e-3, head_weight_decay=1e-3, align_epochs=1, final_round=True, seed=0):
        if head not in ("hl", "class"):
            raise ValueError(f"head must be 'hl' or 'class', got {head!r}")
        if anchor_update not in ("code", "paper", "none"):
            raise ValueError(f"anchor_update must be 'code', 'paper' or 'none', got "
                             f"{anchor_update!r}")
        if not 0 < participation <= 1:
            raise ValueError(f"participation must be in (0, 1], got {participation}")
        self.n_classes, self.k, self.phi_hidden, self.head = int(n_classes), k, phi_hidden, head
        self.rep_width, self.lam1, self.lam2 = rep_width, float(lam1), float(lam2)
        self.anchor_update, self.sigma = anchor_update, float(np.sqrt(anchor_var))
        self.anchor_init_std, self.anchor_lr = anchor_init_std, anchor_lr
        self.pretrain_epochs, self.pretrain_batch = pretrain_epochs, pretrain_batch
        self.pretrain_lr = lr if pretrain_lr is None else pretrain_lr
        self.local_epochs, self.rep_epochs, self.rep_start = local_epochs, rep_epochs, rep_start
        self.participation, self.batch_size, self.lr = participation, batch_size, lr
        self.head_weight_decay, self.align_epochs = head_weight_decay, align_epochs
        self.final_round, self.seed = final_round, int(seed)
        self.history = []

    def _rng(self, *stream):
        return np.random.default_rng((self.seed,) + stream)

    # --- model pieces ---------------------------------------------------------------------
    def _head(self, client, z):
        """g_i(z) = beta_i(alpha(z)) (HL) or beta_i(z) (Class)."""
        return client.beta(self.alpha(z)) if self.head == "hl" else client.beta(z)

    def _w2(self, anchors, emb, y):
        """sum over the classes present in y of W2^2(mu_c, N(class-c embeddings))."""
        total = None
        for c in np.unique(y):
            term = w2_to_isotropic(anchors[int(c)], emb[np.flatnonzero(y == c)], self.sigma)
            total = term if total is None else total + term
        return total

    def _anchor_ce(self, client, anchors, classes, n, rng):
        """mean over the given classes of CE(c, g_i(v_c + sigma xi)), n samples each."""
        total = None
        for c in classes:
            xi = rng.normal(size=(n, self.k))
            Z = anchors[int(c)] + Tensor(self.sigma * xi)
            term = cross_entropy(self._head(client, Z), np.full(n, int(c)))
            total = term if total is None else total + term
        return total

    # --- phases -----------------------------------------------------------------------------
    def _align_epochs(self, client, epochs, batch, rng):
        """Alignment-only training of phi_i on sum_c W2^2 (anchors fixed)."""
        anchors = Tensor(self.anchors.data)
        for _ in range(epochs):
            for idx in minibatches(len(client.y), batch, rng):
                loss = self._w2(anchors, client.phi(Tensor(client.X[idx])), client.y[idx])
                client.opt_phi.zero_grad()
                loss.backward()
                client.opt_phi.step()

    def _head_step(self, client, idx, rng, update_anchors):
        """One minibatch on phi_i and beta_i (alpha frozen); returns (CE, W2)."""
        x, y = Tensor(client.X[idx]), client.y[idx]
        anchors = Tensor(self.anchors.data)  # the round's global anchors, constants here
        emb = client.phi(x)
        ce = cross_entropy(self._head(client, emb), y)
        loss = ce
        w2 = self._w2(anchors, emb, y)
        if self.lam1:
            loss = loss + self.lam1 * w2
        if self.lam2:
            loss = loss + self.lam2 * self._anchor_ce(client, anchors, np.unique(y), len(idx), rng)
        for p in self._all_params(client):
            p.grad = None
        loss.backward()
        client.opt_phi.step()
        for opt in client.opt_beta:
            opt.step()
        if update_anchors and self.anchor_update == "code":
            self._anchor_step_code(client, emb.data, y)
        return ce.item(), w2.item()

    def _anchor_step_code(self, client, emb, y):
        """Code reading: CE(g(v_1..C), 0..C-1) + W2 over the batch's classes, on the local
        anchor copy only (phi and g frozen), one Adam step."""
        loss = cross_entropy(self._head(client, client.anchors), np.arange(self.n_classes))
        loss = loss + self._w2(client.anchors, Tensor(emb), y)
        for p in self._all_params(client):
            p.grad = None
        loss.backward()
        client.opt_anchor.step()

    def _anchor_step_paper(self, client, rng):
        """Paper reading (Alg. S2 l. 21): v_c -= eta [lam1 grad W2^2(mu_c, client's class c)
        + lam2 grad CE(c, g(Z_c))] for the client's classes, on all its data."""
        with no_grad():
            emb = client.phi(Tensor(client.X)).data
        loss = self.lam1 * self._w2(client.anchors, Tensor(emb), client.y)
        if self.lam2:
            loss = loss + self.lam2 * self._anchor_ce(client, client.anchors, client.classes,
                                                      self.batch_size, rng)
        for p in self._all_params(client):
            p.grad = None
        loss.backward()
        client.anchors.data = client.anchors.data - self.anchor_lr * client.anchors.grad

    def _rep_step(self, client, idx, rng, opt_alpha):
        """One minibatch on alpha only: CE + lam2 anchor-CE."""
        x, y = Tensor(client.X[idx]), client.y[idx]
        with no_grad():
            emb = client.phi(x)
        loss = cross_entropy(self._head(client, emb), y)
        if self.lam2:
            loss = loss + self.lam2 * self._anchor_ce(client, Tensor(self.anchors.data),
                                                      np.unique(y), len(idx), rng)
        for p in self._all_params(client):
            p.grad = None
        loss.backward()
        opt_alpha.step()

    def _all_params(self, client):
        extra = self.alpha.parameters() if self.head == "hl" else []
        return client.phi.parameters() + client.beta.parameters() + extra + [client.anchors]

    def _local_round(self, i, t, final=False):
        """Client i's local loop in round t; returns (alpha_i state, anchors_i, CEs, W2s)."""
        client, rng = self.clients[i], self.client_rngs[i]
        if self.head == "hl":
            self.alpha.load_state_dict(self.alpha_global)
        client.anchors.data = self.anchors.data.copy()
        ces, w2s = [], []
        head_epochs = self.local_epochs if final else self.local_epochs - self.rep_epochs
        for _ in range(head_epochs):
            for idx in minibatches(len(client.y), self.batch_size, rng):
                ce, w2 = self._head_step(client, idx, rng, update_anchors=not final)
                ces.append(ce)
                w2s.append(w2)
        if not final and self.head == "hl" and t >= self.rep_start:
            opt_alpha = Adam(self.alpha.parameters(), self.lr)
            for _ in range(self.rep_epochs):
                for idx in minibatches(len(client.y), self.batch_size, rng):
                    self._rep_step(client, idx, rng, opt_alpha)
        if not final and self.anchor_update == "paper":
            self._anchor_step_paper(client, rng)
        alpha_state = self.alpha.state_dict() if self.head == "hl" else None
        return alpha_state, client.anchors.data.copy(), ces, w2s

    # --- public API ---------------------------------------------------------------------------
    def fit(self, clients, rounds=50, eval_data=None):
        data, eval_data = _train_and_eval(clients, eval_data)
        b = len(data)
        self.anchors = Tensor(self._rng(0).normal(0.0, self.anchor_init_std,
                                                  size=(self.n_classes, self.k)))
        if self.head == "hl":
            self.alpha = _Alpha(self.k, self.rep_width, self._rng(1))
            self.alpha_global = self.alpha.state_dict()
        self.clients = [_Client(X, y, self.n_classes, self, self._rng(2, i))
                        for i, (X, y) in enumerate(data)]
        self.client_rngs = [self._rng(3, i) for i in range(b)]
        part_rng = self._rng(4)
        for i, client in enumerate(self.clients):  # pre-training (its own Adam)
            main_opt = client.opt_phi
            client.opt_phi = Adam(client.phi.parameters(), self.pretrain_lr)
            self._align_epochs(client, self.pretrain_epochs, self.pretrain_batch,
                               self.client_rngs[i])
            client.opt_phi = main_opt
        n_active = max(int(np.floor(self.participation * b)), 1)
        self.history = []
        for t in range(rounds):
            chosen = np.sort(part_rng.choice(b, n_active, replace=False))
            results = [self._local_round(int(i), t) for i in chosen]
            if self.head == "hl":
                self.alpha_global = {name: np.mean([r[0][name] for r in results], axis=0)
                                     for name in self.alpha_global}
            if self.anchor_update != "none":
                self.anchors = Tensor(np.mean([r[1] for r in results], axis=0))
            for i, client in enumerate(self.clients):  # code (c)
                self._align_epochs(client, self.align_epochs, self.batch_size,
                                   self.client_rngs[i])
            self._record(t + 1, chosen, results, eval_data)
        if self.final_round:  # code (e)
            results = [self._local_round(i, rounds, final=True) for i in range(b)]
            self._record(rounds + 1, np.arange(b), results, eval_data, final=True)
        return self

    def _record(self, t, chosen, results, eval_data, final=False):
        if self.head == "hl":
            self.alpha.load_state_dict(self.alpha_global)
        ces = [c for r in results for c in r[2]]
        w2s = [w for r in results for w in r[3]]
        self.history.append(dict(
            round=t, participants=[int(i) for i in chosen], final=final,
            train_loss=float(np.mean(ces)) if ces else float("nan"),
            w2=float(np.mean(w2s)) if w2s else float("nan"),
            accuracy=self.score(eval_data) if eval_data is not None else None))

    def decision_function(self, i, X):
        """Client i's logits g_i(phi_i(X)) (with the current global alpha)."""
        if self.head == "hl":
            self.alpha.load_state_dict(self.alpha_global)
        with no_grad():
            client = self.clients[i]
            return self._head(client, client.phi(Tensor(np.asarray(X, dtype=float)))).numpy()

    def predict(self, i, X):
        return self.decision_function(i, X).argmax(axis=1)

    def embed(self, i, X):
        """phi_i(X): client i's points in the common latent space."""
        with no_grad():
            return self.clients[i].phi(Tensor(np.asarray(X, dtype=float))).numpy()

    def score(self, clients):
        """Micro-averaged accuracy over [(X_i, y_i)] (client i's own test split)."""
        return _accuracy(self.predict, _pairs(clients, test=True))

    def client_scores(self, clients):
        return [float(np.mean(self.predict(i, X) == y)) for i, (X, y) in
                enumerate(_pairs(clients, test=True))]


class HetFedRep(FLIC):
    """FLIC-HL without the FLIC terms: lam1 = lam2 = 0, no pre-training, no alignment, the
    anchors never used (the paper's HetFedRep baseline)."""

    name = "HetFedRep"

    def __init__(self, n_classes, **kwargs):
        kwargs.update(lam1=0.0, lam2=0.0, pretrain_epochs=0, align_epochs=0,
                      anchor_update="none", head="hl")
        super().__init__(n_classes, **kwargs)


class FLICLocal:
    """Local-only reference: each client trains its own MLP d_i -> 64 -> 64 -> C (Adam, lr
    1e-3, batch 100) for ``epochs`` epochs, no communication. ``history``: one record per
    epoch (mean CE over all clients' batches, micro-averaged accuracy on ``eval_data``)."""

    name = "Local"

    def __init__(self, n_classes, *, hidden=64, lr=1e-3, batch_size=100, weight_decay=0.0,
                 seed=0):
        self.n_classes, self.hidden, self.lr = int(n_classes), hidden, lr
        self.batch_size, self.weight_decay, self.seed = batch_size, weight_decay, int(seed)
        self.history = []

    def _make(self, n_in, rng):
        return MLP([n_in, self.hidden, self.hidden, self.n_classes], "relu", rng=rng)

    def fit(self, clients, epochs=100, eval_data=None):
        data, eval_data = _train_and_eval(clients, eval_data)
        self.models = [self._make(X.shape[1], np.random.default_rng((self.seed, 2, i)))
                       for i, (X, _) in enumerate(data)]
        opts = [Adam(m.parameters(), self.lr, weight_decay=self.weight_decay)
                for m in self.models]
        rngs = [np.random.default_rng((self.seed, 3, i)) for i in range(len(data))]
        self.history = []
        for epoch in range(epochs):
            losses = []
            for model, opt, rng, (X, y) in zip(self.models, opts, rngs, data):
                for idx in minibatches(len(y), self.batch_size, rng):
                    loss = cross_entropy(model(Tensor(X[idx])), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
            self.history.append(dict(
                round=epoch + 1, train_loss=float(np.mean(losses)),
                accuracy=self.score(eval_data) if eval_data is not None else None))
        return self

    def predict(self, i, X):
        with no_grad():
            return self.models[i](Tensor(np.asarray(X, dtype=float))).numpy().argmax(axis=1)

    def score(self, clients):
        return _accuracy(self.predict, _pairs(clients, test=True))


class FLICPooled(FLICLocal):
    """Pooled (central oracle) reference: one MLP D -> 64 -> 64 -> C on every client's data,
    client i's features placed in its own column block (zeros elsewhere, ``pad_blocks``)."""

    name = "Pooled"

    def fit(self, clients, epochs=100, eval_data=None):
        data, eval_data = _train_and_eval(clients, eval_data)
        self.dims = [X.shape[1] for X, _ in data]
        X = pad_blocks([X for X, _ in data], self.dims)
        y = np.concatenate([y for _, y in data])
        super().fit([(X, y)], epochs, None)  # accuracy (per client block) only at the end
        if eval_data is not None:
            self.history[-1]["accuracy"] = self.score(eval_data)
        return self

    def predict(self, i, X):
        X = np.asarray(X, dtype=float)
        blocks = [np.zeros((0, d)) for d in self.dims]
        blocks[i] = X
        with no_grad():
            return self.models[0](Tensor(pad_blocks(blocks, self.dims))).numpy().argmax(axis=1)
