"""CHFL, "Completely Heterogeneous Federated Learning" (Liu, Yang, Cai, Ding, Lu; arXiv
2210.15865), on the torch-free autograd, following docs/baselines.md, section CHFL.

Each of K clients has its own feature space, label distribution and private backbone g_k
(here a random MLP: 1-3 hidden ReLU layers of widths drawn from {16, 32, 64}, then a layer to
the agreed embedding length E = 16 with ReLU). Only the head -- one Linear(E -> C) with bias --
has a shared shape. A round is one local epoch (batch 32) of

    L_k = CE(z, y) + [round >= 2] alpha DKD(z, z_bar, y; tau(round)),
    z = h_k(g_k(x)),   z_bar = stopgrad(h_bar(g_k(x))),

where h_bar is a frozen copy of the aggregated head w_bar_h (the teacher: the global head on
the client's own current features), alpha = 0.5 applied once, and the temperature follows the
cosine schedule tau(T) = beta (1 + cos(pi T / T_max)) + 1, beta = 5 (11 -> 6 at T_max/2 -> 1).
Then every client sends its head and the server aggregates w_bar_h. Local heads are never
overwritten ("Ours"); no data, logits, embeddings or backbone weights leave a client.

DKD (Zhao et al. 2022, with one weight for both terms): with q = softmax(z/tau), t the true
class, b = [q_t, 1 - q_t] and p the softmax over the non-target logits,
DKD = KL(b_bar || b) + KL(p_bar || p) (teacher first).

Readings chosen (the other ones are flags):
* temperature ``variant="B"`` (default): tau divides student and teacher logits in both terms
  and the loss is scaled by tau^2 (mdistiller's DKD). ``variant="A"``: the literal Eq. 6 --
  tau only on the teacher's non-target distribution p_bar, tau = 1 elsewhere, no tau^2.
* ``agg="mean"`` (default): w_bar_h = (1/K) sum_k w_{h_k}; ``"sum"`` is the printed Eq. 4,
  ``"weighted"`` weights by N_k.
* ``teacher="batch"`` (default): z_bar per batch with the current backbone (detached);
  ``"epoch"``: z_bar precomputed at the start of the epoch with the backbone snapshot.
* Every client starts its head from the server's initial w_bar_h (the paper is silent).
* Optimiser: SGD, lr 0.01, momentum 0.9, one optimiser per client kept across rounds
  (``optimizer="adam"`` for Adam). lr 0.05 diverged or stalled on the digits proxy (IID
  SOLO at 0.53 best mean accuracy); 0.01 trains stably.

``strategy`` also gives the paper's comparison points: ``"solo"`` (local training only),
``"avg"`` (clients replace h_k by the average after every epoch, no KD), ``"avgkd"`` (AVG plus
the KD term). With alpha = 0, "ours" is bit-for-bit "solo".

Inference: client k predicts argmax h_k(g_k(x)) in its own feature space
(:meth:`CHFL.predict_client`); h_bar(g_k(x)) is a diagnostic (:meth:`CHFL.predict_teacher`).
``history`` per round: round, temperature, train_loss (mean over clients), client_acc_mean /
client_acc_std (each client on its own test split), teacher_acc_mean (global head on each
client's features). Float64; every random draw from one ``numpy.random.Generator``.
"""

import time

import numpy as np

from baselines.autograd import (
    MLP,
    SGD,
    Adam,
    Linear,
    Module,
    Tensor,
    as_generator,
    concat,
    cross_entropy,
    kl_div,
    log_softmax,
    logsumexp,
    no_grad,
)

__all__ = ["CHFL", "ClientNet", "dkd_loss", "temperature", "train_local_only", "train_pooled"]


def temperature(round_, rounds, beta=5.0):
    """Cosine schedule tau(T) = beta (1 + cos(pi T / T_max)) + 1 (Eq. 7)."""
    return beta * (1.0 + np.cos(np.pi * round_ / rounds)) + 1.0


