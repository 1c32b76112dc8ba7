"""Builders that split pooled (X, y) into client blocks.

Each builder decides, for every client k, its samples I_k and features J_k, and for every
non-zero entry of X its owner; ``_assemble`` then cuts the blocks. Reassembling the result
gives back X exactly.
"""

import numpy as np
import scipy.sparse as sp

from feddata.federated import FederatedDataset, id_listing, make_block, whole_ids
from solvers import as_csr
from solvers import check_labels


def _prepare(X, y):
    X = as_csr(X)
    y = check_labels(y, X.shape[0])
    if not np.issubdtype(y.dtype, np.number):
        raise ValueError(f"labels must be numeric (map classes first), got dtype {y.dtype}")
    return X, y.astype(np.float64)


def _entry_rows(X):
    return np.repeat(np.arange(X.shape[0], dtype=np.int64), np.diff(X.indptr))


def _row_entries(X, rows):
    """The positions in X.data (and X.indices) of the entries of ``rows``, row by row."""
    starts = X.indptr[rows].astype(np.int64)
    lengths = X.indptr[rows + 1].astype(np.int64) - starts
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return offsets + np.arange(int(lengths.sum()), dtype=np.int64)


def _groups(n, n_groups, rng, what):
    """Split range(n) into n_groups near-equal groups: contiguous, or random if rng."""
    n_groups = int(n_groups)
    if not 1 <= n_groups <= n:
        raise ValueError(f"cannot split {n} {what} into {n_groups} groups")
    ids = rng.permutation(n) if rng is not None else np.arange(n)
    groups = [np.sort(g) for g in np.array_split(ids, n_groups)]
    group_of = np.empty(n, dtype=np.int64)
    for g, members in enumerate(groups):
        group_of[members] = g
    return groups, group_of


def _assemble(X, y, owner, sample_sets, feature_sets):
    """Blocks from each entry's owner and each client's (I_k, J_k)."""
    n_clients = len(sample_sets)
    rows, cols = _entry_rows(X), X.indices.astype(np.int64)
    order = np.argsort(owner, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n_clients))])
    blocks = []
    for k in range(n_clients):
        take = order[bounds[k]:bounds[k + 1]]
        I, J = sample_sets[k], feature_sets[k]
        local = sp.csr_matrix(
            (X.data[take], (np.searchsorted(I, rows[take]), np.searchsorted(J, cols[take]))),
            shape=(I.size, J.size))
        blocks.append(make_block(local, y[I], I, J))
    return FederatedDataset(blocks, X.shape[0], X.shape[1])


def hybrid_grid(X, y, n_sample_groups, n_feature_groups, *, shuffle=False, seed=0):
    """P x Q grid: client p*Q + q holds sample group p and feature group q.

    Groups are contiguous id ranges of near-equal size, or random sets if ``shuffle``.
    """
    X, y = _prepare(X, y)
    rng = np.random.default_rng(seed) if shuffle else None
    s_groups, s_of = _groups(X.shape[0], n_sample_groups, rng, "samples")
    f_groups, f_of = _groups(X.shape[1], n_feature_groups, rng, "features")
    Q = len(f_groups)
    owner = s_of[_entry_rows(X)] * Q + f_of[X.indices]
    samples = [s for s in s_groups for _ in f_groups]
    features = [f for _ in s_groups for f in f_groups]
    return _assemble(X, y, owner, samples, features)


def horizontal(X, y, n_clients, *, shuffle=False, seed=0):
    """Horizontal FL: each client holds a group of samples with all features."""
    return hybrid_grid(X, y, n_clients, 1, shuffle=shuffle, seed=seed)


def vertical(X, y, n_clients, *, shuffle=False, seed=0):
    """Vertical FL: each client holds all samples on a group of features."""
    return hybrid_grid(X, y, 1, n_clients, shuffle=shuffle, seed=seed)


