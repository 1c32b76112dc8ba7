"""APFed: active-passive federated learning for vertically partitioned multi-view data
(Liu et al., arXiv 2409.04111), on the torch-free autograd ``baselines.autograd``.

Setting (docs/baselines.md, section APFed). The same N aligned samples are
described by m views. The **active client** holds view x^A, all labels y and the whole
predictive model: encoder f_A (x^A -> h^A) and task head g_T (h^A -> logits). Each **passive
client** p holds view x^p and a private network; it never sees labels. Per mini-batch the
active client sends the batch's sample IDs and a detached copy of its representation, each
passive client treats it as a leaf, computes its own loss L_p, steps its own optimiser and
returns dL_p/d(received). The active client combines

    dL/dh^A = dL_A/dh^A + lam * sum_p dL_p/dh^A           (paper Eq. 9)

and pushes it into f_A with ``h.backward(G)`` (Eq. 10). Inference (Eq. 11) uses the active
client alone: argmax g_T(f_A(x^A)), dropout off.

Variants (``variant``):

* ``"R"`` (APFed-R): passive p reconstructs its own view from h^A with a decoder
  DEC_p: d -> hidden -> D_p (sigmoid output, views are in [0, 1]); L_p = MSE (mean over the
  batch and every element, as ``nn.MSELoss`` in the authors' code).
* ``"C"`` (APFed-C): passive p encodes its view, h^p = ENC_p(x^p), projects z^p = P_p(h^p);
  the active client sends z^A = P_A(h^A) (P_A is the active client's, trained only by the
  lam-scaled passive gradients, then backpropagated into f_A). L_p = NT-Xent with tau.
  Reading chosen: the **code's symmetric** NT-Xent (every one of the 2N' rows of
  [z^A; z^p] is an anchor, mean over 2N'); ``contrastive="paper"`` gives the paper's Eq. 14-16
  (active anchors only, mean over N'; same 2N'-1 term denominator).

Small MLP configuration (for 8x8 digits): f_A = D_A -> 64 -> 32 with ReLU after each
layer (d = 32); g_T = 32 -> 32, ReLU, dropout 0.5, -> C; DEC_p = 32 -> 64 -> D_p; ENC_p =
D_p -> 64 -> 32 (ReLU after each); P_A, P_p = Linear(32 -> 16); tau = 1. Every module has its
own SGD (momentum 0.9, weight decay 1e-4), learning rate 1e-2 (for the small
data sets; the paper's 1e-3 relies on ~70k steps), batch 64, lam = 1.

References for the comparison: :class:`SingleVL` (the active client alone, = lam 0) and
:class:`PooledVL` (the same active architecture on all views concatenated). TVFL-0/A/R are not
implemented.

Randomness: one seed; separate streams (``numpy.random.default_rng((seed, stream))``) for the
active initialisation, the batch order, the dropout masks and each passive client's
initialisation, so lam = 0 (or no passive client) reproduces SingleVL bit for bit.
"""

import numpy as np

from baselines._deep_views import horizontal_strips, minibatches, stratified_split
from baselines.autograd import (
    MLP,
    SGD,
    Linear,
    Module,
    Tensor,
    concat,
    cross_entropy,
    dropout,
    logsumexp,
    mse,
    no_grad,
)

# random streams (seed, stream)
_INIT, _BATCHES, _DROPOUT, _PASSIVE = 0, 1, 2, 10


def nt_xent(z_a, z_p, tau=1.0, symmetric=True):
    """NT-Xent between two views of the same batch (rows aligned), on Tensors.

    Rows of [z_a; z_p] are L2-normalised; s = Z Z^T / tau with the diagonal (self pairs)
    removed. Row r's positive is the same sample in the other view; its denominator is all
    2n - 1 non-self rows. ``symmetric``: mean over all 2n rows (the APFed code); otherwise
    mean over the n rows of z_a (the paper's Eq. 14-16, active embeddings as anchors).
    """
    n = z_a.shape[0]
    z = concat([z_a, z_p], axis=0)
    zn = z * ((z * z).sum(axis=1, keepdims=True) + 1e-12) ** -0.5
    s = (zn @ zn.T) * (1.0 / tau)
    masked = s + Tensor(np.diag(np.full(2 * n, -1e30)))
    rows = np.arange(2 * n)
    positive = np.concatenate([np.arange(n, 2 * n), np.arange(n)])
    per_row = logsumexp(masked, axis=1) - s[rows, positive]
    return per_row.mean() if symmetric else per_row[:n].mean()


class _Encoder(Module):
    """MLP with ReLU after every layer (the code puts one after the last conv too)."""

    def __init__(self, sizes, rng):
        self.mlp = MLP(sizes, "relu", rng=rng)

    def forward(self, x):
        return self.mlp(x).relu()


