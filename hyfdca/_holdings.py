"""Whether the parties' blocks are blocks of one pooled data set, checked by a server that
sees neither labels nor entries.

In one process ``feddata.FederatedDataset`` refuses blocks whose holders disagree on a
label, or that hold an entry (i, j) twice; a deployed server receives only the parties'
ids and could see neither. So at set-up (docs/threat-model.md, set-up row) each client
sends, under the clients' key (``crypto.SecureSum.tags``, a keyed permutation):

* t(i, y_i) for each of its samples that others hold too, in the order of its shared
  positions: the holders of sample i agree on y_i exactly where their tags are equal;
* t(i, j) for each entry it stores in the part of its rectangle that other clients'
  rectangles overlap (``feddata.Layout.overlaps``; nothing for grids, horizontal or
  vertical splits), sorted so that their order says nothing of the positions: an entry
  held twice is a tag two clients send.

The server learns which tags are equal and, for each client, the number of entries it
stores in its overlap region; it keeps a digest of each client's tags, and a client that
rejoins after a restart must send the same ones (the same data).
"""

import hashlib

import numpy as np

LABELS, ENTRIES = "labels", "entries"


class HoldingsError(ValueError):
    """The parties' blocks are not blocks of one pooled data set, or a party came back
    with other data than it set up with."""


def label_tags(masker, sample_ids, y):
    """t(i, y_i) of the given samples (global ids) and their labels, one uint64 each
    (the first half of the 128-bit tag: only tags of the same sample are compared)."""
    y = np.asarray(y, dtype=np.float64) + 0.0   # -0.0 and 0.0: the same label
    words = np.column_stack([np.asarray(sample_ids, dtype=np.int64), y.view(np.int64)])
    return masker.tags(LABELS, words)[:, 0].copy()


def entry_tags(masker, X, sample_ids, feature_ids, rows, columns, purpose=ENTRIES):
    """t(i, j) of the stored entries of X (local CSR) in local ``rows`` x ``columns``,
    (n, 2) uint64 in sorted order (``purpose`` keys them apart: a prediction's tags are
    not linkable to the set-up's)."""
    region = X[rows][:, columns].tocoo()
    words = np.column_stack([np.asarray(sample_ids)[rows][region.row],
                             np.asarray(feature_ids)[columns][region.col]])
    tags = masker.tags(purpose, words.astype(np.int64))
    return tags[np.lexsort((tags[:, 1], tags[:, 0]))]


def check_reply(k, n_shared, labels, entries):
    """Client k's tags as the server needs them, else HoldingsError naming the client."""
    labels, entries = np.asarray(labels), np.asarray(entries)
    if labels.dtype != np.uint64 or labels.shape != (n_shared,):
        raise HoldingsError(f"client {k}: {labels.shape} label tags of dtype {labels.dtype} "
                            f"for {n_shared} shared samples (one uint64 each)")
    if entries.dtype != np.uint64 or entries.ndim != 2 or entries.shape[1] != 2:
        raise HoldingsError(f"client {k}: entry tags must be (n, 2) uint64, got "
                            f"{entries.dtype} of shape {entries.shape}")


def label_problems(shared_ids, labels):
    """Samples whose holders' label tags differ, as messages: ``shared_ids[k]`` are the
    global ids of client k's shared samples, ``labels[k]`` their tags."""
    ids, tags = np.concatenate(shared_ids), np.concatenate(labels)
    order = np.lexsort((tags, ids))
    ids, tags = ids[order], tags[order]
    disagree = np.unique(ids[1:][(ids[1:] == ids[:-1]) & (tags[1:] != tags[:-1])])
    if not disagree.size:
        return []
    shown = ", ".join(str(i) for i in disagree[:10].tolist())
    return [f"holders disagree on the label of samples [{shown}"
            f"{', ...' if disagree.size > 10 else ''}] ({disagree.size} in all)"]


def entry_problems(entries, what="entries (sample, feature)"):
    """Entries two clients (or one, twice) sent the tag of, as messages naming the
    clients and how many: ``entries[k]`` are client k's entry tags."""
    owner = np.repeat(np.arange(len(entries)), [e.shape[0] for e in entries])
    tags = np.concatenate([e.reshape(-1, 2) for e in entries])
    order = np.lexsort((tags[:, 1], tags[:, 0]))
    tags, owner = tags[order], owner[order]
    twice = np.flatnonzero(np.all(tags[1:] == tags[:-1], axis=1))
    if not twice.size:
        return []
    pairs, counts = np.unique(np.column_stack([owner[twice], owner[twice + 1]]), axis=0,
                              return_counts=True)
    named = "; ".join(f"clients {a} and {b}: {n}" if a != b else f"client {a}: {n}"
                      for (a, b), n in zip(pairs.tolist(), counts.tolist()))
    return [f"{twice.size} {what} are held twice ({named}); each entry has one holder"]


def check_holdings(shared_ids, labels, entries):
    """HoldingsError listing the problems of :func:`label_problems` and
    :func:`entry_problems`."""
    problems = label_problems(shared_ids, labels) + entry_problems(entries)
    if problems:
        raise HoldingsError("the parties' blocks are not blocks of one data set:\n  - "
                            + "\n  - ".join(problems))


def holdings_digest(labels, entries):
    """SHA-256 of a client's tags: what the server keeps to check a rejoin."""
    return hashlib.sha256(np.ascontiguousarray(labels).tobytes()
                          + np.ascontiguousarray(entries).tobytes()).hexdigest()