def dealt_features(X, y, n_sample_groups, clients_per_group, *, seed=0):
    """The paper's News20/Covtype scheme (section 7.2): samples split into P groups; within
    a group each sample's non-zero features are dealt to the group's Q clients.

    A sample's non-zeros are ranked in a seeded random order and the r-th goes to client
    (r + i) mod Q of its group, so every client gets 1/Q of them (to within one) and no
    client is favoured on the remainders. Every client holds all samples of its group;
    J_k is the set of features it was dealt. Features that are zero everywhere are given to
    clients round-robin so every feature has a holder.
    """
    X, y = _prepare(X, y)
    rng = np.random.default_rng(seed)
    P, Q = int(n_sample_groups), int(clients_per_group)
    if Q < 1:
        raise ValueError(f"clients_per_group must be >= 1, got {Q}")
    s_groups, s_of = _groups(X.shape[0], P, rng, "samples")
    rows = _entry_rows(X)
    by_row_then_key = np.lexsort((rng.random(X.nnz), rows))
    rank = np.empty(X.nnz, dtype=np.int64)
    rank[by_row_then_key] = np.arange(X.nnz) - X.indptr[rows[by_row_then_key]]
    owner = s_of[rows] * Q + (rank + rows) % Q
    K = P * Q
    unused = np.flatnonzero(np.bincount(X.indices, minlength=X.shape[1]) == 0)
    order = np.argsort(owner, kind="stable")
    dealt = np.split(X.indices[order], np.cumsum(np.bincount(owner, minlength=K))[:-1])
    features = [np.union1d(dealt[k], unused[unused % K == k]).astype(np.int64)
                for k in range(K)]
    empty = [k for k in range(K) if features[k].size == 0]
    if empty:
        group = s_groups[empty[0] // Q]
        most = int(np.diff(X.indptr)[group].max(initial=0))
        raise ValueError(f"dealt {P}x{Q}: clients {empty} would hold no feature: the rows "
                         f"of sample group {empty[0] // Q} have at most {most} non-zeros "
                         f"to deal to {Q} clients; use fewer clients per group")
    samples = [s for s in s_groups for _ in range(Q)]
    return _assemble(X, y, owner, samples, features)


def _quadrant_of_pixel(image_shape):
    h, w = image_shape
    r, c = np.divmod(np.arange(h * w), w)
    return 2 * (r >= h // 2) + (c >= w // 2)


def mnist_quadrants(X, y, n_clients, *, image_shape=(28, 28), bias=10.0, shuffle=False,
                    seed=0):
    """The paper's MNIST scheme (section 7.2): images cut into 4 quadrants (top-left,
    top-right, bottom-left, bottom-right); the clients are dealt to the quadrants in order
    (the first quarter to quadrant 0, ...; with K not a multiple of 4 the first quadrants
    get one more); a quadrant's clients split the samples evenly. A bias feature of value
    ``bias`` (the paper: 10) is appended as feature d and held with quadrant 3; pass
    ``bias=None`` to leave it out. Needs K >= 4.
    """
    X, y = _prepare(X, y)
    n_pixels = int(np.prod(image_shape))
    if X.shape[1] != n_pixels:
        raise ValueError(f"X has {X.shape[1]} features but images of shape {image_shape} "
                         f"have {n_pixels} pixels")
    if int(n_clients) < 4:
        raise ValueError(f"the quadrant scheme needs at least 4 clients, got {n_clients}")
    quadrant = _quadrant_of_pixel(image_shape)
    if bias is not None:
        X = as_csr(sp.hstack([X, np.full((X.shape[0], 1), float(bias))]))
        quadrant = np.append(quadrant, 3)
    rng = np.random.default_rng(seed) if shuffle else None
    client_groups = np.array_split(np.arange(int(n_clients)), 4)
    samples, features = [None] * int(n_clients), [None] * int(n_clients)
    client_of = np.empty((4, X.shape[0]), dtype=np.int64)  # (quadrant, sample) -> client
    for q, clients in enumerate(client_groups):
        s_groups, s_of = _groups(X.shape[0], clients.size, rng, "samples")
        client_of[q] = clients[s_of]
        for k, group in zip(clients, s_groups):
            samples[k], features[k] = group, np.flatnonzero(quadrant == q)
    owner = client_of[quadrant[X.indices], _entry_rows(X)]
    return _assemble(X, y, owner, samples, features)


def from_blocks(X, y, blocks):
    """Explicit holdings: ``blocks[k] = (sample_ids, feature_ids)`` of client k, possibly
    overlapping. Each non-zero entry goes to the lowest client id whose rectangle
    I_k x J_k contains it (docs/algorithm.md section 2); a non-zero entry in nobody's
    rectangle is an error, as are uncovered samples or features and ids out of range."""
    X, y = _prepare(X, y)
    n, d = X.shape
    sample_sets, feature_sets, problems = [], [], []
    for k, (I, J) in enumerate(blocks):
        I, J = whole_ids(I, k, "sample"), whole_ids(J, k, "feature")
        for ids, count, name in ((I, n, "sample"), (J, d, "feature")):
            bad = ids[(ids < 0) | (ids >= count)]
            if bad.size:
                problems.append(f"client {k}: {name} ids out of range [0, {count}): "
                                f"{id_listing(bad)}")
        if I.size == 0 or J.size == 0:
            problems.append(f"client {k} is empty ({I.size} samples, {J.size} features)")
        sample_sets.append(np.unique(I))
        feature_sets.append(np.unique(J))
    if problems:
        raise ValueError("invalid client blocks:\n  - " + "\n  - ".join(problems))
    rows, cols = _entry_rows(X), X.indices
    owner = np.full(X.nnz, -1, dtype=np.int64)
    for k in reversed(range(len(sample_sets))):
        in_rows, in_cols = np.zeros(n, bool), np.zeros(d, bool)
        in_rows[sample_sets[k]] = True
        in_cols[feature_sets[k]] = True
        owner[in_rows[rows] & in_cols[cols]] = k
    orphans = np.flatnonzero(owner < 0)
    if orphans.size:
        pairs = [(int(rows[p]), int(cols[p])) for p in orphans[:10]]
        raise ValueError(f"invalid client blocks:\n  - {orphans.size} non-zero entries "
                         f"(sample, feature) held by no client, e.g. {pairs}")
    return _assemble(X, y, owner, sample_sets, feature_sets)


def split_like(fed, X, y=None, *, seed=0):
    """New samples (X: n x d over ``fed``'s features) split across ``fed``'s clients the
    way its training data is, for federated prediction: client k keeps its training
    features J_k, in order, so its block multiplies its part w_k of the model.

    New sample i takes the holders C_s of a training sample s drawn uniformly (seeded; K
    of the new samples, one per client, take one of that client's samples, so that with
    at least K new samples every client holds one), and each non-zero x_ij goes to the
    first of them whose J_k holds feature j, or, where none of them does (a dealt
    partition), to the first client whose J_k holds j. Every entry has one holder, so
    sum_k x_i^k . w_k = x_i . w. ``y``: the new samples' labels (zeros where not given: a
    prediction needs none). Fewer new samples than clients leave a client none: an error
    (predict more samples at once)."""
    X = as_csr(X)
    if X.shape[1] != fed.n_features:
        raise ValueError(f"the new samples have {X.shape[1]} features, the training data "
                         f"{fed.n_features}")
    y = np.zeros(X.shape[0]) if y is None else _prepare(X, y)[1]
    n = X.shape[0]
    rng = np.random.default_rng(seed)
    template = rng.integers(fed.n_samples, size=n)
    for block, i in zip(fed.blocks, rng.permutation(n)):   # one for each client
        template[i] = block.sample_ids[rng.integers(block.sample_ids.size)]
    rows, cols = _entry_rows(X), X.indices.astype(np.int64)
    owner = np.full(X.nnz, -1, dtype=np.int64)
    sample_sets = []
    for k, block in enumerate(fed.blocks):
        dealt = np.flatnonzero(np.isin(template, block.sample_ids))
        entries = _row_entries(X, dealt)
        entries = entries[owner[entries] < 0]
        at = np.searchsorted(block.feature_ids, cols[entries])
        held = at < block.feature_ids.size
        held[held] = block.feature_ids[at[held]] == cols[entries][held]
        owner[entries[held]] = k
        sample_sets.append(dealt)
    first_holder = np.full(fed.n_features, -1, dtype=np.int64)
    for k in reversed(range(fed.n_clients)):
        first_holder[fed.blocks[k].feature_ids] = k
    left = np.flatnonzero(owner < 0)
    owner[left] = first_holder[cols[left]]
    for k in np.unique(owner[left]):
        sample_sets[k] = np.union1d(sample_sets[k], rows[left][owner[left] == k])
    empty = [k for k, samples in enumerate(sample_sets) if samples.size == 0]
    if empty:
        raise ValueError(f"clients {id_listing(np.asarray(empty))} would hold none of the "
                         f"{n} new samples: predict more samples at once")
    return _assemble(X, y, owner, sample_sets, [b.feature_ids for b in fed.blocks])
