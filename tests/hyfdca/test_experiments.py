"""The experiment pipeline: GRA, the seven metrics, smoothing, the time model, tuning and
a CI-sized run of the whole suite."""

import dataclasses
import json
import pickle
import re

import numpy as np
import pytest

from hyfdca import experiments as E
from feddata.history import History
from hyfdca._checkpoint import pickled
from hyfdca._signals import Terminated
from hyfdca.cli import main
from hyfdca.experiments._compare import truncate_by_time
from hyfdca.experiments._methods import (charge_compute, charge_encryption, default_params,
                                         sgd_step_limit)
from hyfdca.experiments._report import summary_rows, tuning_table
from hyfdca.experiments._metrics import METRIC_NAMES, RESOLUTION, diverged


def test_gra_matches_a_hand_computation():
    values = [[1.0, 10.0], [2.0, 30.0], [3.0, 20.0]]   # metric 0: smaller, 1: larger better
    # normalised: [1, 0], [0.5, 1], [0, 0.5]; deviations [0, 1], [0.5, 0], [1, 0.5]
    # xi = 0.5 / (D + 0.5): [1, 1/3], [1/2, 1], [1/3, 1/2]
    grades = E.grey_relational_grades(values, [False, True])
    np.testing.assert_allclose(grades, [2 / 3, 3 / 4, 5 / 12])
    assert E.select_by_gra(values, [False, True]) == 1


def test_gra_prefers_a_dominating_candidate_and_ignores_constant_metrics():
    values = [[5.0, 0.1, 7.0], [4.0, 0.2, 7.0], [6.0, 0.05, 7.0]]
    assert E.select_by_gra(values, [False, True, True]) == 1


def test_gra_weighs_a_spread_within_a_metrics_resolution_by_its_size():
    """Three runtimes 1e-4 apart (a baseline's latency-bound rounds) outvote a final loss
    ten times lower under min-max normalisation; with the runtimes' span widened to their
    1% resolution they move the grade by 1% of the range and the loss decides (the
    metrics' own RESOLUTION marks the runtimes so)."""
    fast, slow = 0.25750, 0.25753
    values = [[fast, fast, fast, 1.0], [slow, slow, slow, 0.1]]
    better = [False] * 4
    assert E.select_by_gra(values, better) == 0
    assert E.select_by_gra(values, better, resolution=[0.01] * 3 + [0.0]) == 1
    assert [r > 0 for r in RESOLUTION] == [n.startswith("runtime") for n in METRIC_NAMES]
    with pytest.raises(ValueError, match="resolution must be 4 numbers >= 0"):
        E.select_by_gra(values, better, resolution=[-1.0] * 4)


@pytest.mark.parametrize("values, message", [
    (np.zeros((0, 2)), "no candidates"), ([[1.0, np.nan]], "must be finite"),
    ([[1.0, 2.0, 3.0]], "metrics")])
def test_gra_errors(values, message):
    with pytest.raises(ValueError, match=message):
        E.grey_relational_grades(values, [True, False])


def test_moving_average_against_a_loop():
    rng = np.random.default_rng(0)
    values = rng.normal(size=40)
    values[[3, 17]] = np.nan
    window = 6
    expected = [np.nanmean(values[max(0, t - window + 1):t + 1]) for t in range(40)]
    np.testing.assert_allclose(E.moving_average(values, window), expected)
    assert E.smoothing_window(12345) == 123 and E.smoothing_window(10) == 1


def _history(primal, compute=0.5, rtc=3, encryption=0.25, accuracy=None, iterate=None):
    history = History(p_star=1.0)
    for r, p in enumerate(primal):
        if r:
            history.add_round(dict(round=r, available=2, step=1.0, rtc=rtc, bytes_up=0,
                                   bytes_down=0, encrypt=4, decrypt=2, add=3, multiply=1,
                                   compute_seconds=compute, protocol_seconds=0.0,
                                   encryption_seconds=encryption))
        history.add_evaluation(r, p, np.nan, None if accuracy is None else accuracy[r],
                               None if iterate is None else iterate[r])
    return history


def test_the_seven_metrics():
    primal = [3.0, 2.0, 1.5, 1.25, 1.1, 1.05, 1.0]
    history = _history(primal, accuracy=[0.5, 0.6, 0.7, 0.9, 0.8, 0.85, 0.88])
    m = E.selection_metrics(history)
    assert list(m) == list(E.METRIC_NAMES)
    assert m["runtime_0"] == pytest.approx(0.75)
    assert m["runtime_0.2575"] == pytest.approx(0.75 + 3 * 0.2575)
    assert m["runtime_0.6"] == pytest.approx(0.75 + 1.8)
    assert m["final_loss"] == pytest.approx(np.mean(primal[-5:]))
    assert m["best_accuracy"] == 0.9
    assert m["volatility"] == pytest.approx(np.std(np.diff(primal)))
    assert m["iterations_to_progress"] == 4     # drops 1.75 (round 3), 1.9 (round 4) vs 0.9 x 2


def test_a_candidate_that_never_lowers_its_primal_takes_the_worst_progress_round():
    """No decrease at all is the slowest progress (the last evaluated round), not the
    fastest (round 0)."""
    rising = E.selection_metrics(_history([1.0, 1.5, 3.0, 2.0]))
    falling = E.selection_metrics(_history([3.0, 1.1, 1.05, 1.0]))   # 1.9 of 2 at round 1
    assert rising["iterations_to_progress"] == 3
    assert falling["iterations_to_progress"] == 1


def test_divergence_is_detected():
    assert diverged(_history([1.5, 2.0, np.inf]))
    assert diverged(_history([1.5, 3e3]))
    assert not diverged(_history([1.5, 1.2, 1.1]))


def test_divergence_and_volatility_are_judged_on_the_iterate():
    """HyFDCA's primal is its certified point, which cannot rise; its iterate can."""
    point, iterate = [3.0, 2.0, 1.5, 1.5], [3.0, 2.0, 5e3, 1.5]
    assert diverged(_history(point, iterate=iterate))
    assert not diverged(_history(point))
    m = E.selection_metrics(_history(point, iterate=iterate))
    assert m["volatility"] == pytest.approx(np.std(np.diff(iterate)))
    assert m["final_loss"] == pytest.approx(np.mean(point[-5:]))


def test_truncate_by_time_keeps_the_rounds_within_the_budget():
    history = _history([3.0, 2.0, 1.5, 1.2, 1.1], compute=1.0, rtc=1, encryption=0.0)
    cut = truncate_by_time(history, budget=2.5, latency=0.0)   # rounds cost 1 s each
    assert len(cut.rounds) == 2 and sorted(cut.evaluations) == [0, 1, 2]


def test_encryption_is_charged_from_counts():
    history = _history([2.0, 1.0], encryption=0.0)
    charge_encryption(history, dict(encrypt=1.0, decrypt=10.0, add=100.0, multiply=1000.0))
    # client side (4 x 1 + 2 x 10) / 2 present + server side 3 x 100 + 1 x 1000
    assert history.rounds[0]["encryption_seconds"] == pytest.approx(12.0 + 1300.0)


def test_a_certificate_is_charged_at_its_round_and_kept_by_truncation():
    history = _history([3.0, 2.0, 1.5, 1.2, 1.1], compute=1.0, rtc=1, encryption=0.0)
    history.add_certificate_cost(2, dict(available=4, rtc=3, encrypt=8, decrypt=4, add=2,
                                         multiply=0))
    charge_encryption(history, dict(encrypt=1.0, decrypt=10.0, add=100.0, multiply=1000.0))
    # client side (8 x 1 + 4 x 10) / 4 clients + server side 2 x 100
    assert history.certificates[2]["encryption_seconds"] == pytest.approx(12.0 + 200.0)
    without = _history([3.0, 2.0, 1.5, 1.2, 1.1], compute=1.0, rtc=1, encryption=0.0)
    charge_encryption(without, dict(encrypt=1.0, decrypt=10.0, add=100.0, multiply=1000.0))
    extra = history.simulated_time(0.5) - without.simulated_time(0.5)
    np.testing.assert_allclose(extra, [0, 0, 213.5, 213.5, 213.5])
    assert list(truncate_by_time(history, 10.0, 0.5).certificates) == []
    assert list(truncate_by_time(history, 1e4, 0.5).certificates) == [2]


