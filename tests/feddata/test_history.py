"""History.certified: the best certified primal and dual over a run's evaluations."""

import numpy as np
import pytest

from feddata import History


def test_certified_takes_the_smallest_primal_and_the_largest_dual():
    history = History()
    for round_, primal, dual in [(0, 1.0, 0.0), (10, 0.7, 0.4), (20, 0.9, 0.5)]:
        history.add_evaluation(round_, primal, dual)
    assert history.certified() == (0.7, 0.5)  # from different certificates


def test_certified_skips_non_finite_certificates():
    history = History()
    history.add_evaluation(0, 1.0, 0.0)
    history.add_evaluation(10, np.nan, np.nan)
    history.add_evaluation(20, np.inf, -np.inf)
    assert history.certified() == (1.0, 0.0)
    lone = History()
    lone.add_evaluation(0, np.nan, np.nan)
    assert all(np.isnan(lone.certified()))


def test_certified_needs_an_evaluation():
    with pytest.raises(ValueError, match="no evaluation"):
        History().certified()


def test_certificate_costs_survive_the_state_round_trip():
    history = History(p_star=0.5)
    history.add_evaluation(0, 1.0, 0.0)
    history.add_certificate_cost(0, dict(available=3, rtc=3, encrypt=7, decrypt=9, add=7,
                                         multiply=0, messages_up=9))
    back = History.from_state(history.state())
    assert back.certificates == {0: dict(available=3, rtc=3, encrypt=7, decrypt=9, add=7,
                                         multiply=0, encryption_seconds=0.0)}
    older = history.state()
    del older["certificates"]  # a checkpoint written before certificates were recorded
    assert History.from_state(older).certificates == {}
