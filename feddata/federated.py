"""The federated data model: client blocks over global sample and feature ids.

Client k holds a sparse block X^k with rows I_k (its samples, global ids), columns J_k
(its features, global ids) and the labels of its samples. The blocks partition the
non-zero entries of the pooled X: sum_k X^k = X, with no entry held twice
(docs/algorithm.md section 2). Derived: the holders C_i of each sample, |C_i|, and the
full squared row norms q_i = sum_k ||x_i^k||^2 (in a deployment a secure sum at set-up).
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from solvers import as_csr

_SHOW = 10  # ids listed per problem in an error message


def block_sq_norm(X):
    """||X^k||_F^2 of one client's block, as the client discloses it at set-up."""
    return float(np.dot(X.data, X.data))


def block_mean_sq(X):
    """|I_k| ||m_k||^2, m_k = 1^T X^k / |I_k| the mean row of one client's block, as the
    client discloses it at set-up (0 for a block without rows). For non-negative data
    |I_k| ||m_k||^2 = (1 / |I_k|) sum_{i,j} x_i . x_j, every term >= 0; with a negative
    entry the terms can cancel, so the block reports the bound ||X^k||_F^2 >= |I_k|
    ||m_k||^2 instead (coherence 1: the most coherent data, the least local work)."""
    rows = X.shape[0]
    if rows == 0:
        return 0.0
    if X.nnz and X.data.min() < 0:
        return block_sq_norm(X)
    column_sums = np.asarray(X.sum(axis=0), dtype=np.float64).ravel()
    return float(np.dot(column_sums, column_sums)) / rows


@dataclass(frozen=True, eq=False)
class ClientBlock:
    """One client's data: X (|I_k| x |J_k| CSR, local coordinates), I_k, J_k, labels."""

    sample_ids: np.ndarray
    feature_ids: np.ndarray
    X: sp.csr_matrix
    y: np.ndarray

    @property
    def shape(self):
        return self.X.shape


@dataclass(frozen=True, eq=False)
class Layout:
    """The public set-up information of a federated problem: who holds which samples and
    features (I_k, J_k), N, d and |C_i|. What a server may know; no data, no labels.
    ``sq_norm_total`` = ||X||_F^2 = sum_k ||X^k||_F^2 and ``mean_sq_total`` = sum_k |I_k|
    ||m_k||^2 (m_k the mean row of block k; ``block_mean_sq``), the two statistics of the
    data the clients disclose with their ids (for HyFDCA's ``prox="auto"`` and
    ``iic_coherence``; None: not disclosed). :attr:`coherence` is their ratio."""

    n_samples: int
    n_features: int
    sample_ids: tuple
    feature_ids: tuple
    holder_counts: np.ndarray
    sq_norm_total: float | None = None
    mean_sq_total: float | None = None

    @classmethod
    def from_ids(cls, sample_ids, feature_ids, sq_norm_total=None, mean_sq_total=None):
        """The layout of clients holding ``sample_ids[k]`` x ``feature_ids[k]`` (global
        ids, 0-based; N and d are one more than the largest id). A server builds it from
        the ids the parties report, so ids that FederatedDataset would refuse are refused
        here too, by name: fractional, negative, repeated or unsorted ids, an empty
        client, lists of different lengths."""
        sample_ids, feature_ids = list(sample_ids), list(feature_ids)
        if not sample_ids or len(sample_ids) != len(feature_ids):
            raise ValueError(f"a layout needs one sample-id list and one feature-id list per "
                             f"client, got {len(sample_ids)} and {len(feature_ids)}")
        sample_ids = tuple(_layout_ids(k, i, "sample") for k, i in enumerate(sample_ids))
        feature_ids = tuple(_layout_ids(k, j, "feature") for k, j in enumerate(feature_ids))
        n = 1 + max((int(i.max()) for i in sample_ids if i.size), default=-1)
        d = 1 + max((int(j.max()) for j in feature_ids if j.size), default=-1)
        counts = np.zeros(n, dtype=np.int64)
        for i in sample_ids:
            counts[i] += 1
        if n and counts.min() == 0:
            raise ValueError(f"samples {id_listing(np.flatnonzero(counts == 0))} are held by no "
                             f"client")
        held = np.zeros(d, dtype=bool)
        for j in feature_ids:
            held[j] = True
        if not held.all():
            raise ValueError(f"features {id_listing(np.flatnonzero(~held))} are held by no "
                             f"client")
        return cls(n, d, sample_ids, feature_ids, counts,
                   None if sq_norm_total is None else float(sq_norm_total),
                   None if mean_sq_total is None else float(mean_sq_total))

    @property
    def coherence(self):
        """sum_k |I_k| ||m_k||^2 / ||X||_F^2 in [0, 1]: for one non-negative block
        holding every row, ||mean row||^2 / mean_i q_i = mean_{i,j} x_i . x_j / mean_i
        q_i (0: rows that share no feature, 1: equal rows); a block with a negative entry
        counts as 1 (``block_mean_sq``); over blocks, the clients' own rows stand in for
        the pooled mean, without the cross terms no client can compute alone. None
        where a statistic was not disclosed."""
        if self.sq_norm_total is None or self.mean_sq_total is None:
            return None
        return self.mean_sq_total / self.sq_norm_total if self.sq_norm_total > 0 else 0.0

    @property
    def n_clients(self):
        return len(self.sample_ids)

    def overlaps(self):
        """Per client k, the local positions (rows of I_k, columns of J_k) of the part of
        its rectangle I_k x J_k that other clients' rectangles overlap
        (:func:`overlap_positions`)."""
        return overlap_positions(self.sample_ids, self.feature_ids, self.n_samples,
                                 self.n_features)


