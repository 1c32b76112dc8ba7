"""sigma's rules (hyfdca/_sigma.py): the safe value, and the partial-participation rule
(the groups present in expectation plus the staleness term), against the formulas of
docs/algorithm.md worked by hand."""

from math import comb

import numpy as np
import pytest

from feddata import Layout
from hyfdca import HyFDCASettings
from hyfdca._sigma import (STALE_COUPLING, chance_any_present, partial_sigma,
                           present_groups, present_per_round, safe_sigma, stale_moves)

N = 600


def grid_layout(p, q, coherence=0.5):
    """P sample groups x Q feature groups over N samples and 2 Q features."""
    rows = np.array_split(np.arange(N), p)
    cols = np.array_split(np.arange(2 * q), q)
    sample_ids = [r for r in rows for _ in cols]
    feature_ids = [c for _ in rows for c in cols]
    return Layout.from_ids(sample_ids, feature_ids, sq_norm_total=1.0,
                           mean_sq_total=coherence)


def share(s):
    return lambda n: int(round(s * n))


@pytest.mark.parametrize("p, q", [(1, 1), (3, 3), (5, 2), (1, 4), (4, 1)])
def test_at_full_participation_the_rule_is_the_safe_value(p, q):
    layout = grid_layout(p, q)
    assert safe_sigma(layout) == pytest.approx(p)
    assert partial_sigma(layout, "full", 1.0, share(0.03)) == pytest.approx(p)
    assert stale_moves(layout, p * q, share(0.03)) == 0.0


@pytest.mark.parametrize("p, q", [(3, 3), (1, 4), (2, 5)])
def test_one_client_a_round_on_a_grid(p, q):
    """sigma = 1 + beta c (Q - 1) s / P: a client's samples are a P-th of N, each moved
    by its Q - 1 other holders at share s while it is away."""
    layout = grid_layout(p, q, coherence=0.4)
    fraction = 0.5 / (p * q)           # round(f K) = 0, so one client a round
    assert present_per_round("fraction", fraction, p * q) == 1
    expected = 1 + STALE_COUPLING * 0.4 * (q - 1) * 0.03 / p
    assert partial_sigma(layout, "fraction", fraction, share(0.03)) == \
        pytest.approx(expected)


def test_the_groups_present_are_counted_in_expectation():
    """12 x 12 with 14 of 144 clients a round: 12 (1 - C(132, 14) / C(144, 14))."""
    layout = grid_layout(12, 12)
    expected = 12 * (1 - comb(132, 14) / comb(144, 14))
    assert present_groups(layout, 14) == pytest.approx(expected)
    assert chance_any_present(10, 10, 3) == 1.0 and chance_any_present(10, 0, 3) == 0.0


def test_staleness_falls_as_more_clients_take_part_and_vanishes_without_shared_samples():
    layout = grid_layout(3, 3)
    moves = [stale_moves(layout, m, share(0.03)) for m in range(1, 10)]
    assert moves[0] == pytest.approx(2 * 0.03 / 3) and moves[-1] == 0.0
    assert all(a > b for a, b in zip(moves, moves[1:]))
    assert stale_moves(grid_layout(4, 1), 1, share(0.03)) == 0.0   # horizontal


def test_cyclic_participation_counts_the_mean_subset():
    assert present_per_round("cyclic", 0.25, 12) == 3.0       # 4 subsets of 3
    assert present_per_round("cyclic", 0.25, 9) == 2.25       # an approximation there
    assert present_per_round("fraction", 0.1, 25) == 2.0      # round(2.5) = 2
    assert present_per_round("fraction", 0.1, 4) == 1.0       # at least one


def test_at_full_participation_the_partial_rule_is_the_safe_value_to_the_bit():
    layout = grid_layout(5, 3)
    assert partial_sigma(layout, "fraction", 1.0, share(0.03)) == safe_sigma(layout)


