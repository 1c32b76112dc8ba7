"""sigma, the curvature multiplier of the clients' local subproblems (docs/algorithm.md
sections 3 and 6): how far the updates that reach the server's w add up, from the public
layout (I_k, |C_i|, the coherence c) and the participation.

Under full participation the CoCoA+-safe value counts the sample groups whose updates
add up. Under partial participation fewer groups take part in a round, but an absent
holder h's stored part x_i^h . w of a shared sample misses every move the other holders
made since h last took part, so a present client steps on a stale margin. The partial
rule counts the groups present in expectation and adds a term for that staleness.
"""

import numpy as np

from feddata.participation import cyclic_subsets, draw_size

# beta: the staleness term is beta c T (c the layout's coherence, T the stale moves of
# :func:`stale_moves`): fitted on a9a split five ways at f = 0.1 (c = 0.447, each client
# moving 0.03 of its samples a round: beta x 0.03 = 2.4 per unit of stale overlap), a
# heuristic, not a bound; checked on Fashion-MNIST (docs/algorithm.md section 6,
# thirty-seventh round)
STALE_COUPLING = 80.0


def _client_weight(counts, ids):
    """max_{i in I_k} 1/|C_i|: client k's part of the safe value."""
    return float(np.max(1.0 / counts[ids]))


def safe_sigma(layout):
    """sum over clients k of max_{i in I_k} 1/|C_i|: the number of sample groups whose
    updates add up when every client takes part (a P x Q grid: P)."""
    return sum(_client_weight(layout.holder_counts, ids) for ids in layout.sample_ids)


def present_per_round(participation, fraction, n_clients):
    """m, the clients that take part in a round: K (full), max(1, round(f K)) (fraction,
    as ``feddata.Participation`` draws them), K / ceil(1/f) on average (cyclic)."""
    if participation == "full":
        return float(n_clients)
    if participation == "cyclic":
        return n_clients / cyclic_subsets(fraction)
    return float(draw_size(fraction, n_clients))


def chance_any_present(n_clients, present, group_size):
    """P(at least one of ``group_size`` given clients is among ``present`` drawn without
    replacement from ``n_clients``): 1 - prod_{j < n_g} (K - m - j) / (K - j). Under
    cyclic participation (fixed subsets of a seeded permutation, m = K / ceil(1/f) on
    average) the same product is an approximation: exact for the average over
    permutations where ceil(1/f) divides K."""
    j = np.arange(group_size)
    missed = np.clip((n_clients - present - j) / (n_clients - j), 0.0, None)
    return 1.0 - float(np.prod(missed))


def present_groups(layout, present):
    """sigma_c = sum over groups g of P(g present) sum_{k in g} max_{i in I_k} 1/|C_i|,
    a group being the clients that hold the same samples (a grid's row of blocks): the
    safe value of the clients a round has, in expectation (at m = K, the safe value)."""
    groups = {}
    for ids in layout.sample_ids:
        key = np.asarray(ids, dtype=np.int64).tobytes()   # the same ids whatever their dtype
        size, weight = groups.get(key, (0, 0.0))
        groups[key] = (size + 1, weight + _client_weight(layout.holder_counts, ids))
    k = len(layout.sample_ids)
    return sum(chance_any_present(k, present, size) * weight
               for size, weight in groups.values())


def stale_moves(layout, present, steps):
    """T = max_h (K - m)/(K - 1) (1/N) sum_{i in I_h} sum_{k != h holding i} H_k / |I_k|.

    Client k moves a share H_k / |I_k| of its samples a round (``steps(n)`` = H_k of a
    client of n samples). Since h last took part it has missed (K - m)/(K - 1) rounds'
    moves of each other client in expectation (the absence's rounds, each with m of the
    other K - 1 present: ((K - m)/m)(m/(K - 1)); memoryless for a random fraction; under
    cyclic participation an approximation, as h's own subset never moves while h is
    away), so T is the expected number of moves of h's samples, as a share of N, that its
    stale parts miss; 0 at full participation and where no sample is shared."""
    k, n = len(layout.sample_ids), layout.n_samples
    if k < 2:
        return 0.0
    share = [steps(ids.size) / ids.size for ids in layout.sample_ids]
    moved = np.zeros(n)                       # sum over the holders of i of H_k / |I_k|
    for ids, s in zip(layout.sample_ids, share):
        moved[ids] += s
    missed = max(float(np.sum(moved[ids] - s)) for ids, s in zip(layout.sample_ids, share))
    return (k - present) / (k - 1) * missed / n


def partial_sigma(layout, participation, fraction, steps, lam_scale=1.0):
    """sigma = max(1, sigma_c) + STALE_COUPLING c T lam_scale (:func:`present_groups`,
    :func:`stale_moves`; c the layout's coherence, 1 where the layout lacks it); the safe
    value under full participation. ``lam_scale``: HyFDCASettings gives (1e-4 /
    lam)^(1/2) below lam 1e-4, whatever the local work: a stale move shifts x_i . w by
    about (x_i . x_j) / (lam N), more at a smaller lam, and measured the term wants the
    square root of that growth (a9a 3x3 at lam 1e-5, f = 0.1: without the factor sigma
    1.22 ended at relative loss 0.067, with it 1.71 at 0.0089; 2 at 0.0081, 3 at 0.0128;
    for the presets it cancels their (lam / 1e-4)^(1/2) scaling of the local work).

    With one client a round on a P x Q grid whose clients move a share s of their
    samples, sigma = 1 + beta c (Q - 1) s / P (a9a 3x3, s = 0.03: 1.71 against the safe
    3; vertical in 4: 4.2 against 1): below the safe value where few groups take part and
    little is stale, above it where most of a sample's holders are absent and its rows
    are coherent."""
    m = present_per_round(participation, fraction, len(layout.sample_ids))
    if m >= len(layout.sample_ids):
        return safe_sigma(layout)        # every group present, nothing stale
    coherence = 1.0 if layout.coherence is None else layout.coherence
    return (max(1.0, present_groups(layout, m))
            + STALE_COUPLING * coherence * stale_moves(layout, m, steps) * lam_scale)
