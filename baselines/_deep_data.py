"""Offline data and small training helpers shared by the deep baselines (HyFEM-deep, CHFL, and
any other method on ``baselines.autograd``).

Data (all offline: scikit-learn's bundled ``load_digits``, 1,797 grey 8x8 images, 10 classes,
pixels scaled to [0, 1] as float64):

* :func:`load_digits_split` -- a stratified, seeded train/test split.
* :func:`image_blocks` -- column indices of rectangular feature blocks of a flattened image
  (``grid=(2, 2)``: the four quadrants TL, TR, BL, BR; ``grid=(4, 1)``: four horizontal strips).
* :func:`hybrid_partition` -- the hybrid-FL pattern of HyFEM (App. C.1 / Table 4): client m
  holds a block set I_m and *all* training samples of its classes (so a sample may live on
  several clients, each seeing different blocks of it).
* :func:`digits_blocks` -- the two together on digits: per-client (block ids, sample ids,
  labels), plus the full-feature train/test matrices and the block column map.
* :func:`dirichlet_split` -- disjoint sample sets with Dir(alpha) label skew (CHFL, FedLab).
* :func:`digits_domains` -- CHFL's cross-domain proxy: disjoint Dir-skewed clients, each in its
  own feature space (grey, tinted colour, inverted + rotated).

Training references (generic over any ``Module`` mapping a feature matrix to logits):

* :func:`train_classifier` -- minibatch SGD/Adam on softmax cross-entropy for a fixed number
  of steps, every draw from one ``numpy.random.Generator``.
* :func:`accuracy`, :func:`predict` -- argmax inference under ``no_grad``.
* :func:`train_local_only` / :func:`train_pooled` -- each client alone on its own features, or
  one model on the union; the method modules wrap these with their own architectures.
"""

from dataclasses import dataclass

import numpy as np

from baselines.autograd import SGD, Adam, Tensor, as_generator, cross_entropy, no_grad

__all__ = [
    "ClientData",
    "accuracy",
    "digits_blocks",
    "digits_domains",
    "dirichlet_split",
    "hybrid_partition",
    "image_blocks",
    "load_digits_split",
    "predict",
    "train_classifier",
    "train_local_only",
    "train_pooled",
    "HYFEM_C1_BLOCKS",
    "HYFEM_C1_CLASSES",
]

# HyFEM App. C.1 / Table 4 on quadrant blocks (0-indexed: 0=TL, 1=TR, 2=BL, 3=BR).
HYFEM_C1_BLOCKS = ((0, 1, 2), (0, 1, 2), (0, 2, 3), (0, 2, 3), (0, 2), (0, 2))
HYFEM_C1_CLASSES = tuple(tuple(range(5)) if m % 2 == 0 else tuple(range(5, 10)) for m in range(6))


@dataclass(frozen=True)
class ClientData:
    """One client's share of a hybrid data set.

    blocks : tuple of int
        Block ids I_m (sorted), indices into the block column map.
    samples : ndarray of int
        Row ids N_m into the (full-feature) training matrix.
    labels : ndarray of int
        y_n for n in ``samples``.
    """

    blocks: tuple
    samples: np.ndarray
    labels: np.ndarray

    def features(self, X, block_columns):
        """The client's matrix x_m = P_m x_0: its rows, and its blocks' columns in block order."""
        return X[np.ix_(self.samples, columns_of(self.blocks, block_columns))]


def columns_of(blocks, block_columns):
    """Concatenated column indices of ``blocks`` (in the given order)."""
    return np.concatenate([np.asarray(block_columns[i]) for i in blocks])