def _split_target(s, y):
    """(target logit (n,), non-target logits (n, C-1)) of a Tensor or array s."""
    n, C = s.shape
    rows = np.arange(n)
    cols = np.tile(np.arange(C), (n, 1))
    nontarget = cols[cols != y[:, None]].reshape(n, C - 1)
    return s[rows, y], s[rows[:, None], nontarget]


def _dkd_logs(z, y, tau_tc, tau_nc):
    """log b (n, 2) at temperature tau_tc and log p (n, C-1) at tau_nc, autograd Tensors."""
    n = z.shape[0]
    s = z * (1.0 / tau_tc)
    s_t, s_nt = _split_target(s, y)
    lse = logsumexp(s, axis=1)
    log_b = concat([(s_t - lse).reshape(n, 1), (logsumexp(s_nt, axis=1) - lse).reshape(n, 1)],
                   axis=1)
    if tau_nc != tau_tc:
        _, s_nt = _split_target(z * (1.0 / tau_nc), y)
    return log_b, log_softmax(s_nt, axis=1)


def dkd_loss(z, z_bar, y, tau, variant="B"):
    """Decoupled KD, KL(b_bar || b) + KL(p_bar || p), mean over the batch.

    z : student logits (Tensor, n x C); z_bar : teacher logits (array or Tensor, no gradient);
    y : int labels. ``variant="B"``: tau on both sides in both terms, times tau^2;
    ``variant="A"``: tau only on the teacher's non-target distribution, no tau^2.
    """
    y = np.asarray(y)
    z_bar = Tensor(z_bar.data if isinstance(z_bar, Tensor) else z_bar)
    if variant == "B":
        log_b, log_p = _dkd_logs(z, y, tau, tau)
        log_bt, log_pt = _dkd_logs(z_bar, y, tau, tau)
        scale = tau * tau
    elif variant == "A":
        log_b, log_p = _dkd_logs(z, y, 1.0, 1.0)
        log_bt, log_pt = _dkd_logs(z_bar, y, 1.0, tau)
        scale = 1.0
    else:
        raise ValueError(f"variant must be 'A' or 'B', got {variant!r}")
    return (kl_div(log_bt, log_b) + kl_div(log_pt, log_p)) * scale


class ClientNet(Module):
    """A private backbone g (MLP to ``embed_dim``, ReLU on the embedding) and a head h
    (Linear(embed_dim -> n_classes) with bias)."""

    def __init__(self, n_in, hidden, embed_dim, n_classes, *, rng=None):
        rng = as_generator(rng)
        self.backbone = MLP([n_in, *hidden, embed_dim], rng=rng)
        self.head = Linear(embed_dim, n_classes, init="glorot", rng=rng)

    def features(self, X):
        return self.backbone(X if isinstance(X, Tensor) else Tensor(X)).relu()

    def forward(self, X):
        return self.head(self.features(X))


def _random_hidden(rng):
    return [int(w) for w in rng.choice([16, 32, 64], size=int(rng.integers(1, 4)))]