@pytest.fixture(scope="module")
def problem():
    fed, validation, p_star = E.prepare("breast_cancer", "2x2", lam=1e-2)
    return E.Problem(fed, "hinge", 1e-2, "fraction", 0.5, p_star, validation, seed=0)


def test_both_engines_give_the_same_history_and_encryption_charge(problem):
    from dataclasses import replace
    costs = dict(encrypt=1e-3, decrypt=2e-3, add=1e-5, multiply=1e-4)
    runs = {engine: E.run_method("HyFDCA", replace(problem, engine=engine), {}, rounds=5,
                                 costs=costs)
            for engine in ("protocol", "batched")}
    a, b = runs["protocol"], runs["batched"]
    assert a.evaluations == b.evaluations
    charged = [[r["encryption_seconds"] for r in h.rounds] for h in (a, b)]
    assert charged[0] == charged[1] and min(charged[0]) > 0
    assert a.certificates == b.certificates and sorted(a.certificates) == list(range(6))
    assert min(c["encryption_seconds"] for c in a.certificates.values()) > 0
    assert all(r["compute_seconds"] > 0 for r in b.rounds)


def test_deterministic_time_model_charges_counted_work(problem):
    """Every method's compute time is its slowest client's counted work x SECONDS_PER_OP;
    both HyFDCA engines count the same work."""
    from dataclasses import replace
    det = replace(problem, deterministic=True)
    runs = {engine: E.run_method("HyFDCA", replace(det, engine=engine), {}, rounds=4)
            for engine in ("protocol", "batched")}
    ops = [[r["compute_ops"] for r in h.rounds] for h in runs.values()]
    assert ops[0] == ops[1] and min(ops[0]) > 0
    for method in ("FedAvg", "HyFEM", "D3CA"):
        runs[method] = E.run_method(method, det, {}, rounds=3)
    runs["ADMM"] = E.run_method("ADMM", replace(det, participation="full", fraction=1.0),
                                {}, rounds=3)
    for history in runs.values():
        for r in history.rounds:
            assert r["compute_ops"] > 0
            assert r["compute_seconds"] == r["compute_ops"] * E.SECONDS_PER_OP
    uncounted = History(p_star=1.0)
    uncounted.rounds = [dict(runs["FedAvg"].rounds[0], compute_ops=float("nan"))]
    with pytest.raises(ValueError, match="Mine does not count its local work"):
        charge_compute(uncounted, "Mine")


def test_deterministic_suite_gives_the_same_bits_twice(tmp_path):
    """Tuning, equal-time runs and verdict do not depend on the machine's clock."""
    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5,),
                  rounds=8, tune_rounds=4, max_candidates=2, budget_seconds=30)
    outputs = []
    for name in ("a", "b"):
        E.run_suite(config, tmp_path / name, costs=E.REFERENCE_COSTS["paillier"],
                    deterministic=True, log=lambda _: None)
        outputs.append((tmp_path / name / "results.json").read_bytes())
    assert outputs[0] == outputs[1]
    assert b"simulated_seconds" in outputs[0]


def test_a_fraction_of_one_is_full_participation(tmp_path, problem):
    """Every client in every round: HyFDCA runs its full-participation preset (auto-full),
    the run of a Problem with participation "full", and ADMM takes part."""
    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(1.0,),
                  rounds=6, tune_rounds=3, max_candidates=1)
    (comp,), *_ = E.run_suite(config, tmp_path, methods=["HyFDCA", "ADMM"],
                              deterministic=True, log=lambda _: None)
    assert set(comp.by_iteration) == {"HyFDCA", "ADMM"}
    full = dataclasses.replace(problem, participation="full", fraction=1.0,
                               deterministic=True)
    alone = E.run_method("HyFDCA", full, comp.tunings["HyFDCA"].params, rounds=6)
    assert ([r["step"] for r in comp.by_iteration["HyFDCA"].rounds]
            == [r["step"] for r in alone.rounds])
    fraction = E.run_method("HyFDCA", dataclasses.replace(full, participation="fraction"),
                            comp.tunings["HyFDCA"].params, rounds=6)
    assert [r["step"] for r in fraction.rounds] != [r["step"] for r in alone.rounds]


@pytest.mark.parametrize("change, message", [
    (dict(fractions=(0.5, 1.5)), "fraction 1.5 is not in (0, 1]"),
    (dict(fractions=(0.0,)), "fraction 0.0 is not in (0, 1]"),
    (dict(max_candidates=0), "max_candidates must be a whole number >= 1, got 0"),
    (dict(baseline_candidates=0), "baseline_candidates must be a whole number >= 1, got 0"),
    (dict(eval_every=0), "eval_every must be a whole number >= 1, got 0"),
    (dict(datasets={"breast_cancer": ()}), "these settings name no comparison"),
    (dict(datasets={"breast_cancer": ("2x2", "2x2")}),
     "partition '2x2' of breast_cancer is given 2 times"),
    (dict(datasets={"breast_cancer": ("2x2", " 2x2", "02x2")}),   # the same partition
     "partition '2x2' of breast_cancer is given 3 times (as '2x2', ' 2x2', '02x2')"),
])
def test_settings_no_comparison_can_run_are_refused_before_any_work(tmp_path, change,
                                                                    message):
    with pytest.raises(ValueError, match=re.escape(message)):
        E.run_suite(dict(E.QUICK, **change), tmp_path / "out", log=lambda _: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("latency", [True, "0.25", -1.0, np.nan])
def test_a_latency_that_is_not_a_number_of_seconds_is_refused(latency):
    with pytest.raises(ValueError, match="latency must be a finite number of seconds >= 0"):
        E.check_config(E.QUICK, latency)


def test_an_interrupted_suite_resumes_from_its_saved_comparisons(tmp_path, monkeypatch):
    """Each comparison is saved as it finishes; a stopped suite run again into the same
    folder computes only what is missing and gives the bits of an uninterrupted run; a
    change of settings or of the code recomputes."""
    import hyfdca.experiments._suite as suite

    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5, 0.9),
                  rounds=6, tune_rounds=3, max_candidates=2)
    options = dict(costs=E.REFERENCE_COSTS["mask"], deterministic=True, log=lambda _: None)
    E.run_suite(config, tmp_path / "whole", **options)
    computed, real_compare = [], suite.compare

    def compare_until_the_second(label, *args, **kwargs):
        if computed:
            raise KeyboardInterrupt
        computed.append(label)
        return real_compare(label, *args, **kwargs)

    monkeypatch.setattr(suite, "compare", compare_until_the_second)
    with pytest.raises(KeyboardInterrupt):
        E.run_suite(config, tmp_path / "stopped", **options)
    assert [p.name for p in (tmp_path / "stopped" / "comparisons").iterdir()] == [
        "breast_cancer_2x2_f=0.5.pkl"]

    def compare_logged(label, *args, **kwargs):
        computed.append(label)
        return real_compare(label, *args, **kwargs)

    computed.clear()
    monkeypatch.setattr(suite, "compare", compare_logged)
    E.run_suite(config, tmp_path / "stopped", **options)
    assert computed == ["breast_cancer 2x2 f=0.9"]
    assert ((tmp_path / "stopped" / "results.json").read_bytes()
            == (tmp_path / "whole" / "results.json").read_bytes())
    computed.clear()
    with pytest.raises(ValueError, match=r"breast_cancer 2x2 f=0.5 \(saved with other "
                                         r"rounds\); breast_cancer 2x2 f=0.9"):
        E.run_suite(dict(config, rounds=7), tmp_path / "stopped", **options)
    assert computed == []   # refused before any work: nothing saved is lost
    said = []
    E.run_suite(dict(config, rounds=7), tmp_path / "stopped", overwrite=True,
                **dict(options, log=said.append))
    assert computed == ["breast_cancer 2x2 f=0.5", "breast_cancer 2x2 f=0.9"]
    assert "overwriting breast_cancer 2x2 f=0.9 (saved with other rounds)" in said
    computed.clear()
    monkeypatch.setattr(suite, "source_digest", lambda: "changed code")
    said.clear()
    E.run_suite(dict(config, rounds=7), tmp_path / "stopped", **dict(options, log=said.append))
    assert computed == ["breast_cancer 2x2 f=0.5", "breast_cancer 2x2 f=0.9"]
    assert any(line.startswith("breast_cancer 2x2 f=0.5: saved work of other code")
               for line in said)
    computed.clear()
    saved = tmp_path / "stopped" / "comparisons" / "breast_cancer_2x2_f=0.9.pkl"
    saved.write_bytes(saved.read_bytes()[:-100])   # a damaged file is computed again
    E.run_suite(dict(config, rounds=7), tmp_path / "stopped", **options)
    assert computed == ["breast_cancer 2x2 f=0.9"]
    computed.clear()
    said.clear()
    real_prepare = suite.prepare

    def one_validation_label_changed(*args, **kwargs):   # P* stays the same
        fed, (X_val, y_val), p_star = real_prepare(*args, **kwargs)
        return fed, (X_val, np.where(np.arange(y_val.size) == 0, -y_val, y_val)), p_star

    monkeypatch.setattr(suite, "prepare", one_validation_label_changed)
    E.run_suite(dict(config, rounds=7), tmp_path / "stopped", **dict(options, log=said.append))
    assert computed == ["breast_cancer 2x2 f=0.5", "breast_cancer 2x2 f=0.9"]
    assert ("breast_cancer 2x2 f=0.5: saved work of other code, data or measured costs is "
            "not reused") in said
    monkeypatch.setattr(suite, "prepare", real_prepare)
    with pytest.raises(ValueError, match="fraction 0.5 is given 2 times"):
        E.run_suite(dict(config, fractions=(0.5, 0.5)), tmp_path / "stopped", **options)
    with pytest.raises(ValueError, match="settings repeated"):   # the same label
        E.run_suite(dict(config, fractions=(0.5, 0.5000001)), tmp_path / "stopped", **options)