def test_a_layout_without_the_coherence_is_damped_as_the_most_coherent():
    ids = grid_layout(1, 4)
    bare = Layout.from_ids(ids.sample_ids, ids.feature_ids)
    assert bare.coherence is None
    assert partial_sigma(bare, "fraction", 0.1, share(0.03)) == \
        pytest.approx(1 + STALE_COUPLING * 1.0 * 3 * 0.03)
    bound = HyFDCASettings.from_variant("auto", lam=1e-4, participation="fraction",
                                        fraction=0.1, min_H=1).bind(bare)
    assert bound.sigma_value == pytest.approx(1 + STALE_COUPLING * 3 * bound.iic)


def test_auto_at_a_low_fraction_binds_the_partial_rule_with_its_own_local_work():
    """The preset's sigma follows the iic bind() resolves (raised for incoherent data),
    and an explicit sigma is kept."""
    layout = grid_layout(3, 3, coherence=0.1)
    settings = HyFDCASettings.from_variant("auto", lam=1e-4, participation="fraction",
                                           fraction=0.1)
    bound = settings.bind(layout)
    assert bound.sigma == "partial" and bound.iic > 0.03
    moved = bound.inner_steps(N // 3) / (N // 3)   # each client holds a third of N
    assert bound.sigma_value == pytest.approx(1 + STALE_COUPLING * 0.1 * 2 * moved / 3)
    fixed = HyFDCASettings.from_variant("auto", lam=1e-4, participation="fraction",
                                        fraction=0.1, sigma=2.0).bind(layout)
    assert fixed.sigma_value == 2.0


def test_below_lam_1e4_the_staleness_term_is_that_of_lam_1e4s_local_work():
    """The preset scales its local work by (lam / 1e-4)^(1/2) below 1e-4; the staleness
    term scales it back (a stale part drifts more at a smaller lam for the same H)."""
    layout = grid_layout(1, 4, coherence=0.3)
    bound = {lam: HyFDCASettings.from_variant("auto", lam=lam, participation="fraction",
                                              fraction=0.1, min_H=1).bind(layout)
             for lam in (1e-4, 1e-6)}
    assert bound[1e-6].iic == pytest.approx(bound[1e-4].iic / 10)
    for lam, scale in ((1e-4, 1.0), (1e-6, 10.0)):
        assert bound[lam].sigma_value == pytest.approx(partial_sigma(
            layout, "fraction", 0.1, bound[lam].inner_steps, scale))
    moved = bound[1e-6].inner_steps(N) / N      # one client holds every sample
    assert bound[1e-6].sigma_value == pytest.approx(1 + STALE_COUPLING * 0.3 * 3 * moved * 10)


def test_the_largest_staleness_over_the_clients_counts():
    """quadrants:5's shape: four feature chunks, the first split over clients 0 and 1 by
    samples. Clients 2-4 hold every sample, each also held by three others (T_h = 3 s);
    clients 0 and 1 hold half of them (1.5 s). One client a round, so sigma_c is 1."""
    n, half = N, np.arange(N // 2)
    sample_ids = [half, half + N // 2] + [np.arange(n)] * 3
    feature_ids = [np.array([0]), np.array([0]), np.array([1]), np.array([2]), np.array([3])]
    layout = Layout.from_ids(sample_ids, feature_ids, sq_norm_total=1.0, mean_sq_total=0.5)
    assert safe_sigma(layout) == pytest.approx(1.25)
    assert stale_moves(layout, 1, share(0.03)) == pytest.approx(3 * 0.03)
    assert present_groups(layout, 1) == pytest.approx(0.2 * 0.25 * 2 + 0.6 * 0.75)
    assert partial_sigma(layout, "fraction", 0.1, share(0.03)) == \
        pytest.approx(1 + STALE_COUPLING * 0.5 * 3 * 0.03)


def test_the_groups_do_not_depend_on_the_ids_dtype():
    """A client's ids as int32 (a FederatedDataset keeps its blocks' dtype) group with the
    same ids as int64 (a server's Layout.from_ids), so both engines bind the same sigma."""
    layout = grid_layout(2, 2)
    narrow = Layout(layout.n_samples, layout.n_features,
                    (layout.sample_ids[0].astype(np.int32), *layout.sample_ids[1:]),
                    layout.feature_ids, layout.holder_counts, layout.sq_norm_total,
                    layout.mean_sq_total)
    for m in (1, 2, 3):
        assert present_groups(narrow, m) == present_groups(layout, m)