class CHFL:
    """CHFL (module docstring) over K clients, each a dict with X_train, y_train (and for
    evaluation X_test, y_test) in its own feature space.

    Parameters
    ----------
    alpha : float, default 0.5          DKD weight (applied once)
    beta : float, default 5             temperature schedule amplitude
    embed_dim : int, default 16         the agreed embedding length E
    hidden : list of lists or None      backbone hidden widths per client (default random)
    lr, momentum : SGD (default 0.01, 0.9)
    optimizer : "sgd" (default) or "adam"
    batch_size : int, default 32
    strategy : "ours" (default), "solo", "avg", "avgkd"
    variant : "B" (default) or "A"      where the temperature acts (see dkd_loss)
    agg : "mean" (default), "sum", "weighted"
    teacher : "batch" (default) or "epoch"
    seed : int or numpy Generator
    """

    def __init__(self, *, alpha=0.5, beta=5.0, embed_dim=16, hidden=None, lr=0.01,
                 momentum=0.9, optimizer="sgd", batch_size=32, strategy="ours", variant="B",
                 agg="mean", teacher="batch", seed=0):
        for name, value, allowed in [("strategy", strategy, ("ours", "solo", "avg", "avgkd")),
                                     ("variant", variant, ("A", "B")),
                                     ("agg", agg, ("mean", "sum", "weighted")),
                                     ("teacher", teacher, ("batch", "epoch")),
                                     ("optimizer", optimizer, ("sgd", "adam"))]:
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        self.alpha, self.beta, self.embed_dim, self.hidden = alpha, beta, embed_dim, hidden
        self.lr, self.momentum, self.batch_size = lr, momentum, batch_size
        self.optimizer = optimizer
        self.strategy, self.variant, self.agg, self.teacher = strategy, variant, agg, teacher
        self.rng = as_generator(seed)
        self.history = []
        self.uploads = []  # per round: number of floats each client sent

    def _setup(self, clients, n_classes):
        self.clients, self.n_classes = clients, n_classes
        hidden = self.hidden or [_random_hidden(self.rng) for _ in clients]
        self.models = [ClientNet(c["X_train"].shape[1], h, self.embed_dim, n_classes, rng=self.rng)
                       for c, h in zip(clients, hidden)]
        server = Linear(self.embed_dim, n_classes, init="glorot", rng=self.rng)
        self.global_head = (server.weight.data.copy(), server.bias.data.copy())
        for m in self.models:
            m.head.weight.data, m.head.bias.data = (a.copy() for a in self.global_head)
        self.optimizers = [
            Adam(m.parameters(), self.lr) if self.optimizer == "adam"
            else SGD(m.parameters(), self.lr, momentum=self.momentum) for m in self.models]

    def _aggregate(self):
        heads = [(m.head.weight.data, m.head.bias.data) for m in self.models]
        if self.agg == "weighted":
            w = np.array([len(c["y_train"]) for c in self.clients], dtype=float)
            w /= w.sum()
        else:
            w = np.full(len(heads), 1.0 if self.agg == "sum" else 1.0 / len(heads))
        return tuple(sum(wk * h[j] for wk, h in zip(w, heads)) for j in range(2))

    def _local_epoch(self, k, tau, use_kd):
        model, opt, c = self.models[k], self.optimizers[k], self.clients[k]
        X, y = c["X_train"], c["y_train"]
        Wt, bt = self.global_head  # frozen teacher head
        if use_kd and self.teacher == "epoch":
            with no_grad():
                z_bar_all = model.features(X).data @ Wt + bt
        order = self.rng.permutation(len(y))
        losses = []
        for start in range(0, len(y), self.batch_size):
            batch = order[start:start + self.batch_size]
            opt.zero_grad()
            feats = model.features(X[batch])
            z = model.head(feats)
            loss = cross_entropy(z, y[batch])
            if use_kd:
                z_bar = (z_bar_all[batch] if self.teacher == "epoch"
                         else feats.data @ Wt + bt)
                loss = loss + self.alpha * dkd_loss(z, z_bar, y[batch], tau, self.variant)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return float(np.mean(losses))

    def fit(self, clients, rounds, *, n_classes=10, evaluate=True):
        """Train for T_max = ``rounds`` rounds (one epoch each); the schedule uses T_max."""
        if self.history:
            raise RuntimeError("fit() already ran; build a new CHFL (the schedule needs T_max)")
        self._setup(clients, n_classes)
        self.rounds = rounds
        kd_strategy = self.strategy in ("ours", "avgkd") and self.alpha > 0
        for r in range(1, rounds + 1):
            start = time.perf_counter()
            tau = temperature(r, rounds, self.beta)
            use_kd = kd_strategy and r >= 2
            loss = float(np.mean([self._local_epoch(k, tau, use_kd)
                                  for k in range(len(clients))]))
            if self.strategy != "solo":
                self.uploads.append([m.head.weight.size + m.head.bias.size for m in self.models])
                self.global_head = self._aggregate()
                if self.strategy in ("avg", "avgkd"):
                    for m in self.models:
                        m.head.weight.data, m.head.bias.data = (a.copy() for a in self.global_head)
            record = dict(round=r, temperature=tau, train_loss=loss)
            if evaluate and "X_test" in clients[0]:
                accs = [self.score_client(k, c["X_test"], c["y_test"])
                        for k, c in enumerate(clients)]
                teacher = [np.mean(self.predict_teacher(k, c["X_test"]) == c["y_test"])
                           for k, c in enumerate(clients)]
                record.update(client_acc_mean=float(np.mean(accs)),
                              client_acc_std=float(np.std(accs)),
                              teacher_acc_mean=float(np.mean(teacher)))
            record["seconds"] = time.perf_counter() - start
            self.history.append(record)
        return self

    def predict_client(self, k, X):
        """argmax h_k(g_k(x)): client k's own model, in its own feature space."""
        with no_grad():
            return self.models[k](X).numpy().argmax(axis=1)

    def predict_teacher(self, k, X):
        """Diagnostic: the aggregated head on client k's features, argmax h_bar(g_k(x))."""
        with no_grad():
            feats = self.models[k].features(X).data
        return (feats @ self.global_head[0] + self.global_head[1]).argmax(axis=1)

    def score_client(self, k, X, y):
        return float(np.mean(self.predict_client(k, X) == y))

    def best_mean_accuracy(self):
        """The paper's metric: the maximum over rounds of the mean client test accuracy."""
        return max(h["client_acc_mean"] for h in self.history)