def test_a_comparison_stopped_part_way_resumes_from_its_finished_runs(tmp_path,
                                                                       monkeypatch):
    """Inside a comparison each finished run is saved; a suite stopped in the middle of a
    comparison, run again, computes only the runs it had not finished, gives the bits of
    a run that saves nothing and then deletes the saved runs (also runs left over by a
    stop after the comparison was saved)."""
    import hyfdca.experiments._saved_runs as saved_runs
    import hyfdca.experiments._suite as suite

    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5,),
                  rounds=6, tune_rounds=3, max_candidates=2)
    options = dict(costs=E.REFERENCE_COSTS["mask"], deterministic=True, log=lambda _: None)
    real_run, calls = saved_runs.run_method, []

    def counted(method, *args, **kwargs):
        calls.append(method)
        return real_run(method, *args, **kwargs)

    def stopped_after_five(*args, **kwargs):
        if len(calls) == 5:
            raise KeyboardInterrupt
        return counted(*args, **kwargs)

    class Unsaved:
        """run_method itself, as the suite's store of runs."""
        def __init__(self, folder, fingerprint):
            self.folder = folder

        def __call__(self, *args, **kwargs):
            return counted(*args, **kwargs)

        def count(self):
            return 0

        def remove(self):
            pass

    monkeypatch.setattr(suite, "SavedRuns", Unsaved)
    E.run_suite(config, tmp_path / "whole", **options)
    monkeypatch.setattr(suite, "SavedRuns", saved_runs.SavedRuns)
    every_run = len(calls)
    assert every_run > 8 and not (tmp_path / "whole" / "comparisons" / "unfinished").exists()
    calls.clear()
    monkeypatch.setattr(saved_runs, "run_method", stopped_after_five)
    with pytest.raises(KeyboardInterrupt):
        E.run_suite(config, tmp_path / "stopped", **options)
    unfinished = tmp_path / "stopped" / "comparisons" / "unfinished"
    assert len(list((unfinished / "breast_cancer_2x2_f=0.5").glob("*.pkl"))) == 5
    calls.clear()
    said = []
    monkeypatch.setattr(saved_runs, "run_method", counted)
    E.run_suite(config, tmp_path / "stopped", **dict(options, log=said.append))
    assert len(calls) == every_run - 5
    assert any("breast_cancer 2x2 f=0.5: resuming from 5 saved runs" in s for s in said)
    for table in ("results.json", "tuning.md", "verdict.md"):
        assert ((tmp_path / "stopped" / table).read_bytes()
                == (tmp_path / "whole" / table).read_bytes())
    assert not unfinished.exists()
    left_over = unfinished / "breast_cancer_2x2_f=0.5" / "run.pkl"
    left_over.parent.mkdir(parents=True)
    left_over.write_bytes(b"")
    E.run_suite(config, tmp_path / "stopped", **options)
    assert not unfinished.exists()
    # a stopped run of other settings beside the comparison saved whole is not deleted
    # unasked by the next run of the saved settings
    calls.clear()
    monkeypatch.setattr(saved_runs, "run_method", stopped_after_five)
    with pytest.raises(KeyboardInterrupt):
        E.run_suite(dict(config, rounds=7), tmp_path / "stopped", overwrite=True, **options)
    stopped_runs = list((unfinished / "breast_cancer_2x2_f=0.5").glob("*.pkl"))
    assert len(stopped_runs) == 5
    with pytest.raises(ValueError, match=r"breast_cancer 2x2 f=0.5 \(saved with other "
                                         r"rounds\)"):
        E.run_suite(config, tmp_path / "stopped", **options)
    assert sorted((unfinished / "breast_cancer_2x2_f=0.5").glob("*.pkl")) == sorted(
        stopped_runs)
    E.run_suite(config, tmp_path / "stopped", overwrite=True, **options)
    assert not unfinished.exists()


def test_saved_runs_keep_divergence_and_recompute_what_they_cannot_trust(tmp_path,
                                                                        monkeypatch, problem):
    """A run that overflowed raises again without running; other arguments (the method
    too) are computed again; another comparison's runs are deleted at its first save; a
    damaged file is computed again; a run that cannot be saved is returned all the same."""
    import re

    import hyfdca.experiments._saved_runs as saved_runs

    calls = []

    def overflowing(method, problem, params, **kwargs):
        calls.append((method, params))
        raise OverflowError(f"candidate {params}")

    monkeypatch.setattr(saved_runs, "run_method", overflowing)
    runs = saved_runs.SavedRuns(tmp_path / "runs", "comparison A")
    for _ in range(2):
        with pytest.raises(OverflowError, match=re.escape("candidate {'a': 1.0}")):
            runs("FedAvg", problem, {"a": 1.0}, rounds=3)
    assert len(calls) == 1 and runs.count() == 1
    for method, params, rounds in (("FedAvg", {"a": 2.0}, 3), ("FedAvg", {"a": 1.0}, 4),
                                   ("HyFEM", {"a": 1.0}, 3)):
        with pytest.raises(OverflowError):
            runs(method, problem, params, rounds=rounds)
    assert len(calls) == 4 and runs.count() == 4
    other = saved_runs.SavedRuns(tmp_path / "runs", "comparison B")
    with pytest.raises(OverflowError):
        other("FedAvg", problem, {"a": 1.0}, rounds=3)
    assert len(calls) == 5 and other.count() == 1 and runs.count() == 0
    for path in (tmp_path / "runs").glob("*.pkl"):
        path.write_bytes(path.read_bytes()[:-20])
    with pytest.raises(OverflowError):
        other("FedAvg", problem, {"a": 1.0}, rounds=3)
    assert len(calls) == 6
    other.remove()
    assert not (tmp_path / "runs").exists()
    monkeypatch.setattr(saved_runs, "run_method", lambda *args, **kwargs: "a history")
    (tmp_path / "a file").write_bytes(b"")
    unwritable = saved_runs.SavedRuns(tmp_path / "a file" / "runs", "comparison A")
    with pytest.warns(UserWarning, match="could not be saved"):
        assert unwritable("FedAvg", problem, {}, rounds=3) == "a history"


