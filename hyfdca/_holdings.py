"""Whether the parties' blocks are blocks of one pooled data set, checked by a server that
sees neither labels nor entries.

In one process ``feddata.FederatedDataset`` refuses blocks whose holders disagree on a
label, or that hold an entry (i, j) twice; a deployed server receives only the parties'
ids and could see neither. So at set-up (docs/threat-model.md, set-up row) each client
sends, under the clients' key (``crypto.SecureSum.tags``, a keyed permutation):

* t(i, y_i) for each of its samples that others hold too, in the order of its shared
  positions: the holders of sample i agree on y_i exactly where their tags are equal;
* t(i, j) for each non-zero entry it stores in the rows and columns of its rectangle that
  other clients' rectangles overlap (``feddata.Layout.overlaps``; nothing for grids,
  horizontal or vertical splits), sorted so that their order says nothing of the
  positions: an entry held twice is a tag two clients send;
* t(SHA-256 of its whole block: ids, entries, labels), against which it is checked when
  it rejoins after a restart, or when a checkpoint is resumed (``HyFDCARun.from_checkpoint``
  runs the set-up under the saved nonce).

At prediction the server learns which parties hold each new sample (their ids, as at
set-up) and asks for tags only where two holders of one new sample share a feature
(:func:`doubled_entry_candidates`; nobody on a split made like a grid's, a horizontal or a
vertical one): there each party tags its non-zero entries (keyed for that prediction),
and an entry two parties hold, which would be added twice to a margin, is refused.

The tags are keyed for one run (the server's ``holding_nonce`` in the purpose), so tags of
two runs under the same keys cannot be compared. The server learns which tags are equal
and, for each client, how many non-zero entries it stores in its overlap rows x columns;
it keeps a digest of each client's tags, and a client that rejoins must send the same ones
(the same block).
"""

import hashlib

import numpy as np

from feddata.federated import label_problems, overlap_positions


class HoldingsError(ValueError):
    """The parties' blocks are not blocks of one pooled data set, or a party came back
    with other data than it set up with."""


def label_tags(masker, nonce, sample_ids, y):
    """t(i, y_i) of the given samples (global ids) and their labels, one uint64 each
    (the first half of the 128-bit tag: only tags of the same sample are compared)."""
    y = np.asarray(y, dtype=np.float64) + 0.0   # -0.0 and 0.0: the same label
    words = np.column_stack([np.asarray(sample_ids, dtype=np.int64), y.view(np.int64)])
    return masker.tags(f"labels|{nonce}", words)[:, 0].copy()


def entry_tags(masker, purpose, X, sample_ids, feature_ids, rows, columns):
    """t(i, j) of the non-zero entries of X (local CSR) in local ``rows`` x ``columns``
    (a stored 0 holds nothing), (n, 2) uint64 in sorted order; ``purpose`` keys them for
    one run's set-up, or one prediction."""
    if rows.size == 0 or columns.size == 0:
        return np.zeros((0, 2), dtype=np.uint64)
    region = X[rows][:, columns].tocoo()
    held = region.data != 0
    words = np.column_stack([np.asarray(sample_ids)[rows][region.row[held]],
                             np.asarray(feature_ids)[columns][region.col[held]]])
    tags = masker.tags(purpose, words.astype(np.int64))
    return tags[np.lexsort((tags[:, 1], tags[:, 0]))]


def block_tag(masker, nonce, sample_ids, feature_ids, X, y):
    """t(first 16 bytes of SHA-256 of the block: I_k, J_k, X^k as canonical CSR, y), (2,)
    uint64: equal for the same block only."""
    X = X.tocsr(copy=True)
    X.sum_duplicates()
    X.sort_indices()
    digest = hashlib.sha256()
    for part in (sample_ids, feature_ids, X.indptr, X.indices):
        digest.update(np.ascontiguousarray(part, dtype="<i8").tobytes())
    for part in (X.data, np.asarray(y, dtype=np.float64) + 0.0):
        digest.update(np.ascontiguousarray(part, dtype="<f8").tobytes())
    words = np.frombuffer(digest.digest()[:16], dtype="<u8").reshape(1, 2)
    return masker.tags(f"block|{nonce}", words)[0].copy()


