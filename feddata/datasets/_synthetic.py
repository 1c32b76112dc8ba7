"""Seeded synthetic data with the shape and sparsity of the paper's data sets.

Each generator is a pure function of its arguments: the same seed gives the same bits.
"""

import numpy as np
import scipy.sparse as sp

from feddata.datasets._base import make_dataset

NEWS20_SHAPE = (19_996, 1_355_191)
NEWS20_DENSITY = 9_097_916 / (19_996 * 1_355_191)  # about 0.034% non-zero
COVTYPE_SHAPE = (581_012, 54)
MNIST_SHAPE = (70_000, 784)


def _balanced_labels(rng, margin, flip):
    """+-1 split at the median margin, then a fraction ``flip`` of labels flipped."""
    y = np.where(margin > np.median(margin), 1.0, -1.0)
    flips = rng.random(y.shape[0]) < flip
    y[flips] = -y[flips]
    return y


def make_news20_like(n_samples=NEWS20_SHAPE[0], n_features=NEWS20_SHAPE[1], *,
                     density=NEWS20_DENSITY, label_noise=0.03, seed=0):
    """Text-like sparse binary data (default 19,996 x 1,355,191, ~0.034% non-zero).

    Document lengths are log-normal; words follow a Zipf law over a seeded permutation of
    the feature ids; values are log-normal term weights, each row scaled to unit norm as in
    news20.binary; labels are +-1, balanced, from a hidden linear model with label noise.
    """
    rng = np.random.default_rng(seed)
    mean_len = density * n_features
    lengths = np.maximum(1, rng.lognormal(np.log(mean_len) - 0.32, 0.8, n_samples)).astype(np.int64)
    lengths = np.minimum(lengths, n_features)
    popularity = 1.0 / (np.arange(n_features) + 20.0)
    cdf = np.cumsum(popularity)
    cdf /= cdf[-1]
    word_of_rank = rng.permutation(n_features)
    draws = np.searchsorted(cdf, rng.random(int(lengths.sum())), side="right")
    cols = word_of_rank[np.minimum(draws, n_features - 1)]
    rows = np.repeat(np.arange(n_samples), lengths)
    vals = rng.lognormal(0.0, 0.5, cols.shape[0])
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n_samples, n_features))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / norms) @ X
    w_true = rng.normal(size=n_features)
    y = _balanced_labels(rng, X @ w_true, label_noise)
    return make_dataset(X, y, name="news20-like", source=f"synthetic, seed={seed}")


def make_covtype_like(n_samples=COVTYPE_SHAPE[0], *, label_noise=0.15, seed=0):
    """Dense cartographic-like binary data (default 581,012 x 54), as covtype.binary is laid
    out: 10 correlated continuous features scaled to [0, 1], a one-hot wilderness area (4)
    and a one-hot soil type (40); labels +-1 from a non-linear rule with label noise."""
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(10, 10)) / np.sqrt(10)
    cont = rng.normal(size=(n_samples, 10)) @ mix
    cont = (cont - cont.min(axis=0)) / (cont.max(axis=0) - cont.min(axis=0))
    wilderness = rng.choice(4, size=n_samples, p=[0.45, 0.05, 0.44, 0.06])
    soil = rng.choice(40, size=n_samples, p=rng.dirichlet(np.full(40, 0.5)))
    X = np.zeros((n_samples, 54))
    X[:, :10] = cont
    X[np.arange(n_samples), 10 + wilderness] = 1.0
    X[np.arange(n_samples), 14 + soil] = 1.0
    margin = (cont @ rng.normal(size=10) + 2.0 * (cont[:, 0] - 0.5) ** 2
              + rng.normal(size=4)[wilderness] + 0.5 * rng.normal(size=40)[soil])
    y = _balanced_labels(rng, margin, label_noise)
    return make_dataset(X, y, name="covtype-like", source=f"synthetic, seed={seed}")


def _class_prototypes(rng, n_classes, side):
    """Each class: a 28 x 28 image of three Gaussian strokes, peak value 1."""
    grid = np.arange(side)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    protos = np.zeros((n_classes, side, side))
    for c in range(n_classes):
        for _ in range(3):
            cy, cx = rng.uniform(side * 0.25, side * 0.75, 2)
            sy, sx = rng.uniform(1.5, 4.5, 2)
            protos[c] += np.exp(-((yy - cy) ** 2 / (2 * sy**2) + (xx - cx) ** 2 / (2 * sx**2)))
        protos[c] /= protos[c].max()
    return protos


def make_mnist_like(n_samples=MNIST_SHAPE[0], *, n_classes=10, side=28, noise=0.25,
                    seed=0, chunk=10_000):
    """Image-like 10-class data (default 70,000 x 784, about 20% non-zero, values in
    [0, 1]): a class prototype shifted by up to 3 pixels, scaled, with pixel noise, small
    values cut to zero. Returned sparse, with ``image_shape = (side, side)``."""
    rng = np.random.default_rng(seed)
    protos = _class_prototypes(rng, n_classes, side)
    y = rng.integers(0, n_classes, n_samples)
    blocks = []
    for start in range(0, n_samples, chunk):
        labels = y[start:start + chunk]
        imgs = protos[labels] * rng.uniform(0.6, 1.0, (labels.size, 1, 1))
        shifts = rng.integers(-3, 4, (labels.size, 2))
        for dy in range(-3, 4):
            for dx in range(-3, 4):
                sel = (shifts[:, 0] == dy) & (shifts[:, 1] == dx)
                imgs[sel] = np.roll(imgs[sel], (dy, dx), axis=(1, 2))
        imgs += noise * rng.normal(size=imgs.shape)
        imgs[imgs < 0.3] = 0.0
        blocks.append(sp.csr_matrix(np.minimum(imgs, 1.0).reshape(labels.size, -1)))
    return make_dataset(sp.vstack(blocks, format="csr"), y, name="mnist-like",
                        source=f"synthetic, seed={seed}", image_shape=(side, side))