def test_the_code_digest_leaves_out_only_what_no_comparison_runs(tmp_path, monkeypatch):
    """A change to hyfdca.flower leaves saved comparisons reusable, any other source change
    does not; and a whole suite run in a fresh process loads no module of hyfdca.flower
    (what makes leaving it out safe)."""
    import importlib.util
    import subprocess
    import sys
    from types import SimpleNamespace

    import hyfdca.experiments._suite as suite

    package = tmp_path / "hyfdca"
    (package / "flower").mkdir(parents=True)
    for name in ("__init__.py", "_run.py", "flower/__init__.py", "flower/_wire.py",
                 "flowerbed.py"):
        (package / name).write_text("x = 1\n")
    monkeypatch.setattr(suite, "SOURCE_PACKAGES", ("hyfdca",))
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: SimpleNamespace(origin=str(package / "__init__.py")))
    before = suite.source_digest()
    (package / "flower" / "_wire.py").write_text("x = 2\n")
    assert suite.source_digest() == before
    for name in ("_run.py", "flowerbed.py"):   # a sibling whose name merely starts alike
        (package / name).write_text("x = 2\n")
        assert suite.source_digest() != before
        before = suite.source_digest()
    monkeypatch.undo()

    script = (
        "import sys\n"
        "from hyfdca import experiments as E\n"
        "config = dict(E.QUICK, datasets={'breast_cancer': ('2x2',)}, fractions=(0.5,),\n"
        "              rounds=3, tune_rounds=2, max_candidates=1)\n"
        f"E.run_suite(config, {str(tmp_path / 'suite')!r}, deterministic=True,\n"
        "            costs=E.REFERENCE_COSTS['paillier'], log=lambda _: None)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['hyfdca', 'flower']))\n")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True).stdout.strip().splitlines()[-1]
    assert suite.NOT_RUN_BY_A_COMPARISON == ("hyfdca.flower",) and loaded == "[]"


@pytest.mark.parametrize("stop,code", [(KeyboardInterrupt, 130), (Terminated, 143)])
def test_the_cli_says_where_an_interrupted_experiment_resumes(tmp_path, monkeypatch,
                                                              capsys, stop, code):
    import hyfdca.experiments._suite as suite

    def interrupted(*args, **kwargs):
        raise stop

    monkeypatch.setattr(suite, "compare", interrupted)
    out = tmp_path / "exp"
    assert main(["experiment", "--quick", "--rounds", "4", "--tune-rounds", "2",
                 "--max-candidates", "1", "--backend", "plain", "--output", str(out)]) == code
    assert (f"saved in {out}/comparisons; the same command resumes"
            in capsys.readouterr().err)


@pytest.mark.parametrize("arguments, message", [
    (["--partitions", "2x2,bogus"], "partition(s) ['bogus'] not in this experiment's data"),
    (["--fractions", "0.5,half"], "--fractions: not a comma-separated list of numbers"),
    (["--fractions", "0.5,1.5"], "fraction 1.5 is not in (0, 1]"),
    (["--jobs", "0"], "--jobs must be -1 (one per core) or a whole number >= 1, got 0"),
    (["--output", ""], "the output folder's name is empty"),
    (["--fractions", "0.5,0.50"], "fraction 0.5 is given 2 times"),
    (["--latency", "nan"], "latency must be a finite number of seconds >= 0, got nan"),
    (["--latency", "-1"], "latency must be a finite number of seconds >= 0, got -1.0"),
    (["--qu"], "unrecognized arguments: --qu"),   # no abbreviation stands for --quick
])
def test_the_cli_refuses_an_experiment_no_comparison_can_run(tmp_path, monkeypatch, capsys,
                                                            arguments, message):
    """Before any data set is prepared or anything written."""
    monkeypatch.chdir(tmp_path)
    base = ["experiment", "--quick", "--backend", "plain", "--output", "out"]
    try:
        code = main([*base, *arguments])
    except SystemExit as stop:
        code = str(stop)
    assert message in str(code) + capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_no_candidates(capsys):
    with pytest.raises(SystemExit):
        main(["experiment", "--quick", "--baseline-candidates", "0"])
    assert ("argument --baseline-candidates: must be a whole number >= 1, got 0"
            in capsys.readouterr().err)


def test_each_comparison_runs_with_its_blas_on_one_thread(tmp_path, monkeypatch):
    """A threaded BLAS sums a long dot product (a client's ||X^k||_F^2, which sets kappa)
    in an order that depends on its thread count; the suite pins each comparison's BLAS
    to one thread, so its bits do not depend on the machine's cores or on n_jobs."""
    import hyfdca.experiments._suite as suite
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    seen, real_compare = [], suite.compare

    def recording_compare(*args, **kwargs):
        seen.append(blas_threads())
        return real_compare(*args, **kwargs)

    monkeypatch.setattr(suite, "compare", recording_compare)
    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5,),
                  rounds=3, tune_rounds=2, max_candidates=1)
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        E.run_suite(config, tmp_path, deterministic=True, log=lambda _: None)
        assert blas_threads() == before   # the caller's setting is given back
    assert seen and all(seen), "numpy's BLAS was not found"
    assert all(n == 1 for threads in seen for n in threads)


def test_a_worker_running_other_code_is_refused(problem):
    """A comparison is saved under the sending suite's source digest: a (Dask) worker
    whose checkout differs refuses it rather than have its results filed as that code's."""
    from hyfdca.experiments._suite import compare_on_one_blas_thread, source_digest
    with pytest.raises(RuntimeError, match="this worker runs other code .* install the "
                                           "same checkout on every worker"):
        compare_on_one_blas_thread("s", problem, ["FedAvg"], rounds=2, tune_rounds=1,
                                   max_candidates=1, code="0" * 64)
    comp = compare_on_one_blas_thread("s", problem, ["FedAvg"], rounds=2, tune_rounds=1,
                                      max_candidates=1, code=source_digest())
    assert list(comp.by_iteration) == ["FedAvg"]


def test_parallel_and_dask_runs_give_the_same_bits(tmp_path):
    """Comparisons spread over local processes or a Dask cluster's workers give the same
    deterministic results as one process."""
    distributed = pytest.importorskip("dask.distributed")
    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5, 0.9),
                  rounds=6, tune_rounds=3, max_candidates=2)
    costs = E.REFERENCE_COSTS["mask"]
    outputs = {}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        for name, options in (("serial", {}), ("processes", dict(n_jobs=2)),
                              ("dask", dict(scheduler=cluster.scheduler_address))):
            E.run_suite(config, tmp_path / name, costs=costs, deterministic=True,
                        log=lambda _: None, **options)
            outputs[name] = (tmp_path / name / "results.json").read_bytes()
    assert outputs["serial"] == outputs["processes"] == outputs["dask"]


