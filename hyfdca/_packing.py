"""Where each sample's value sits in the protocol's ciphertexts (docs/algorithm.md section
3, "Ciphertext layout").

A backend packs s values per ciphertext (s = ``slots``; 1 for one value per ciphertext).
The samples are grouped by their holder set C_i, kept in ascending id order within a
group and cut into blocks of s (a group's last block may have empty slots, which hold 0);
the blocks are numbered by their first sample. Every client's samples are then a union
of whole blocks, and every vector the server keeps per sample (Enc(alpha), Enc(q), the
aggregated Enc(dalpha), the summed inner products) is a vector of blocks: each server
operation adds or scales whole ciphertexts, and a client receives only blocks of its own
samples. With s = 1 a block is a sample, numbered by its id.

A message that concerns some of a client's samples (by their positions in I_k) carries
the blocks that hold them, in ascending order; the client reads the values at those
positions and ignores the rest of the blocks (:class:`ClientBlocks`).
"""

import numpy as np


class BlockLayout:
    """The blocks of a run (server side; public set-up information).

    ``block_of[i]``, ``slot_of[i]``: where sample i sits; ``client_blocks[k]``: the
    blocks of client k, ascending (client k's local block j is global block
    ``client_blocks[k][j]``); ``local_block_of[k][p]``: the local block of position p of
    I_k; ``members[k]``: (local blocks, s) positions in I_k, -1 for an empty slot.
    """

    def __init__(self, sample_ids, n_samples, slots):
        self.slots = int(slots)
        self.n_samples = int(n_samples)
        if self.slots == 1:
            self.block_of = np.arange(self.n_samples, dtype=np.int64)
            self.slot_of = np.zeros(self.n_samples, dtype=np.int64)
        else:
            self.block_of, self.slot_of = _blocks_by_holder_set(sample_ids, self.n_samples,
                                                                self.slots)
        self.n_blocks = int(self.block_of.max(initial=-1)) + 1
        self.local_block_of, self.client_blocks, self.members = [], [], []
        for I in sample_ids:
            blocks, local = np.unique(self.block_of[I], return_inverse=True)
            members = np.full((blocks.size, self.slots), -1, dtype=np.int64)
            members[local, self.slot_of[I]] = np.arange(I.size)
            self.client_blocks.append(blocks)
            self.local_block_of.append(local.astype(np.int64))
            self.members.append(members)

    def local_blocks(self, k, positions):
        """Client k's local blocks (ascending) holding its samples at ``positions``."""
        return _present(self.local_block_of[k][positions], self.client_blocks[k].size)

    def global_blocks(self, k, positions):
        """The global blocks (ascending) holding client k's samples at ``positions``."""
        return self.client_blocks[k][self.local_blocks(k, positions)]

    def blocks_of_samples(self, ids):
        """The global blocks (ascending) holding samples ``ids``."""
        return _present(self.block_of[ids], self.n_blocks)


def draw_units(sample_ids, n_samples, draw_block, blocks=None):
    """Each client's draw units (``hyfdca._draws``): the ``members`` of the
    ``draw_block``-slot layout (``blocks`` if it has that many slots); None for
    ``draw_block`` = 1 (a unit is a sample)."""
    if draw_block == 1:
        return None
    if blocks is None or blocks.slots != draw_block:
        blocks = BlockLayout(sample_ids, n_samples, draw_block)
    return blocks.members


def _present(indices, size):
    """The distinct values of ``indices`` (each in [0, size)), ascending: a mark per value,
    no sort (these run several times per message)."""
    marks = np.zeros(size, dtype=bool)
    marks[indices] = True
    return np.flatnonzero(marks)


def _blocks_by_holder_set(sample_ids, n_samples, slots):
    """(block_of, slot_of): samples grouped by holder set, ascending ids, blocks of
    ``slots``, blocks numbered by their first sample."""
    sizes = [I.size for I in sample_ids]
    samples = np.concatenate(sample_ids) if sample_ids else np.zeros(0, np.int64)
    holders = np.repeat(np.arange(len(sample_ids), dtype=np.int64), sizes)
    order = np.lexsort((holders, samples))
    samples, holders = samples[order], holders[order]
    bounds = np.searchsorted(samples, np.arange(n_samples + 1))
    group_of = {}
    groups = np.empty(n_samples, dtype=np.int64)
    for i in range(n_samples):
        key = holders[bounds[i]:bounds[i + 1]].tobytes()
        groups[i] = group_of.setdefault(key, len(group_of))
    by_group = np.argsort(groups, kind="stable")  # ascending ids within each group
    rank = np.empty(n_samples, dtype=np.int64)
    sorted_groups = groups[by_group]
    starts = np.searchsorted(sorted_groups, sorted_groups, side="left")
    rank[by_group] = np.arange(n_samples) - starts
    slot_of = rank % slots
    firsts = np.flatnonzero(slot_of == 0)  # block b starts at sample firsts[b]
    key = groups * (n_samples + 1) + rank // slots  # (group, block within the group)
    return _lookup(key[firsts], key), slot_of


def _lookup(keys, queries):
    """Index in ``keys`` (distinct) of each query."""
    order = np.argsort(keys)
    return order[np.searchsorted(keys, queries, sorter=order)]


class ClientBlocks:
    """A client's view of its blocks: ``members`` (local blocks, s) positions in I_k,
    -1 for an empty slot (sent with the set-up request)."""

    def __init__(self, members):
        self.members = np.asarray(members, dtype=np.int64)
        self.slots = self.members.shape[1]
        filled = self.members >= 0
        n_local = int(filled.sum())
        self.block_of = np.empty(n_local, dtype=np.int64)
        self.slot_of = np.empty(n_local, dtype=np.int64)
        rows, cols = np.nonzero(filled)
        self.block_of[self.members[rows, cols]] = rows
        self.slot_of[self.members[rows, cols]] = cols

    def blocks(self, positions):
        """The local blocks (ascending) holding ``positions``."""
        return _present(self.block_of[positions], self.members.shape[0])

    def pack(self, positions, values, base=None):
        """The values to encrypt for the blocks holding ``positions``: ``values`` at
        ``positions``, ``base`` (a value per position of I_k; default 0) elsewhere in those
        blocks, 0 in empty slots."""
        blocks, rows = self._rows(positions)
        members = self.members[blocks]
        out = np.zeros(members.shape)
        if base is not None:
            filled = members >= 0
            out[filled] = base[members[filled]]
        out[rows, self.slot_of[positions]] = values
        return out.ravel()

    def read(self, positions, values):
        """The values at ``positions`` from the decrypted ``values`` of the blocks holding
        them (as :meth:`pack` laid them out)."""
        blocks, rows = self._rows(positions)
        grid = np.asarray(values).reshape(blocks.size, self.slots)
        return grid[rows, self.slot_of[positions]]

    def _rows(self, positions):
        """(the blocks holding ``positions``, ascending; the row of each position's block
        among them)."""
        marks = np.zeros(self.members.shape[0], dtype=bool)
        marks[self.block_of[positions]] = True
        rank = np.cumsum(marks) - 1
        return np.flatnonzero(marks), rank[self.block_of[positions]]
