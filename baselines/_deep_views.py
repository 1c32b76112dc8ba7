"""Small, generic data helpers for the deep baselines FLIC and APFed (NumPy only).

* ``horizontal_strips`` cuts flattened images into m horizontal strips of floor(H/m) rows
  (leftover bottom rows dropped), APFed's view construction.
* ``column_blocks`` splits the columns of a table into contiguous blocks (tabular views).
* ``stratified_split`` is a seeded, per-class train/test split of sample indices.
* ``minibatches`` yields shuffled index batches from a Generator.
* ``heterogeneous_toy`` is FLIC's toy "linear mapping" / "noisy features" generator: one
  Gaussian C-class problem in a base space, clients that see a few classes each through their
  own feature map (so every client has its own input dimension).
* ``pad_blocks`` places client-specific features in disjoint column blocks of one wide table
  (zeros elsewhere): the input of a pooled reference model over heterogeneous feature spaces.

Every random choice comes from a ``numpy.random.Generator`` (or an int seed turned into one).
"""

import numpy as np


def _rng(rng):
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def horizontal_strips(X, height, width, m):
    """Cut images (rows of ``X``, flattened height x width) into ``m`` horizontal strips.

    Each strip has floor(height / m) image rows, flattened; the bottom height mod m rows are
    dropped (the APFed code's rule). Returns a list of m arrays of shape (n, rows * width).
    """
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] != height * width:
        raise ValueError(f"X must be (n, {height * width}), got {X.shape}")
    if not 1 <= m <= height:
        raise ValueError(f"need 1 <= m <= height = {height}, got m = {m}")
    rows = height // m
    images = X.reshape(len(X), height, width)
    return [images[:, i * rows:(i + 1) * rows, :].reshape(len(X), -1).copy() for i in range(m)]


def column_blocks(X, n_blocks):
    """Split the columns of ``X`` into ``n_blocks`` contiguous, near-equal blocks."""
    X = np.asarray(X)
    if not 1 <= n_blocks <= X.shape[1]:
        raise ValueError(f"need 1 <= n_blocks <= {X.shape[1]}, got {n_blocks}")
    return [X[:, idx].copy() for idx in np.array_split(np.arange(X.shape[1]), n_blocks)]


def stratified_split(y, test_fraction, rng):
    """(train indices, test indices): within each class a seeded shuffle, the first
    round(test_fraction * n_c) to test (at least one when the class has two or more)."""
    y = np.asarray(y)
    rng = _rng(rng)
    train, test = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = int(round(test_fraction * len(idx)))
        if len(idx) >= 2:
            n_test = min(max(n_test, 1), len(idx) - 1)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def minibatches(n, batch_size, rng, shuffle=True):
    """Index arrays covering range(n) once, in batches of ``batch_size`` (last one smaller)."""
    order = _rng(rng).permutation(n) if shuffle else np.arange(n)
    for start in range(0, n, batch_size):
        yield order[start:start + batch_size]


def heterogeneous_toy(kind="linear_mapping", *, n_clients=10, n_classes=10, classes_per_client=3,
                      base_dim=5, n_train_per_class=200, n_test_per_class=100,
                      dim_range=(3, 100), noise_range=(1, 10), centre_scale=None, rng=0):
    """FLIC's toy problems (its §5): a C-class Gaussian problem in R^base_dim seen by clients
    through client-specific feature spaces.

    Class centres ~ N(0, s^2 I) (s = 0.5 for "linear_mapping", 0.8 for "noisy_features", as in
    the paper, unless ``centre_scale`` gives s);
    samples ~ N(centre, I). Each client draws ``classes_per_client`` distinct classes; a
    class's train (test) samples are shared equally among the clients holding it.
    "linear_mapping": client i maps x -> x L_i with L_i ~ N(0, 1)^{base_dim x d_i},
    d_i ~ U{dim_range}. "noisy_features": client i appends U{noise_range} N(0, 1) columns.

    Returns a list of dicts ``{"X", "y", "X_test", "y_test", "classes"}`` (one per client).
    """
    if kind not in ("linear_mapping", "noisy_features"):
        raise ValueError(f"kind must be 'linear_mapping' or 'noisy_features', got {kind!r}")
    if not 1 <= classes_per_client <= n_classes:
        raise ValueError("need 1 <= classes_per_client <= n_classes")
    rng = _rng(rng)
    scale = centre_scale if centre_scale is not None else (
        0.5 if kind == "linear_mapping" else 0.8)
    centres = rng.normal(0.0, scale, size=(n_classes, base_dim))
    held = [np.sort(rng.choice(n_classes, classes_per_client, replace=False))
            for _ in range(n_clients)]
    holders = {c: [i for i in range(n_clients) if c in held[i]] for c in range(n_classes)}
    parts = [{"X": [], "y": [], "X_test": [], "y_test": []} for _ in range(n_clients)]
    for c in range(n_classes):
        if not holders[c]:
            continue
        for key, n in (("X", n_train_per_class), ("X_test", n_test_per_class)):
            x = centres[c] + rng.normal(size=(n, base_dim))
            for i, chunk in zip(holders[c], np.array_split(x, len(holders[c]))):
                parts[i][key].append(chunk)
                parts[i]["y" if key == "X" else "y_test"].append(np.full(len(chunk), c))
    clients = []
    for i in range(n_clients):
        X, X_test = np.concatenate(parts[i]["X"]), np.concatenate(parts[i]["X_test"])
        if kind == "linear_mapping":
            L = rng.normal(size=(base_dim, int(rng.integers(dim_range[0], dim_range[1] + 1))))
            X, X_test = X @ L, X_test @ L
        else:
            extra = int(rng.integers(noise_range[0], noise_range[1] + 1))
            X = np.hstack([X, rng.normal(size=(len(X), extra))])
            X_test = np.hstack([X_test, rng.normal(size=(len(X_test), extra))])
        clients.append({"X": X, "y": np.concatenate(parts[i]["y"]), "X_test": X_test,
                        "y_test": np.concatenate(parts[i]["y_test"]), "classes": held[i]})
    return clients


def pad_blocks(blocks, dims):
    """Stack client tables into one wide table: client i's columns go to its own block
    (offset sum(dims[:i])), zeros elsewhere. ``blocks`` is a list of (n_i, dims[i]) arrays."""
    offsets = np.concatenate([[0], np.cumsum(dims)])
    out = np.zeros((sum(len(b) for b in blocks), int(offsets[-1])))
    row = 0
    for i, b in enumerate(blocks):
        out[row:row + len(b), offsets[i]:offsets[i + 1]] = b
        row += len(b)
    return out