def test_one_comparison_spreads_its_runs_over_the_processes(tmp_path):
    """Where one comparison is to run, its candidates and long runs run in parallel: the
    same tables as one after the other."""
    import joblib

    from hyfdca.experiments._suite import inner_jobs

    assert [inner_jobs(4, 1), inner_jobs(4, 3), inner_jobs(4, 4), inner_jobs(2, 5)] == [
        4, 1, 1, 1]
    cores = joblib.cpu_count()
    assert inner_jobs(-1, 1) == (cores if cores > 1 else 1)
    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5,),
                  rounds=6, tune_rounds=3, max_candidates=3)
    said = {}
    for name, n_jobs in (("serial", 1), ("spread", 2)):
        said[name] = []
        E.run_suite(config, tmp_path / name, costs=E.REFERENCE_COSTS["mask"],
                    deterministic=True, n_jobs=n_jobs, log=said[name].append)
    assert any("2 of its runs at once" in line for line in said["spread"])
    for table in ("results.json", "tuning.md", "verdict.md"):
        assert ((tmp_path / "serial" / table).read_bytes()
                == (tmp_path / "spread" / table).read_bytes())


def test_a_search_in_parallel_tries_the_same_candidates(problem):
    """Candidates run in parallel give the tuning of one after the other: the same draws,
    histories, grades and choice."""
    from dataclasses import replace

    det = replace(problem, deterministic=True)
    one, two = (E.tune("HyFEM", det, rounds=4, max_candidates=4, seed=3, n_jobs=n)
                for n in (1, 2))
    assert one.params == two.params and one.candidates == two.candidates
    assert (one.tried, one.divergent) == (two.tried, two.divergent) == (4, 0)
    assert repr(one.history.evaluations) == repr(two.history.evaluations)   # nan == nan


def test_tuning_starts_from_the_defaults_and_is_seeded(problem):
    first = E.tune("FedAvg", problem, rounds=4, max_candidates=1)
    assert first.params == dict(iic=1.0, a=1.0 / problem.lam, b=10.0) and first.tried == 1
    a = E.tune("HyFEM", problem, rounds=4, max_candidates=3, seed=5)
    b = E.tune("HyFEM", problem, rounds=4, max_candidates=3, seed=5)
    assert [c[0] for c in a.candidates] == [c[0] for c in b.candidates]
    assert len(a.candidates) + a.divergent == 3
    other_setting = E.tune("HyFEM", problem, rounds=4, max_candidates=3, seed=5,
                           stream="another setting")
    assert other_setting.candidates[0][0] == a.candidates[0][0]  # the defaults
    assert [c[0] for c in other_setting.candidates[1:]] != [c[0] for c in a.candidates[1:]]


def test_each_baseline_gets_its_own_number_of_candidates(problem):
    comparison = E.compare("c", problem, ["HyFDCA", "FedAvg", "HyFEM"], rounds=3,
                           tune_rounds=2, max_candidates=2, baseline_candidates=5)
    assert [comparison.tunings[m].tried for m in ("HyFDCA", "FedAvg", "HyFEM")] == [2, 5, 5]


def test_the_suite_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "exp"
    assert main(["experiment", "--quick", "--rounds", "6", "--tune-rounds", "4",
                 "--max-candidates", "2", "--backend", "plain", "--output", str(out)]) == 0
    files = {p.name for p in out.iterdir()}
    assert {"verdict.md", "tuning.md", "results.json", "breast_cancer_iterations.png",
            "breast_cancer_time.pdf", "breast_cancer_time_breakdown.png"} <= files
    rows = json.loads((out / "results.json").read_text())
    assert {r["method"].removesuffix(" (defaults)") for r in rows} == {"HyFDCA", "FedAvg",
                                                                         "HyFEM"}
    assert all(r["rounds"] == 6 for r in rows if r["mode"] == "iteration")
    printed = capsys.readouterr().out
    assert "encryption: none of these runs encrypts; no encryption cost is charged" in printed
    last = printed.strip().splitlines()[-1]
    assert last.startswith("headline: hyfdca_wins_iter=") and last.endswith("/8")
    assert " defaults_wins_iter=" in last


@pytest.mark.parametrize("method, mode", [("FedAvg", "iteration"), ("FedAvg", "time"),
                                          ("FedAvg", "defaults"), ("HyFDCA", "iteration")])
def test_a_long_run_that_diverges_is_recorded_and_the_comparison_goes_on(problem, method,
                                                                         mode):
    """A long run that overflows is left out of its mode and named in the verdict; the
    other runs are those of the comparison without it (they never raised before)."""
    problem = dataclasses.replace(problem, deterministic=True)   # the same tuning twice
    rounds, tune_rounds = 6, 3
    # 3 draws: FedAvg's search then chooses other than its defaults (checked next)
    options = dict(rounds=rounds, tune_rounds=tune_rounds, max_candidates=3)
    whole = E.compare("s", problem, ["HyFDCA", "FedAvg"], **options)
    fedavg_params = whole.tunings["FedAvg"].params
    time_rounds = len(whole.by_time["FedAvg"].rounds)
    assert (fedavg_params != default_params("FedAvg", problem.lam)  # every mode runs
            and time_rounds != rounds)

    def run(m, prob, params, *, rounds, **kwargs):
        in_mode = {"iteration": rounds == options["rounds"] and params == (
                       whole.tunings[m].params),
                   "time": rounds not in (options["rounds"], tune_rounds),
                   "defaults": rounds == options["rounds"] and params == (
                       default_params(m, prob.lam))}[mode]
        if m == method and in_mode:
            raise OverflowError("the iterates blew up")
        return E.run_method(m, prob, params, rounds=rounds, **kwargs)

    comp = E.compare("s", problem, ["HyFDCA", "FedAvg"], run=run, **options)
    assert comp.diverged == {(mode, method): "OverflowError: the iterates blew up"}
    kept = {"iteration": comp.by_iteration, "time": comp.by_time,
            "defaults": comp.at_defaults}
    assert method not in kept[mode]
    if method == "HyFDCA":       # no budget: no run of equal time
        assert comp.by_time == {} and comp.by_iteration.keys() == {"FedAvg"}
    untimed = [lambda h: [{k: v for k, v in r.items() if k != "protocol_seconds"}
                          for r in h.rounds]][0]
    for name, runs in kept.items():
        before = getattr(whole, {"iteration": "by_iteration", "time": "by_time",
                                 "defaults": "at_defaults"}[name])
        for m, history in runs.items():
            assert untimed(history) == untimed(before[m])
    table, wins_iter, *_ = E.verdict_table([comp])
    assert f"Long runs that diverged (left out of their mode): s: {method} ({mode})" in table
    if method == "HyFDCA":
        assert "| diverged |" in table and wins_iter == 0
    assert method not in E.with_defaults(comp) or mode != "defaults"


def test_a_diverged_re_run_to_the_horizon_is_not_called_left_out(problem):
    """A re-run to the time horizon that diverged is not used, but its method is still
    read by time (at its last evaluation within the horizon): the verdict says so."""
    comp = E.compare("s", problem, ["HyFDCA", "FedAvg"], rounds=3, tune_rounds=2,
                     max_candidates=1)
    comp.diverged = {("cut", "FedAvg"): "OverflowError: the iterates blew up"}
    table = E.verdict_table([comp])[0]
    assert "Long runs that diverged" not in table
    assert ("Re-runs to the time horizon that diverged (not used: the method is read by "
            "time at its last evaluation within the horizon): s: FedAvg.") in table
    assert "FedAvg" in comp.by_time