def overlap_positions(sample_ids, feature_ids, n_samples, n_features):
    """Per client k (``sample_ids[k]``, ``feature_ids[k]``: its sorted ids, below
    ``n_samples`` and ``n_features``; a client may hold none), the local positions (rows
    of I_k, columns of J_k) of the part of its rectangle I_k x J_k that other clients'
    rectangles overlap: the only place an entry can be held twice (nothing for grids,
    horizontal or vertical splits). Clients k and l overlap where they share a sample and
    a feature; client k's rows are its samples some such l holds, its columns the
    features some such l holds."""
    samples = holder_incidence(sample_ids, n_samples)
    features = holder_incidence(feature_ids, n_features)
    partners = _overlapping_pairs(samples, features)
    # (i, k) non-zero: a client overlapping k holds sample i (feature i)
    rows_held = (samples @ partners).tocsc()
    columns_held = (features @ partners).tocsc()

    def positions(held, k, ids):
        return np.searchsorted(ids, np.intersect1d(
            held.indices[held.indptr[k]:held.indptr[k + 1]], ids, assume_unique=True))
    return [(positions(rows_held, k, I), positions(columns_held, k, J))
            for k, (I, J) in enumerate(zip(sample_ids, feature_ids))]


def holder_incidence(ids, size):
    """The (size, K) 0/1 CSC matrix of which client holds which id (``ids[k]``: client
    k's ids, each below ``size``)."""
    rows = np.concatenate(ids)
    cols = np.repeat(np.arange(len(ids)), [i.size for i in ids])
    return sp.csc_matrix((np.ones(rows.size, dtype=np.int64), (rows, cols)),
                         shape=(size, len(ids)))


def _overlapping_pairs(samples, features):
    """The symmetric (K, K) 0/1 matrix of the pairs of distinct clients that share a
    sample and a feature. The pairs sharing an id on the sparser axis come first (work:
    the sum of squared holder counts; a horizontal split's samples give none); those
    among them that share an id on the other axis are then found by whichever costs less
    work: that axis's product, or the pairs' id lists side by side (in chunks of bounded
    memory)."""
    first, second = sorted((samples, features), key=_product_work)
    pairs = (first.T @ first).tocoo()
    upper = pairs.row < pairs.col
    k, l = pairs.row[upper], pairs.col[upper]
    by_client = second.T.tocsr()
    sizes = np.diff(by_client.indptr).astype(np.float64)
    if k.size == 0:
        share = np.zeros(0, dtype=bool)
    elif _product_work(second) <= float(np.sum(sizes[k] + sizes[l])):
        share = np.asarray(((second.T @ second) > 0)[k, l]).ravel()
    else:
        share = np.concatenate([
            np.asarray(by_client[k[c]].multiply(by_client[l[c]]).sum(axis=1)).ravel() > 0
            for c in _chunks(sizes[k] + sizes[l], budget=1 << 22)])
    k, l, K = k[share], l[share], samples.shape[1]
    ones = np.ones(2 * k.size, dtype=np.int64)
    return sp.csc_matrix((ones, (np.concatenate([k, l]), np.concatenate([l, k]))),
                         shape=(K, K))


def _product_work(incidence):
    """The work of incidence^T incidence: the sum over ids of (holders)^2."""
    return float(np.sum(np.diff(incidence.tocsr().indptr).astype(np.float64) ** 2))


def _chunks(costs, budget):
    """Consecutive index slices covering every index, each costing about ``budget``."""
    ends = np.searchsorted(np.cumsum(costs), np.arange(budget, costs.sum(), budget),
                           side="right")
    bounds = np.unique(np.concatenate([[0], ends, [costs.size]]))
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _ids(values):
    return np.asarray(values, dtype=np.int64).ravel()


