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


def test_to_json_writes_numpy_numbers_and_no_nan(tmp_path):
    """Records with NumPy numbers failed half-way and left a partial file; a NaN p_star
    was written as NaN, which is not JSON."""
    import json

    history = History(p_star=float("nan"))
    history.add_round(dict(round=1, available=np.int64(3), step=np.float64(0.5),
                           rtc=np.int64(4), encrypt=0, decrypt=0, add=0, multiply=0,
                           compute_seconds=0.1, protocol_seconds=0.2, bytes_up=1,
                           bytes_down=2))
    history.add_evaluation(1, 1.0, 0.5, None)
    path = tmp_path / "h.json"
    history.to_json(path)
    written = json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(name))
    assert written["p_star"] is None and written["rows"][1]["available"] == 3