@pytest.mark.parametrize("mode", ["iteration", "defaults"])
def test_a_baseline_run_whose_primal_stops_being_finite_is_recorded_as_diverged(mode):
    """run_baseline stops at a non-finite primal without raising: such a long run is
    left out of its mode and named in ``diverged`` (its short history entered the
    comparison, the verdict's column of every method at its defaults among them)."""
    fed, validation, p_star = E.prepare("breast_cancer", "2x2", lam=1e-2, loss="squared")
    problem = E.Problem(fed, "squared", 1e-2, "full", 1.0, p_star, validation,
                        deterministic=True)
    options = dict(rounds=20, tune_rounds=10, max_candidates=3, eval_every=5)
    whole = E.compare("s", problem, ["HyFDCA", "FedAvg"], **options)
    defaults = default_params("FedAvg", problem.lam, sgd_step_limit(problem))
    assert whole.tunings["FedAvg"].params != defaults   # both modes run

    def run(m, prob, params, *, rounds, **kwargs):
        in_mode = rounds == options["rounds"] and (params == defaults) == (mode == "defaults")
        if m == "FedAvg" and in_mode:   # steps near 99 for an epoch a round: blow up
            params = dict(params, iic=1.0, a=0.99e6 / prob.lam, b=1e6)
        return E.run_method(m, prob, params, rounds=rounds, **kwargs)

    comp = E.compare("s", problem, ["HyFDCA", "FedAvg"], run=run, **options)
    assert list(comp.diverged) == [(mode, "FedAvg")]
    assert comp.diverged[mode, "FedAvg"].startswith("its primal is not finite after round ")
    kept = comp.by_iteration if mode == "iteration" else comp.at_defaults
    assert "FedAvg" not in kept and "HyFDCA" in comp.by_iteration


@pytest.mark.parametrize("loss", ["squared", "squared_hinge"])
def test_the_sgd_defaults_do_not_blow_up_on_the_squared_losses(loss):
    """The Pegasos step a = 1/lam at b = 10 suits losses with a bounded gradient; on the
    squared losses its first steps passed 2 / L and FedAvg and HyFEM at their defaults
    reached an infinite primal within 5 rounds. b is raised to a c max_i q_i there (the
    first step 1 / L); the hinge keeps its defaults."""
    fed, validation, p_star = E.prepare("breast_cancer", "2x2", lam=1e-2, loss=loss)
    problem = E.Problem(fed, loss, 1e-2, "full", 1.0, p_star, validation)
    limit = sgd_step_limit(problem)
    assert limit == 1.0 / ({"squared": 1.0, "squared_hinge": 2.0}[loss]
                           * fed.sq_row_norms.max())
    for method in ("FedAvg", "HyFEM"):
        params = default_params(method, problem.lam, limit)
        assert params["a"] / params["b"] <= limit * (1 + 1e-12)
        history = E.run_method(method, problem, params, rounds=50, eval_every=10)
        assert len(history.rounds) == 50
        assert np.all(np.isfinite([e["primal"] for e in history.evaluations.values()]))
        assert history.last_evaluation["relative_loss"] < history.evaluations[0][
            "relative_loss"]
    hinge = dataclasses.replace(problem, loss="hinge")
    assert sgd_step_limit(hinge) == np.inf
    assert default_params("FedAvg", 1e-2, np.inf) == dict(iic=1.0, a=100.0, b=10.0)


def test_winners_name_ties_and_a_nan_wins_nothing():
    """Equal finals are no method's win (the verdict counted them for the first method
    listed, HyFDCA); a NaN accuracy loses to any number."""
    same = [3.0, 2.0, 1.5]
    runs = {m: _history(same, accuracy=[0.5, 0.7, 0.9]) for m in ("HyFDCA", "FedAvg")}
    assert E.winners(runs) == ("tie: HyFDCA, FedAvg", "tie: HyFDCA, FedAvg")
    runs["HyFDCA"] = _history([3.0, 2.0, 1.0], accuracy=[0.5, np.nan, np.nan])
    assert E.winners(runs) == ("HyFDCA", "FedAvg")
    runs["FedAvg"] = _history(same, accuracy=[np.nan] * 3)
    assert E.winners(runs)[1] == "-"


def test_equal_time_compares_every_method_at_the_time_all_of_them_reached(problem):
    """With the rounds capped (time_round_cap 1: no more rounds than HyFDCA's), the
    baselines' cheaper rounds end before HyFDCA's budget; every method is then read at the
    shortest time reached, HyFDCA's curve cut there too."""
    comp = E.compare("c", problem, ["HyFDCA", "FedAvg"], rounds=6, tune_rounds=2,
                     max_candidates=1, time_round_cap=1)
    latency = comp.latency
    budget = comp.by_iteration["HyFDCA"].simulated_time(latency)[-1]
    reach = comp.by_iteration["FedAvg"].simulated_time(latency)[-1]
    assert reach < budget   # the cap bound FedAvg
    ends = {m: h.simulated_time(latency)[-1] for m, h in comp.by_time.items()}
    assert max(ends.values()) <= reach
    assert len(comp.by_time["HyFDCA"].rounds) < 6
    table = E.verdict_table([comp])[0]
    assert "Compared by time short of HyFDCA's time for its rounds" in table
    share = 100 * ends["HyFDCA"] / budget   # three digits: 99.6% is not "100%"
    assert f"c ({share:.3g}%)" in table and share < 100
    assert len(truncate_by_time(comp.by_iteration["HyFDCA"], 0.0, latency).rounds) == 0


@pytest.mark.parametrize("costs, rounds", [(None, 12), ("paillier", 40)])
def test_by_time_each_method_is_read_at_the_horizon_not_at_its_last_evaluations(problem,
                                                                                 costs, rounds):
    """HyFDCA cut a few rounds into its run, between two evaluations, runs again (the same
    iterates as its long run) to the last round whose time with one more certificate is
    within the horizon, and is read there by time, never past the horizon: the mean of its
    last five evaluations reached back to w = 0. Certificates charged nothing (no costs)
    move the reading to the cut; charged Paillier's, they can leave no room for one."""
    costs = costs and E.REFERENCE_COSTS[costs]
    comp = E.compare("c", dataclasses.replace(problem, deterministic=True),
                     ["HyFDCA", "FedAvg"], rounds=rounds, tune_rounds=2, max_candidates=1,
                     time_round_cap=1, eval_every=5, costs=costs)
    timed, long = comp.by_time["HyFDCA"], comp.by_iteration["HyFDCA"]
    horizon = comp.by_iteration["FedAvg"].simulated_time(comp.latency)[-1]
    cut = truncate_by_time(long, horizon, comp.latency)
    read = max(timed.evaluations)
    assert timed.simulated_time(comp.latency)[-1] <= horizon
    assert read <= len(timed.rounds) <= len(cut.rounds)
    if costs is None:   # a re-run, read at its end
        assert max(cut.evaluations) < read == len(timed.rounds), "no re-run: nothing seen"
    else:   # a round kept, no room for a certificate after it: read at round 0
        assert read == 0 < len(timed.rounds), "the test sees nothing"
    untimed = [[{k: v for k, v in r.items() if k != "protocol_seconds"} for r in h.rounds]
               for h in (timed, long)]   # the one clock reading left
    assert untimed[0] == untimed[1][:len(timed.rounds)]
    for r in set(timed.evaluations) & set(long.evaluations):
        assert timed.evaluations[r] == long.evaluations[r]
    row = next(r for r in summary_rows([comp])
               if r["mode"] == "time" and r["method"] == "HyFDCA")
    assert row["final_relative_loss"] == timed.evaluations[read]["relative_loss"]
    if len(timed.evaluations) > 1:
        assert E.final_values(timed, 5)[0] != row["final_relative_loss"]


def test_saved_work_of_other_measured_costs_or_unreadable_is_computed_again(tmp_path):
    """Costs measured on the clock differ on every run, so they never resume and never
    refuse one (under the deterministic time model they are settings); a saved file whose
    fingerprint is not a JSON object is left to be computed again."""
    from hyfdca.experiments._saved_runs import SavedRuns
    from hyfdca.experiments._suite import _check_saved

    def saved_with(fingerprint):
        (tmp_path / "s.pkl").write_bytes(pickled(fingerprint))

    ours = dict(label="s", deterministic=False, code="a",
                options=dict(rounds=3, costs={"encrypt": 1.0}))
    runs, said = {"s": SavedRuns(tmp_path / "unfinished" / "s", "x")}, []
    saved_with(json.dumps(dict(ours, code="b", options=dict(rounds=3, costs={"encrypt": 2.0}))))
    _check_saved(tmp_path, {"s": json.dumps(ours)}, runs, False, said.append)
    assert said == ["s: saved work of other code, data or measured costs is not reused"]
    ours = dict(ours, deterministic=True)
    saved_with(json.dumps(dict(ours, options=dict(rounds=3, costs={"encrypt": 2.0}))))
    with pytest.raises(ValueError, match=r"s \(saved with other costs\)"):
        _check_saved(tmp_path, {"s": json.dumps(ours)}, runs, False, said.append)
    for unreadable in ("not JSON", json.dumps([1, 2]), json.dumps("text")):
        saved_with(unreadable)
        _check_saved(tmp_path, {"s": json.dumps(ours)}, runs, False, said.append)
    assert len(said) == 1