def whole_ids(ids, client, name):
    """Client ``client``'s ``name`` ids as int64, refusing values that are not whole
    numbers (never truncated: 1.5 is not 1)."""
    raw = np.asarray(ids).ravel()
    if not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
        raise ValueError(f"client {client}: {name} ids must be integers, got dtype "
                         f"{raw.dtype}")
    if np.issubdtype(raw.dtype, np.floating):
        bad = raw[~np.isfinite(raw) | (raw != np.round(raw))]
        if bad.size:
            raise ValueError(f"client {client}: {name} ids must be whole numbers, got "
                             f"{id_listing(bad)}")
    return raw.astype(np.int64)


def _layout_ids(k, values, name):
    """Client k's ``name`` ids as int64, or ValueError naming what is wrong with them."""
    ids = whole_ids(values, k, name)
    if ids.size == 0:
        raise ValueError(f"client {k} holds no {name}s")
    if ids.min() < 0 or np.any(np.diff(ids) <= 0):
        raise ValueError(f"client {k}: {name} ids must be >= 0 and strictly increasing (no "
                         f"repeats)")
    return ids


def id_listing(ids):
    """Ids for an error message: the first ten, then how many in all."""
    ids = np.asarray(ids)
    head = ", ".join(str(v) for v in ids[:_SHOW].tolist())
    more = f", ... ({ids.size} in all)" if ids.size > _SHOW else ""
    return f"[{head}{more}]"


def label_problems(n_samples, sample_ids, labels):
    """Samples whose holders give different labels, as messages (empty if none):
    ``sample_ids[k]`` are one holder's global ids and ``labels[k]`` its labels for them,
    plain or as the set-up's keyed tags (equal labels, equal tags)."""
    if not len(sample_ids):
        return []
    ids, values = np.concatenate(sample_ids), np.concatenate(labels)
    last = np.zeros(int(n_samples), dtype=values.dtype)
    last[ids] = values   # one holder's label per sample; any other that differs is a clash
    disagree = np.unique(ids[last[ids] != values])
    if not disagree.size:
        return []
    return [f"holders disagree on the label of samples {id_listing(disagree)}"]