def train_local_only(clients, rounds, **kwargs):
    """SOLO: each client trains its own backbone + head alone (same epochs, init and RNG use as
    CHFL). Returns the fitted ``CHFL(strategy="solo")``."""
    return CHFL(strategy="solo", **kwargs).fit(clients, rounds)


def train_pooled(clients, rounds, *, n_classes=10, embed_dim=16, hidden=None, lr=0.01,
                 momentum=0.9, batch_size=32, seed=0):
    """Centralised reference for the decoupled architecture: every client's backbone (same
    random architectures as CHFL with this seed) and ONE shared head, trained jointly on the
    union of the data (each epoch visits every client's batches in a shuffled interleaving).
    The inputs differ in dimension, so "one model on all data" needs per-domain backbones.
    Returns, after each round, the per-client test accuracies (each through its backbone
    and the shared head): ``[round][client]``, so that it is scored as CHFL and SOLO are
    (:meth:`CHFL.best_mean_accuracy`, the best round's mean; evaluating draws nothing)."""
    rng = as_generator(seed)
    hidden = hidden or [_random_hidden(rng) for _ in clients]
    backbones = [ClientNet(c["X_train"].shape[1], h, embed_dim, n_classes, rng=rng)
                 for c, h in zip(clients, hidden)]
    head = Linear(embed_dim, n_classes, init="glorot", rng=rng)
    for b in backbones:
        b.head = head
    params = [p for b in backbones for p in b.backbone.parameters()] + head.parameters()
    opt = SGD(params, lr, momentum=momentum)
    history = []
    for _ in range(rounds):
        steps = []
        for k, c in enumerate(clients):
            order = rng.permutation(len(c["y_train"]))
            steps += [(k, order[s:s + batch_size]) for s in range(0, len(order), batch_size)]
        for i in rng.permutation(len(steps)):
            k, batch = steps[i]
            opt.zero_grad()
            c = clients[k]
            cross_entropy(backbones[k](c["X_train"][batch]), c["y_train"][batch]).backward()
            opt.step()
        with no_grad():
            history.append([float(np.mean(b(c["X_test"]).numpy().argmax(axis=1) == c["y_test"]))
                            for b, c in zip(backbones, clients)])
    return history