def test_a_verdict_where_every_hyfdca_candidate_diverged_says_none_viable(problem):
    comp = E.compare("s", problem, ["HyFDCA", "FedAvg"], rounds=3, tune_rounds=2,
                     max_candidates=1)
    comp.tunings["HyFDCA"] = dataclasses.replace(comp.tunings["HyFDCA"], params=None)
    del comp.by_iteration["HyFDCA"]
    row = E.verdict_table([comp])[0].splitlines()[2]
    assert row.endswith("| none viable | none viable |")


def test_a_verdict_whose_runs_at_the_defaults_all_diverged_shows_dashes(problem):
    comp = E.compare("s", problem, ["HyFDCA", "FedAvg"], rounds=3, tune_rounds=2,
                     max_candidates=1)
    comp.diverged.update({("defaults", m): "OverflowError" for m in comp.by_iteration})
    row = E.verdict_table([comp])[0].splitlines()[2]
    assert "| - / - |" in row


def test_the_verdict_says_not_run_where_hyfdca_was_left_out(problem):
    comp = E.compare("s", problem, ["FedAvg"], rounds=3, tune_rounds=2, max_candidates=1)
    row = E.verdict_table([comp])[0].splitlines()[2]
    assert row.endswith("| not run | - |") and "diverged" not in row
    import pickle
    del comp.diverged        # a comparison saved before the field existed
    assert pickle.loads(pickle.dumps(comp)).diverged == {}


def test_methods_that_cannot_run_a_setting_are_left_out(problem):
    comparison = E.compare("partial", problem, ["HyFDCA", "ADMM"], rounds=3, tune_rounds=2,
                           max_candidates=1)
    assert list(comparison.by_iteration) == ["HyFDCA"]
    full = E.Problem(problem.dataset, "hinge", 1e-2, "full", 1.0, problem.p_star,
                     problem.validation)
    comparison = E.compare("full", full, ["HyFDCA", "ADMM", "D3CA"], rounds=3,
                           tune_rounds=2, max_candidates=1)
    assert set(comparison.by_iteration) == {"HyFDCA", "ADMM", "D3CA"}


@pytest.mark.needs_shared_data
def test_fedavg_with_the_pegasos_step_reaches_5e_2_on_a9a(shared_data):
    """On a horizontal split at full participation FedAvg is plain FedAvg: with the step
    theory recommends (a / (b + t), a = 1/lam) and one local epoch it reaches relative
    loss 5e-2 on a9a at lam = 1e-4 (measured 0.045 at round 20, 0.020 at 40); the
    experiments' first FedAvg candidate is this step."""
    from baselines import FedAvg, run_baseline
    from feddata.datasets import load_a9a
    from feddata.partition import horizontal
    from hyfdca.experiments._methods import default_params
    from solvers import centralized_solution

    ds = load_a9a(shared_data)
    lam = 1e-4
    p_star, _ = centralized_solution(ds.X, ds.y, loss="hinge", lam=lam)
    params = default_params("FedAvg", lam)
    assert params["a"] == 1.0 / lam
    model = FedAvg(horizontal(ds.X, ds.y, 5), loss="hinge", lam=lam, seed=0, **params)
    history = run_baseline(model, max_rounds=40, eval_every=20, p_star=p_star)
    assert history.last_evaluation["relative_loss"] <= 5e-2


def test_the_sgd_search_spaces_reach_the_step_theory_recommends():
    """a / (b + t) with a from 1e-4/lam to 2/lam: at lam = 1e-4 the draws cover the
    Pegasos step a = 1/lam (no fixed range of a, such as [1e-2, 1e2], does)."""
    from hyfdca.experiments._methods import draw_params

    rng = np.random.default_rng(0)
    for method in ("FedAvg", "HyFEM"):
        draws = [draw_params(method, rng, 1e-4) for _ in range(300)]
        scaled = np.array([d["a"] * (1e-4 + d.get("mu", 0.0)) for d in draws])
        assert scaled.max() >= 0.5 and np.quantile(scaled, 0.25) <= 1e-2
        assert all(d["a"] * (1e-4 + d.get("mu", 0.0)) / d["b"] < 1 for d in draws)


def test_every_method_also_runs_at_its_defaults_where_the_search_chose_otherwise(problem):
    """The verdict shows each method as the search left it and as a user gets it (the
    deterministic time model: the search's choice must not depend on the clock)."""
    problem = dataclasses.replace(problem, deterministic=True)
    only_defaults = E.compare("c", problem, ["HyFDCA", "FedAvg"], rounds=6, tune_rounds=4,
                              max_candidates=1, eval_every=2)
    assert only_defaults.tunings["HyFDCA"].params == {}
    assert only_defaults.at_defaults == {}
    searched = next(c for c in (E.compare("c", problem, ["HyFDCA", "FedAvg"], rounds=6,
                                          tune_rounds=4, max_candidates=n, eval_every=2)
                                for n in (3, 6, 12))
                    if c.tunings["HyFDCA"].params != {}
                    and c.tunings["FedAvg"].params != default_params("FedAvg", problem.lam))
    def losses(history):
        return [e["relative_loss"] for e in history.evaluations.values()]

    for method in ("HyFDCA", "FedAvg"):
        direct = E.run_method(method, problem, default_params(method, problem.lam),
                              rounds=6, eval_every=2)
        assert losses(searched.at_defaults[method]) == losses(direct)
        assert losses(searched.by_iteration[method]) != losses(direct)
    table, *_, wins_defaults = E.verdict_table([searched])
    finals = "{:.3g} / {:.3f}".format(*E.final_values(searched.at_defaults["HyFDCA"]))
    assert table.splitlines()[2].endswith(f"| {finals} |")
    runs = E.with_defaults(searched)
    assert runs == searched.at_defaults
    assert wins_defaults == sum(w == "HyFDCA" for w in E.winners(runs))
    fedavg_row = next(line for line in tuning_table([searched]).splitlines()
                      if "| FedAvg |" in line)
    chosen, default = (E.final_values(h)[0] for h in (searched.by_iteration["FedAvg"],
                                                      searched.at_defaults["FedAvg"]))
    assert fedavg_row.endswith(f"| {chosen:.3g} / {default:.3g} |")
    assert {"HyFDCA (defaults)", "FedAvg (defaults)"} <= {
        r["method"] for r in summary_rows([searched])}


def test_the_legend_names_every_line_of_every_panel():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from hyfdca.experiments._report import legend_entries

    fig, (first, second) = plt.subplots(1, 2)
    first.plot([0, 1], label="HyFDCA")
    second.plot([0, 1], label="HyFDCA")
    second.plot([1, 0], label="FedAvg (defaults)")
    assert list(legend_entries([first, second])) == ["HyFDCA", "FedAvg (defaults)"]
    plt.close(fig)


