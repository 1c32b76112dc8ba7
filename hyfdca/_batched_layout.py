"""The batched engine's arrays, grouped into the few named structures its kernels take.

A holding h is a (client, local sample) pair; client k's holdings are
``row_off[k]:row_off[k+1]``. A feature holding is a (client, local feature) pair; client
k's are ``feat_off[k]:feat_off[k+1]``. State is per holding, per feature holding, per
sample or per client: never dense N x d, d x K or N x K. Per-client scratch has one row
per chunk of clients (the kernels' parallel loops run over ``rows`` chunks, client a in
chunk a mod rows), sized by the largest client.

The structures are NamedTuples of arrays (and, in :class:`Params`, numbers), which Numba
passes to a kernel as one argument; the arrays are mutated in place, the tuples never.
Numbers that change every round (the alpha version, the scratch token) are passed apart.
"""

from typing import NamedTuple

import numpy as np


class Blocks(NamedTuple):
    """Every client block in one CSR (column indices in each client's LOCAL feature
    coordinates), who holds what, and the per-holding constants of the local steps."""

    data: np.ndarray         # float64, the non-zeros of all holdings
    indices: np.ndarray      # int32, local column of each non-zero
    gcol: np.ndarray         # int32, global column of each non-zero (empty if not kept)
    indptr: np.ndarray       # int64, row pointers over all holdings
    row_off: np.ndarray      # int64 (K + 1), client k's holdings
    feat_off: np.ndarray     # int64 (K + 1), client k's feature holdings
    hold_feat: np.ndarray    # int64, global feature id of each feature holding (J_k)
    hold_sample: np.ndarray  # int64, global sample id of each holding (I_k)
    hold_client: np.ndarray  # int32, client of each holding
    samp_ptr: np.ndarray     # int64 (N + 1), holders of sample i: samp_hold[samp_ptr[i]:...]
    samp_hold: np.ndarray    # int64, holdings of each sample, in client order
    y: np.ndarray            # float64 per holding: the sample's label
    q: np.ndarray            # float64 per holding: the full squared row norm q_i
    partial_sq: np.ndarray   # float64 per holding: the client's part ||x_i^k||^2
    rho: np.ndarray          # float64 per holding: rho_i (``_round.correction_factors``)
    update_weight: np.ndarray  # float64 per holding (``_round.aggregation_weights``)


class Params(NamedTuple):
    """The run's numbers: fixed-point scales and the local dual method's constants."""

    alpha_scale: float       # 2^-(f + step bits): Enc(alpha) integers to values
    frac_scale: float        # 2^f
    inv_frac_scale: float    # 2^-f
    lam_n: float             # lam N
    n_samples: int           # N
    loss_code: int
    sigma: float
    smoothing: float


class Duals(NamedTuple):
    """The server's Enc(alpha) (plain backend: integers) and the clients' copies."""

    enc_alpha: np.ndarray      # int64 (N,)
    changed_at: np.ndarray     # int64 (N,): alpha version at which alpha_i last changed
    synced_at: np.ndarray      # int64 (K,): version up to which client k has synced
    alpha_loc: np.ndarray      # float64 per holding: the client's copy of alpha_i
    unreported: np.ndarray     # float64 per holding: synced change awaiting phase D
    unreported_at: np.ndarray  # int64 per holding: round stamp at which it is valid


class Draws(NamedTuple):
    """Index streams and this round's draws (local positions)."""

    stream_keys: np.ndarray  # uint64 (K,)
    H: np.ndarray            # int64 (K,): draws per round
    draw_off: np.ndarray     # int64 (K + 1): client k's draws are drawn[draw_off[k]:...]
    drawn: np.ndarray        # int64
    drawn_cnt: np.ndarray    # int64 (K,): how many were drawn (H, or 0: nothing eligible)
    eligible: np.ndarray     # bool (N,): samples that may be drawn (consistent rule)
    units: np.ndarray        # int64 (units, draw_block): local positions, -1 = empty slot
    unit_off: np.ndarray     # int64 (K + 1): client k's units are units[unit_off[k]:...]
    cand: np.ndarray         # int64 (rows, max |I_k|): candidates; also the sync's due rows
    picks: np.ndarray        # int64 (rows, max H_k): the drawn units
    perm: np.ndarray         # int64 (rows, max |I_k|): the identity, for O(H) permutations


class RoundArrays(NamedTuple):
    """Per-round values over samples and holdings (stamped or overwritten each round)."""

    union: np.ndarray      # int64 (N,): the round's drawn samples, first n_union entries
    mark: np.ndarray       # int64 (N,): stamp of the round a sample joined the union
    touched: np.ndarray    # int64 (N,): stamp of the round a sample received an update
    margin: np.ndarray     # int64 (N,): Enc(x_i . w) summed over holders
    enc_delta: np.ndarray  # int64 (N,): Enc(aggregated dalpha_i)
    present: np.ndarray    # int64 (N,): present holders of each union sample (and of
                           # every sample at phase A under the consistent rule)
    parts: np.ndarray      # int64 per holding: Enc(x_i^k . w), stale for absent holders
    upd: np.ndarray        # int64 per holding: Enc(dalpha_i x update weight)
    hold_mark: np.ndarray  # int64 per holding: stamp of the round it sent an update
    work: np.ndarray       # int64 (K,): per available client, size of its local steps
    err: np.ndarray        # int64 (1,): set to 1 on a fixed-point overflow


class Scratch(NamedTuple):
    """Per-chunk client scratch (kept zero between uses) and the line-search terms."""

    wk: np.ndarray          # float64 (rows, max |J_k|): w on J_k
    u: np.ndarray           # float64 (rows, max |J_k|): the local correction u
    dalpha: np.ndarray      # float64 (rows, max |I_k|)
    buf: np.ndarray         # float64 (terms, max |I_k|): a client's line-search terms
    change_row: np.ndarray  # float64 (max |J_k|): one client's change of v_k
    feat_mark: np.ndarray   # int64 (max |J_k|): features touched (by token)
    feat_list: np.ndarray   # int64 (max |J_k|): their list


class UnionHoldings(NamedTuple):
    """Per available client, its holdings of a round's union samples, ascending:
    ``lst[seg[k, 0]:seg[k, 1]]``, valid where ``stamp[k]`` is that round's stamp."""

    lst: np.ndarray
    seg: np.ndarray
    stamp: np.ndarray

    @classmethod
    def empty(cls, n_holdings, n_clients):
        return cls(np.zeros(n_holdings, dtype=np.int64),
                   np.zeros((n_clients, 2), dtype=np.int64),
                   np.full(n_clients, -1, dtype=np.int64))


def structure_arrays(values):
    """Every array among ``values``, looking inside tuples (the structures) and lists."""
    found = []
    for value in values:
        if isinstance(value, np.ndarray):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found += structure_arrays(value)
    return found