def doubled_entry_candidates(held, feature_ids):
    """Per party k, (new-sample ids, local columns of J_k) where an entry of the new
    samples could be held twice: the new samples it holds that another holder l holds
    too, where J_k and J_l share features, and those features' positions in J_k.
    ``held[k]``: the ids of the new samples party k holds."""
    held = [np.unique(np.asarray(h, dtype=np.int64)) for h in held]
    overlaps = overlap_positions(
        held, feature_ids, 1 + max((int(h[-1]) for h in held if h.size), default=-1),
        1 + max((int(j[-1]) for j in feature_ids if j.size), default=-1))
    return {k: (held[k][rows], columns) for k, (rows, columns) in enumerate(overlaps)
            if rows.size}


def check_reply(k, n_shared, labels, entries, block):
    """Client k's tags as the server needs them, else HoldingsError naming the client."""
    labels, entries, block = np.asarray(labels), np.asarray(entries), np.asarray(block)
    if block.dtype != np.uint64 or block.shape != (2,):
        raise HoldingsError(f"client {k}: the block tag must be 2 uint64, got {block.dtype} "
                            f"of shape {block.shape}")
    if labels.dtype != np.uint64 or labels.shape != (n_shared,):
        raise HoldingsError(f"client {k}: {labels.shape} label tags of dtype {labels.dtype} "
                            f"for {n_shared} shared samples (one uint64 each)")
    check_entry_tags(k, entries, HoldingsError)


def check_entry_tags(k, entries, error):
    """``error`` naming client k unless its entry tags are (n, 2) uint64."""
    entries = np.asarray(entries)
    if entries.dtype != np.uint64 or entries.ndim != 2 or entries.shape[1] != 2:
        raise error(f"client {k}: entry tags must be (n, 2) uint64, got {entries.dtype} "
                    f"of shape {entries.shape}")
    return entries


def entry_problems(entries, what="entries (sample, feature)"):
    """Entries more than one client (or one, twice) sent the tag of, as messages naming
    the holders and how many entries each set of them shares: ``entries[k]`` are client
    k's entry tags."""
    owner = np.repeat(np.arange(len(entries)), [e.shape[0] for e in entries])
    tags = np.concatenate([e.reshape(-1, 2) for e in entries])
    if tags.shape[0] == 0:
        return []
    unique, inverse, counts = np.unique(tags, axis=0, return_inverse=True,
                                        return_counts=True)
    inverse = inverse.ravel()
    repeated = counts[inverse] > 1
    if not repeated.any():
        return []
    holders = {}
    for entry, k in zip(inverse[repeated].tolist(), owner[repeated].tolist()):
        holders.setdefault(entry, []).append(k)
    sets = {}
    for clients in holders.values():
        key = tuple(sorted(clients))
        sets[key] = sets.get(key, 0) + 1
    named = "; ".join(f"clients {', '.join(map(str, key))}: {n}"
                      for key, n in sorted(sets.items()))
    return [f"{len(holders)} {what} are held more than once ({named}); each entry has "
            f"one holder"]


def check_holdings(n_samples, shared_ids, labels, entries):
    """HoldingsError listing the problems of :func:`label_problems` and
    :func:`entry_problems`."""
    problems = label_problems(n_samples, shared_ids, labels) + entry_problems(entries)
    if problems:
        raise HoldingsError("the parties' blocks are not blocks of one data set:\n  - "
                            + "\n  - ".join(problems))


def holdings_digest(labels, entries, block):
    """SHA-256 of a client's tags: what the server keeps to check a rejoin."""
    return hashlib.sha256(b"".join(np.ascontiguousarray(tags).tobytes()
                                   for tags in (labels, entries, block))).hexdigest()