def test_a_report_only_run_redraws_from_saved_comparisons_of_any_code(tmp_path,
                                                                      monkeypatch):
    """--report-only computes nothing: it draws the same tables from the saved comparisons
    even when the code changed since, names the code that ran them, and refuses settings
    with nothing saved."""
    import hyfdca.experiments._suite as suite

    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5,),
                  rounds=6, tune_rounds=3, max_candidates=2)
    options = dict(costs=E.REFERENCE_COSTS["mask"], deterministic=True)
    E.run_suite(config, tmp_path, log=lambda _: None, **options)
    before = (tmp_path / "results.json").read_bytes()
    ran_by = suite.source_digest()
    (tmp_path / "results.json").unlink()

    def no_compare(*args, **kwargs):
        raise AssertionError("a report-only run computed a comparison")

    monkeypatch.setattr(suite, "compare", no_compare)
    monkeypatch.setattr(suite, "source_digest", lambda: "f" * 64)
    said = []
    E.run_suite(config, tmp_path, report_only=True, log=said.append, **options)
    assert (tmp_path / "results.json").read_bytes() == before
    assert f"breast_cancer 2x2 f=0.5: run by source digest {ran_by[:12]} (this checkout: " \
           f"ffffffffffff)" in said
    saved = tmp_path / "comparisons" / "breast_cancer_2x2_f=0.5.pkl"
    with open(saved, "rb") as f:   # saved before the data digest was recorded
        fingerprint, comparison = json.loads(pickle.load(f)), pickle.load(f)
    del fingerprint["data"]
    saved.write_bytes(pickled(json.dumps(fingerprint, sort_keys=True)) + pickled(comparison))
    said.clear()
    E.run_suite(config, tmp_path, report_only=True, log=said.append, **options)
    assert (tmp_path / "results.json").read_bytes() == before
    assert said[0].endswith("; its data digest was not recorded")
    with pytest.raises(ValueError, match=r"no comparison saved .*\['breast_cancer 2x2 f=0.9'\]"):
        E.run_suite(dict(config, fractions=(0.5, 0.9)), tmp_path, report_only=True,
                    log=said.append, **options)
    with pytest.raises(ValueError, match="no comparison saved"):
        E.run_suite(dict(config, rounds=7), tmp_path, report_only=True, log=said.append,
                    **options)
    saved.write_bytes(saved.read_bytes()[:-100])
    with pytest.raises(ValueError, match="saved with these settings .* cannot read it back"):
        E.run_suite(config, tmp_path, report_only=True, log=said.append, **options)
    with pytest.raises(ValueError, match="does not exist"):
        E.run_suite(config, tmp_path / "elsewhere", report_only=True, **options)
    assert not (tmp_path / "elsewhere").exists()


def test_the_cli_reports_only_what_it_can_read(tmp_path, capsys):
    """--report-only needs the costs the run had (reference or none) and the run's folder;
    with them it prints each comparison's code and the same headline as the run."""
    out = tmp_path / "exp"
    run = ["experiment", "--quick", "--fractions", "0.5", "--partitions", "2x2", "--rounds",
           "4", "--tune-rounds", "2", "--max-candidates", "1", "--backend", "plain"]
    with pytest.raises(SystemExit, match="comparisons does not exist"):
        main([*run, "--output", str(out), "--report-only"])
    assert main([*run, "--output", str(out)]) == 0
    headline = capsys.readouterr().out.strip().splitlines()[-1]
    with pytest.raises(SystemExit, match="add --deterministic or --backend plain"):
        main([*run[:-2], "--output", str(out), "--report-only"])
    assert main([*run, "--output", str(out), "--report-only"]) == 0
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1] == headline
    assert "breast_cancer 2x2 f=0.5: run by source digest " in printed
    assert "(this checkout:" not in printed


def test_an_experiment_whose_data_sets_are_all_missing_says_it_did_not_run(
        tmp_path, monkeypatch, capsys):
    """Every data set skipped (not on this machine): a not-run headline, not 0/0 wins."""
    import hyfdca.experiments._suite as suite

    monkeypatch.setattr(suite.datasets, "locate_dataset", lambda name: None)
    assert main(["experiment", "--datasets", "a9a", "--backend", "plain", "--deterministic",
                 "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "none of the data sets ['a9a'] is on this machine" in out
    assert out.rstrip().endswith("headline: hyfdca_wins_iter=not-run hyfdca_wins_time=not-run "
                                 "defaults_wins_iter=not-run")


def test_a_held_out_test_set_takes_the_long_runs_accuracy_and_no_choice(problem, tmp_path):
    """With a test set the searches choose on the validation set as without one (the same
    picks, the same losses), and every long run's accuracy is the test set's: not a
    tuning run's history read back from the saved runs (the same method, parameters and
    rounds here)."""
    from hyfdca.experiments._saved_runs import SavedRuns
    from hyfdca.experiments._suite import split_held_out

    validation, test = split_held_out(problem.validation)
    assert validation[1].size + test[1].size == problem.validation[1].size
    plain = dataclasses.replace(problem, validation=validation, deterministic=True)
    held = dataclasses.replace(plain, test=test)
    options = dict(rounds=4, tune_rounds=4, max_candidates=2)
    without = E.compare("s", plain, ["HyFDCA", "FedAvg"], **options)
    with_test = E.compare("s", held, ["HyFDCA", "FedAvg"], run=SavedRuns(tmp_path, "s"),
                          **options)
    assert (without.accuracy_on, with_test.accuracy_on) == ("validation", "test")
    differs = False
    for method in ("HyFDCA", "FedAvg"):
        params = with_test.tunings[method].params
        assert params == without.tunings[method].params
        assert with_test.tunings[method].candidates == without.tunings[method].candidates
        on_test = E.run_method(method, dataclasses.replace(plain, validation=test), params,
                               rounds=4)
        long_run = with_test.by_iteration[method]
        for r, evaluation in long_run.evaluations.items():
            assert evaluation["validation_accuracy"] == (
                on_test.evaluations[r]["validation_accuracy"])
            assert evaluation["relative_loss"] == (
                without.by_iteration[method].evaluations[r]["relative_loss"])
            differs |= evaluation["validation_accuracy"] != (
                without.by_iteration[method].evaluations[r]["validation_accuracy"])
    assert differs   # the two halves are told apart
    with pytest.raises(ValueError, match="accuracy_on='test' needs a held-out test set"):
        dataclasses.replace(plain, accuracy_on="test")


def test_a_suite_with_a_held_out_test_set_says_so_and_is_its_own_setting(tmp_path):
    config = dict(E.QUICK, datasets={"breast_cancer": ("2x2",)}, fractions=(0.5,),
                  rounds=4, tune_rounds=3, max_candidates=2, held_out_test=True)
    options = dict(costs=E.REFERENCE_COSTS["mask"], deterministic=True, log=lambda _: None)
    E.run_suite(config, tmp_path, **options)
    assert "Accuracies are on a held-out test set" in (tmp_path / "verdict.md").read_text()
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {row["accuracy_on"] for row in rows} == {"test"}
    with pytest.raises(ValueError, match=r"saved with other held_out_test"):
        E.run_suite(dict(config, held_out_test=False), tmp_path, **options)
    with pytest.raises(ValueError, match="held_out_test must be True or False, got 1"):
        E.check_config(dict(config, held_out_test=1))


def test_the_cli_takes_a_held_out_test_set(tmp_path):
    assert main(["experiment", "--quick", "--held-out-test", "--partitions", "2x2",
                 "--fractions", "0.5", "--rounds", "3", "--tune-rounds", "2",
                 "--max-candidates", "1", "--backend", "plain", "--output",
                 str(tmp_path)]) == 0
    assert "Accuracies are on a held-out test set" in (tmp_path / "verdict.md").read_text()


def test_a_held_out_quarter_too_small_to_split_is_refused_with_its_counts():
    from hyfdca.experiments._suite import split_held_out

    X = np.arange(12.0).reshape(6, 2)
    with pytest.raises(ValueError, match=r"the held-out quarter has \{-1.0: 5, 1.0: 1\}"):
        split_held_out((X, np.array([-1.0] * 5 + [1.0])))
    validation, test = split_held_out((X, np.array([-1.0] * 4 + [1.0] * 2)))
    assert sorted(validation[1]) == sorted(test[1]) == [-1.0, -1.0, 1.0]
