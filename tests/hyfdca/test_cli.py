"""The `hyfdca` command line."""

import pytest

from hyfdca.cli import main


def test_datasets_lists_the_catalog(capsys):
    assert main(["datasets"]) == 0
    out = capsys.readouterr().out
    assert "breast_cancer   yes" in out and "news20-like" in out
    assert "Data files are searched in:" in out


def test_demo_converges_and_reports(capsys):
    assert main(["demo", "--tol", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "converged at tol=1e-05" in out and "scikit-learn reference P*" in out


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit):
        main(["nope"])