def load_digits_split(test_size=0.25, seed=0):
    """(X_train, y_train, X_test, y_test) from ``load_digits``, pixels / 16, stratified by class.

    The split is a seeded per-class permutation (no scikit-learn splitter state involved).
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    X, y = data.data.astype(np.float64) / 16.0, data.target.astype(np.int64)
    rng = as_generator(seed)
    test = []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        test.append(idx[: int(round(test_size * len(idx)))])
    test = np.sort(np.concatenate(test))
    train = np.setdiff1d(np.arange(len(y)), test)
    return X[train], y[train], X[test], y[test]


def image_blocks(shape=(8, 8), grid=(2, 2), channels=1):
    """Column indices of the blocks of a flattened (channels, H, W) image, row-major blocks.

    ``grid=(gr, gc)`` cuts H into gr and W into gc equal parts; with ``channels > 1`` every
    (cell, channel) pair is its own block (HyFEM's quadrant x RGB = 12 blocks), cell-major.
    """
    h, w = shape
    gr, gc = grid
    if h % gr or w % gc:
        raise ValueError(f"grid {grid} does not divide image shape {shape}")
    index = np.arange(channels * h * w).reshape(channels, h, w)
    blocks = []
    for r in range(gr):
        for c in range(gc):
            cell = index[:, r * h // gr:(r + 1) * h // gr, c * w // gc:(c + 1) * w // gc]
            blocks += [cell[ch].ravel() for ch in range(channels)]
    return blocks


def hybrid_partition(y, client_blocks, client_classes, *, fraction=1.0, rng=None):
    """HyFEM's hybrid partition: client m gets blocks ``client_blocks[m]`` and the samples of
    its classes ``client_classes[m]``.

    ``fraction=1`` gives every client *all* samples of its classes (the paper's setting, N_m =
    classes x per-class count); ``fraction < 1`` keeps a seeded random subset of that size.
    """
    if len(client_blocks) != len(client_classes):
        raise ValueError("client_blocks and client_classes must have one entry per client")
    rng = as_generator(rng)
    y = np.asarray(y)
    clients = []
    for blocks, classes in zip(client_blocks, client_classes):
        samples = np.flatnonzero(np.isin(y, classes))
        if fraction < 1.0:
            keep = int(round(fraction * len(samples)))
            samples = np.sort(rng.choice(samples, keep, replace=False))
        clients.append(ClientData(tuple(sorted(blocks)), samples, y[samples]))
    return clients


def digits_blocks(client_blocks=HYFEM_C1_BLOCKS, client_classes=HYFEM_C1_CLASSES, *,
                  grid=(2, 2), test_size=0.25, seed=0, fraction=1.0):
    """Digits cut into blocks and partitioned the hybrid way (default: HyFEM App. C.1 on
    quadrants, 6 clients, blocks {1,2,3},{1,2,3},{1,3,4},{1,3,4},{1,3},{1,3}, classes 0-4 / 5-9
    alternating).

    Returns a dict with ``X_train, y_train, X_test, y_test`` (full features), ``block_columns``
    (list of column-index arrays), ``clients`` (list of :class:`ClientData`) and ``n_classes``.
    """
    X_tr, y_tr, X_te, y_te = load_digits_split(test_size, seed)
    block_columns = image_blocks((8, 8), grid)
    clients = hybrid_partition(y_tr, client_blocks, client_classes, fraction=fraction,
                               rng=np.random.default_rng([seed, 1]))
    return dict(X_train=X_tr, y_train=y_tr, X_test=X_te, y_test=y_te,
                block_columns=block_columns, clients=clients, n_classes=10)


def dirichlet_split(y, n_clients, alpha=0.5, *, rng=None, min_size=10):
    """Disjoint sample sets with label skew: each class is split over the clients with
    proportions ~ Dir(alpha 1_K) (FedLab style); redrawn until every client has ``min_size``
    samples. ``alpha=None`` gives an IID (uniform random) split. Returns sorted index arrays."""
    rng = as_generator(rng)
    y = np.asarray(y)
    if alpha is None:
        return [np.sort(part) for part in np.array_split(rng.permutation(len(y)), n_clients)]
    for _ in range(1000):
        parts = [[] for _ in range(n_clients)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            shares = np.cumsum(rng.dirichlet(alpha * np.ones(n_clients)))[:-1]
            cuts = (shares * len(idx)).astype(int)
            for k, piece in enumerate(np.split(idx, cuts)):
                parts[k].append(piece)
        parts = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(p) for p in parts) >= min_size:
            return parts
    raise RuntimeError("dirichlet_split: could not give every client min_size samples")


# --- training references --------------------------------------------------------------------


def predict(model, X):
    """argmax of ``model(Tensor(X))`` rows, without recording a graph."""
    with no_grad():
        return np.asarray(model(Tensor(X)).numpy().argmax(axis=1))


def accuracy(model, X, y):
    """Fraction of rows of X that ``model`` classifies as y."""
    return float(np.mean(predict(model, X) == np.asarray(y))) if len(y) else float("nan")


def train_classifier(model, X, y, *, steps, batch_size=32, lr=0.05, optimizer="sgd",
                     momentum=0.0, rng=None):
    """``steps`` minibatch steps of softmax cross-entropy on (X, y); batches drawn uniformly
    without replacement within a batch, from ``rng``. Returns the list of batch losses."""
    rng = as_generator(rng)
    params = model.parameters()
    opt = Adam(params, lr) if optimizer == "adam" else SGD(params, lr, momentum=momentum)
    y = np.asarray(y)
    losses = []
    for _ in range(steps):
        batch = rng.choice(len(y), min(batch_size, len(y)), replace=False)
        opt.zero_grad()
        loss = cross_entropy(model(Tensor(X[batch])), y[batch])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_local_only(make_model, client_X, client_y, *, steps, rng=None, **train_kwargs):
    """Each client alone: ``make_model(k, rng)`` builds client k's model, trained on
    (client_X[k], client_y[k]) for ``steps`` steps. Returns the list of trained models."""
    rng = as_generator(rng)
    models = []
    for k, (X, y) in enumerate(zip(client_X, client_y)):
        model = make_model(k, rng)
        train_classifier(model, X, y, steps=steps, rng=rng, **train_kwargs)
        models.append(model)
    return models


def train_pooled(make_model, X, y, *, steps, rng=None, **train_kwargs):
    """One model ``make_model(rng)`` trained on the pooled (X, y). Returns the model."""
    rng = as_generator(rng)
    model = make_model(rng)
    train_classifier(model, X, y, steps=steps, rng=rng, **train_kwargs)
    return model


def digits_domains(n_clients=3, *, alpha=0.5, test_size=0.25, seed=0):
    """CHFL's "DIGIT" proxy: digits split into ``n_clients`` disjoint sample sets with
    Dir(``alpha``) label skew (``alpha=None``: IID), each client seeing its samples through its
    own feature space (cycling through three domains):

    * domain 0, grey: the raw 64 pixels;
    * domain 1, MNIST-M-like: 3 x 64 colour pixels, a random per-sample tint U(0.5, 1) per
      channel on the digit and U(0, 0.3) background noise where the digit is not (192 features);
    * domain 2, SynDigits-like: inverted pixels under a fixed random rotation of R^64.

    Each client's samples are then split into train/test (``test_size``). Returns a list of
    dicts with ``X_train, y_train, X_test, y_test, domain`` (float64 features, int64 labels).
    """
    from sklearn.datasets import load_digits

    data = load_digits()
    X, y = data.data.astype(np.float64) / 16.0, data.target.astype(np.int64)
    rng = as_generator(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((64, 64)))
    parts = dirichlet_split(y, n_clients, alpha, rng=rng)
    out = []
    for k, idx in enumerate(parts):
        domain = k % 3
        Xk = X[idx]
        if domain == 1:
            tint = rng.uniform(0.5, 1.0, size=(len(Xk), 3, 1))
            noise = rng.uniform(0.0, 0.3, size=(len(Xk), 3, 64))
            Xk = np.clip(Xk[:, None, :] * tint + (1.0 - Xk[:, None, :]) * noise, 0.0, 1.0)
            Xk = Xk.reshape(len(Xk), -1)
        elif domain == 2:
            Xk = (1.0 - Xk) @ rotation
        perm = rng.permutation(len(idx))
        n_test = int(round(test_size * len(idx)))
        te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
        out.append(dict(X_train=Xk[tr], y_train=y[idx][tr], X_test=Xk[te], y_test=y[idx][te],
                        domain=domain))
    return out