class _TaskHead(Module):
    """g_T: Linear -> ReLU -> dropout -> Linear."""

    def __init__(self, d, hidden, n_classes, p_drop, rng):
        self.fc1 = Linear(d, hidden, rng=rng)
        self.fc2 = Linear(hidden, n_classes, init="glorot", rng=rng)
        self.p_drop = p_drop

    def forward(self, h, rng=None):
        a = self.fc1(h).relu()
        if rng is not None and self.p_drop > 0:
            a = dropout(a, self.p_drop, rng)
        return self.fc2(a)


class PassiveClient:
    """A passive party: its private view (indexed by sample ID), its private network and
    optimiser. Its whole interface is :meth:`respond`; it never receives labels."""

    def __init__(self, view, variant, d, *, hidden=64, proj_dim=16, tau=1.0, symmetric=True,
                 lr=1e-2, momentum=0.9, weight_decay=1e-4, rng=0):
        self._x = np.asarray(view, dtype=float)
        self.variant, self.tau, self.symmetric = variant, tau, symmetric
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        D = self._x.shape[1]
        if variant == "R":
            self.decoder = MLP([d, hidden, D], "relu", rng=rng)
            params = self.decoder.parameters()
        else:
            self.encoder = _Encoder([D, hidden, d], rng)
            self.proj = Linear(d, proj_dim, init="glorot", rng=rng)
            params = self.encoder.parameters() + self.proj.parameters()
        self.params = params
        self.opt = SGD(params, lr, momentum=momentum, weight_decay=weight_decay)

    def loss(self, ids, received):
        """L_p for the batch ``ids`` given the received tensor (a Tensor)."""
        x = Tensor(self._x[ids])
        if self.variant == "R":
            return mse(self.decoder(received).sigmoid(), x)
        return nt_xent(received, self.proj(self.encoder(x)), self.tau, self.symmetric)

    def respond(self, ids, received):
        """Treat ``received`` (array) as a leaf, step on L_p, return (L_p, dL_p/d received)."""
        leaf = Tensor(np.array(received, dtype=float), requires_grad=True)
        loss = self.loss(ids, leaf)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item(), leaf.grad


