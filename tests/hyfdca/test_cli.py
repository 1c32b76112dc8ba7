"""The `hyfdca` command line."""

import csv

import numpy as np
import pytest

from hyfdca.cli import main


def test_datasets_lists_the_catalog(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "breast_cancer   yes" in out and "news20-like" in out
    assert "Data files are searched in:" in out


def test_demo_trains_federated_and_writes_history_and_plot(capsys, tmp_path):
    assert main(["demo", "--rounds", "60", "--quiet", "--output", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "FederatedDataset(9 clients" in out and "participation=fraction (0.5)" in out
    assert "duality gap" in out and "centralized solver:" in out
    with open(tmp_path / "history.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 61 and rows[-1]["gap"] != "nan"
    assert (tmp_path / "convergence.png").stat().st_size > 10_000


def test_run_with_the_quadrant_scheme_on_digits(capsys, tmp_path):
    args = ["run", "--dataset", "digits", "--partition", "quadrants:5", "--rounds", "20",
            "--lam", "1e-3", "--quiet", "--output", str(tmp_path), "--positive-class", "3"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "5 clients" in out and "one-vs-rest for class 3" in out
    assert (tmp_path / "history.json").exists()


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit):
        main(["nope"])


def _choices(command, option):
    from hyfdca.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return tuple(next(a for a in sub._actions if option in a.option_strings).choices)


@pytest.mark.parametrize("command", ["demo", "run", "profile"])
def test_choices_come_from_the_registries(command):
    from crypto import BACKENDS
    from feddata import PARTICIPATION_KINDS
    from feddata.datasets import dataset_names
    from hyfdca._settings import VARIANT_NAMES
    from solvers import LOSS_CODES

    assert _choices(command, "--variant") == VARIANT_NAMES
    assert _choices(command, "--participation") == PARTICIPATION_KINDS
    assert tuple(_choices(command, "--dataset")) == tuple(dataset_names())
    if command != "profile":
        assert set(_choices(command, "--loss")) == set(LOSS_CODES)
        assert set(_choices(command, "--crypto")) == set(BACKENDS)


def test_the_squared_loss_runs_and_unknown_variants_are_refused(capsys, tmp_path):
    assert main(["run", "--dataset", "breast_cancer", "--loss", "squared", "--lam", "1e-2",
                 "--rounds", "5", "--quiet", "--output", str(tmp_path)]) == 0
    with pytest.raises(SystemExit):
        main(["profile", "--variant", "bogus"])


def test_a_class_index_out_of_range_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="positive_class must index one of the 10 classes"):
        main(["run", "--dataset", "digits", "--positive-class", "99", "--rounds", "2",
              "--quiet", "--output", str(tmp_path)])


def test_rel_tol_stops_the_run_at_a_relative_gap(tmp_path):
    out = tmp_path / "out"
    assert main(["demo", "--rounds", "2000", "--rel-tol", "0.05", "--quiet",
                 "--output", str(out)]) == 0
    with open(out / "history.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r["gap"] != "nan"]
    # the certified gap: smallest primal and largest dual of the certificates so far
    best_p = np.minimum.accumulate([float(r["primal"]) for r in rows])
    best_d = np.maximum.accumulate([float(r["dual"]) for r in rows])
    met = best_p - best_d <= 0.05 * best_p
    assert met[-1] and not met[:-1].any()
    assert int(rows[-1]["round"]) < 2000