class FederatedDataset:
    """Client blocks of one pooled problem, validated on construction.

    Parameters
    ----------
    blocks : list of ClientBlock
        Client k is ``blocks[k]``.
    n_samples, n_features : int
        N and d of the pooled matrix.

    Raises
    ------
    ValueError
        Listing every problem found: block shapes that do not match their ids, ids out of
        range or repeated, empty clients, samples or features no client holds, entries
        held by two clients, holders that disagree on a label, NaN or inf values,
        values whose squares overflow.
    """

    def __init__(self, blocks, n_samples, n_features):
        self.blocks = list(blocks)
        self.n_samples = int(n_samples)
        self.n_features = int(n_features)
        problems = self._problems()
        if problems:
            raise ValueError("invalid federated data set:\n  - " + "\n  - ".join(problems))

    @property
    def n_clients(self):
        return len(self.blocks)

    # --- validation -------------------------------------------------------------------

    def _problems(self):
        if not self.blocks:
            return ["no clients"]
        problems = []
        for k, block in enumerate(self.blocks):
            problems += _block_problems(k, block, self.n_samples, self.n_features)
        if problems:
            return problems  # the checks below index with the ids
        for axis, count, name in ((0, self.n_samples, "samples"),
                                  (1, self.n_features, "features")):
            held = np.zeros(count, dtype=bool)
            for block in self.blocks:
                held[block.sample_ids if axis == 0 else block.feature_ids] = True
            if not held.all():
                problems.append(f"{name} held by no client: {id_listing(np.flatnonzero(~held))}")
        problems += self._overlap_problems()
        problems += label_problems(self.n_samples, [b.sample_ids for b in self.blocks],
                                   [b.y for b in self.blocks])
        problems += self._range_problems()
        return problems

    def _range_problems(self):
        """Finite values whose squares overflow float64: the squared row norms q_i (and
        ||X||_F^2, sum_i y_i^2) the method divides by would be inf."""
        with np.errstate(over="ignore"):
            sq_norm = sum(block_sq_norm(b.X) for b in self.blocks)
            sq_labels = sum(float(np.dot(b.y, b.y)) for b in self.blocks)
        problems = []
        if not np.isfinite(sq_norm):
            largest = max(float(np.abs(b.X.data).max(initial=0.0)) for b in self.blocks)
            problems.append(f"squared norms overflow float64 (||X||_F^2 = inf, largest "
                            f"|x| = {largest:.3g}): rescale the features (e.g. rows to "
                            f"unit norm)")
        if not np.isfinite(sq_labels):
            largest = max(float(np.abs(b.y).max(initial=0.0)) for b in self.blocks)
            problems.append(f"squared labels overflow float64 (sum of y_i^2 = inf, "
                            f"largest |y| = {largest:.3g}): rescale the targets")
        return problems

    def _overlap_problems(self):
        keys = np.concatenate([self._global_keys(b) for b in self.blocks])
        if keys.size == 0:
            return []
        keys.sort()
        dup = keys[1:][keys[1:] == keys[:-1]]
        if dup.size == 0:
            return []
        pairs = [(int(k // self.n_features), int(k % self.n_features)) for k in dup[:_SHOW]]
        return [f"{dup.size} entries (sample, feature) held by more than one client, e.g. "
                f"{pairs}; build overlapping holdings with from_blocks (lowest client id "
                f"keeps an entry)"]

    def _global_keys(self, block):
        """i d + j of the block's non-zero entries (a stored 0 holds nothing)."""
        coo = block.X.tocoo()
        held = coo.data != 0
        return (block.sample_ids[coo.row[held]] * self.n_features
                + block.feature_ids[coo.col[held]])

    # --- derived quantities -----------------------------------------------------------

    @cached_property
    def labels(self):
        """y over all N samples (holders agree, checked at construction)."""
        y = np.empty(self.n_samples)
        for block in self.blocks:
            y[block.sample_ids] = block.y
        return y

    @cached_property
    def _holder_index(self):
        samples = np.concatenate([b.sample_ids for b in self.blocks])
        clients = np.concatenate([np.full(b.sample_ids.size, k, dtype=np.int64)
                                  for k, b in enumerate(self.blocks)])
        order = np.argsort(samples, kind="stable")
        indptr = np.zeros(self.n_samples + 1, dtype=np.int64)
        np.cumsum(np.bincount(samples, minlength=self.n_samples), out=indptr[1:])
        return indptr, clients[order]

    @property
    def holder_counts(self):
        """|C_i|: how many clients hold sample i."""
        return np.diff(self._holder_index[0])

    def holders(self, i):
        """C_i: the ids of the clients holding sample i, ascending."""
        indptr, clients = self._holder_index
        return clients[indptr[i]:indptr[i + 1]]

    @cached_property
    def sq_row_norms(self):
        """q_i = ||x_i||^2 = sum over holders k of ||x_i^k||^2."""
        q = np.zeros(self.n_samples)
        for block in self.blocks:
            partial = np.asarray(block.X.multiply(block.X).sum(axis=1)).ravel()
            np.add.at(q, block.sample_ids, partial)
        return q

    def layout(self):
        """The public :class:`Layout` of these blocks."""
        return Layout(self.n_samples, self.n_features,
                      tuple(b.sample_ids for b in self.blocks),
                      tuple(b.feature_ids for b in self.blocks), self.holder_counts,
                      sum(block_sq_norm(b.X) for b in self.blocks),
                      sum(block_mean_sq(b.X) for b in self.blocks))

    def reassemble(self):
        """(X, y) pooled again: X = sum_k X^k as canonical CSR (int32 indices)."""
        rows, cols, vals = [], [], []
        for block in self.blocks:
            coo = block.X.tocoo()
            rows.append(block.sample_ids[coo.row])
            cols.append(block.feature_ids[coo.col])
            vals.append(coo.data)
        X = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(self.n_samples, self.n_features),
        )
        return as_csr(X), self.labels.copy()

    def __repr__(self):
        nnz = sum(b.X.nnz for b in self.blocks)
        return (f"FederatedDataset({self.n_clients} clients, {self.n_samples} samples x "
                f"{self.n_features} features, {nnz} non-zeros)")


def _block_problems(k, block, n_samples, n_features):
    problems = []
    I, J = block.sample_ids, block.feature_ids
    if I.size == 0 or J.size == 0:
        return [f"client {k} is empty ({I.size} samples, {J.size} features)"]
    if block.X.shape != (I.size, J.size):
        problems.append(f"client {k}: block shape {block.X.shape} does not match "
                        f"{I.size} sample ids x {J.size} feature ids")
    if block.y.shape != (I.size,):
        problems.append(f"client {k}: {block.y.shape[0]} labels for {I.size} samples")
    for ids, count, name in ((I, n_samples, "sample"), (J, n_features, "feature")):
        bad = ids[(ids < 0) | (ids >= count)]
        if bad.size:
            problems.append(f"client {k}: {name} ids out of range [0, {count}): {id_listing(bad)}")
        if np.any(np.diff(ids) <= 0):
            problems.append(f"client {k}: {name} ids must be strictly increasing (no repeats)")
    if not np.all(np.isfinite(block.X.data)):
        problems.append(f"client {k}: block contains NaN or infinite values")
    if not np.all(np.isfinite(block.y)):
        problems.append(f"client {k}: labels contain NaN or infinite values")
    return problems


def make_block(X, y, sample_ids, feature_ids):
    """A ClientBlock with ids as int64 and X as canonical CSR (int32 indices)."""
    return ClientBlock(_ids(sample_ids), _ids(feature_ids), as_csr(X),
                       np.asarray(y, dtype=np.float64).ravel())