class APFed:
    """APFed-R / APFed-C (``variant``) with ``lam`` the weight of the passive gradients.

    ``fit(x_active, y, passive_views, epochs)`` trains; ``predict(x_active)`` uses the active
    client only. ``history``: one dict per epoch with ``train_loss`` (mean task CE over the
    epoch's batches), ``passive_loss`` (per passive client, mean L_p), ``train_accuracy`` and
    ``accuracy`` (on ``eval_data``, None without it).
    """

    name = "APFed"

    def __init__(self, variant="R", *, lam=1.0, hidden=64, d=32, head_hidden=32, proj_dim=16,
                 p_drop=0.5, tau=1.0, contrastive="symmetric", lr=1e-2, momentum=0.9,
                 weight_decay=1e-4, batch_size=64, seed=0):
        if variant not in ("R", "C"):
            raise ValueError(f"variant must be 'R' or 'C', got {variant!r}")
        if contrastive not in ("symmetric", "paper"):
            raise ValueError(f"contrastive must be 'symmetric' or 'paper', got {contrastive!r}")
        if lam < 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        self.variant, self.lam = variant, float(lam)
        self.hidden, self.d, self.head_hidden, self.proj_dim = hidden, d, head_hidden, proj_dim
        self.p_drop, self.tau, self.symmetric = p_drop, tau, contrastive == "symmetric"
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.history = []
        self.passives = []

    def _rng(self, *stream):
        return np.random.default_rng((self.seed,) + stream)

    def _sgd(self, params):
        return SGD(params, self.lr, momentum=self.momentum, weight_decay=self.weight_decay)

    def _build(self, x_active, n_classes, passive_views):
        rng = self._rng(_INIT)
        self.n_classes = n_classes
        self.f_A = _Encoder([x_active.shape[1], self.hidden, self.d], rng)
        self.g_T = _TaskHead(self.d, self.head_hidden, n_classes, self.p_drop, rng)
        self.opt_f, self.opt_g = self._sgd(self.f_A.parameters()), self._sgd(self.g_T.parameters())
        if self.variant == "C":
            self.P_A = Linear(self.d, self.proj_dim, init="glorot", rng=rng)
            self.opt_p = self._sgd(self.P_A.parameters())
        self.passives = [
            PassiveClient(v, self.variant, self.d, hidden=self.hidden, proj_dim=self.proj_dim,
                          tau=self.tau, symmetric=self.symmetric, lr=self.lr,
                          momentum=self.momentum, weight_decay=self.weight_decay,
                          rng=self._rng(_PASSIVE + p))
            for p, v in enumerate(passive_views)]

    def _step(self, x_active, y, ids, drop_rng):
        """One mini-batch of Algorithm 1; returns (task loss, [L_p])."""
        h = self.f_A(Tensor(x_active[ids]))                      # 1. active forward
        h_leaf = Tensor(h.data.copy(), requires_grad=True)
        if self.variant == "C":
            z = self.P_A(h_leaf)
            sent = z.data
        else:
            sent = h_leaf.data
        replies = [p.respond(ids, sent.copy()) for p in self.passives]   # 2. passives
        task = cross_entropy(self.g_T(h_leaf, drop_rng), y[ids])          # 3. active
        self.opt_g.zero_grad()
        task.backward()                                                   # h_leaf.grad = g_task
        self.opt_g.step()
        if replies:
            g_passive = self.lam * sum(g for _, g in replies)
            if self.variant == "C":
                self.opt_p.zero_grad()
                z.backward(g_passive)                                     # into P_A and h_leaf
                self.opt_p.step()
            else:
                h_leaf.grad = h_leaf.grad + g_passive
        self.opt_f.zero_grad()
        h.backward(h_leaf.grad)                                           # G into f_A
        self.opt_f.step()
        return task.item(), [loss for loss, _ in replies]

    def fit(self, x_active, y, passive_views=(), epochs=50, eval_data=None):
        x_active = np.asarray(x_active, dtype=float)
        y = np.asarray(y, dtype=np.int64)
        for v in passive_views:
            if len(v) != len(x_active):
                raise ValueError("every passive view must hold the same aligned samples")
        self._build(x_active, int(y.max()) + 1, passive_views)
        batch_rng, drop_rng = self._rng(_BATCHES), self._rng(_DROPOUT)
        self.history = []
        for epoch in range(epochs):
            task, passive = [], []
            for ids in minibatches(len(y), self.batch_size, batch_rng):
                t, p = self._step(x_active, y, ids, drop_rng)
                task.append(t)
                passive.append(p)
            record = dict(epoch=epoch + 1, train_loss=float(np.mean(task)),
                          passive_loss=[float(np.mean(col)) for col in zip(*passive)],
                          train_accuracy=self.score(x_active, y), accuracy=None)
            if eval_data is not None:
                record["accuracy"] = self.score(*eval_data)
            self.history.append(record)
        return self

    def decision_function(self, x_active):
        """Logits g_T(f_A(x^A)), dropout off: the active client alone."""
        with no_grad():
            return self.g_T(self.f_A(Tensor(np.asarray(x_active, dtype=float)))).numpy()

    def predict(self, x_active):
        return self.decision_function(x_active).argmax(axis=1)

    def score(self, x_active, y):
        return float(np.mean(self.predict(x_active) == np.asarray(y)))


class SingleVL(APFed):
    """The active client alone (the paper's SingleVL; = APFed with lam = 0)."""

    name = "SingleVL"

    def fit(self, x_active, y, passive_views=(), epochs=50, eval_data=None):
        return super().fit(x_active, y, (), epochs, eval_data)


class PooledVL(APFed):
    """Pooled reference: the active architecture on all views concatenated (x = [x^A, x^1..]),
    no passive clients. ``fit(views, y)``, ``predict(views)`` take the list of views."""

    name = "PooledVL"

    def fit(self, views, y, passive_views=(), epochs=50, eval_data=None):
        if eval_data is not None:
            eval_data = (np.hstack(eval_data[0]), eval_data[1])
        return super().fit(np.hstack(views), y, (), epochs, eval_data)

    def decision_function(self, views):
        """Logits on the concatenated views (a list of views, or one concatenated array)."""
        return super().decision_function(
            np.hstack(views) if isinstance(views, (list, tuple)) else views)


def digits_views(m=2, active=0, test_fraction=0.3, seed=0):
    """scikit-learn's 8x8 digits scaled to [0, 1], cut into m horizontal strips of floor(8/m)
    rows (setting "m-i": strip ``active`` is the active view, the others passive).

    Returns dict(train=(x_active, [passive views], y), test=(x_active, [passive views], y)).
    """
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    strips = horizontal_strips(X / 16.0, 8, 8, m)
    train, test = stratified_split(y, test_fraction, np.random.default_rng((seed, 99)))
    out = {}
    for name, idx in (("train", train), ("test", test)):
        views = [s[idx] for s in strips]
        out[name] = (views[active], views[:active] + views[active + 1:], y[idx])
    return out
