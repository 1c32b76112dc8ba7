"""The `hyfdca` command line."""

import csv

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
