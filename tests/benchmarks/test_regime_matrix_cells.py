"""The regime matrix (benchmarks/hyfdca_variants.py) keeps its finished cells with
``--save DIR`` and reads them back, so that a matrix longer than one sitting is run whole
over several: tested on a slice small enough to run here (breast cancer on a 2x2 grid)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hyfdca_variants.py"
SLICE = ["--datasets", "cancer", "--participations", "1,0.5", "--lams", "1e-3",
         "--variants", "auto", "--budget", "30", "--jobs", "1", "--markdown"]


@pytest.fixture
def matrix(monkeypatch, tmp_path):
    """The script as a module, with a cheap data set in its catalogue (its import pins
    the BLAS threads through the environment, restored after the test)."""
    for var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HYFDCA_CACHE", str(tmp_path / "cache"))
    spec = importlib.util.spec_from_file_location("hyfdca_variants_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # so that its workers unpickle jobs
    spec.loader.exec_module(module)
    monkeypatch.setitem(module.DATASETS, "cancer", ("breast_cancer", ("2x2",)))
    return module


def _run(matrix, capsys, *extra):
    assert matrix.main([*SLICE, *extra]) == 0
    out = capsys.readouterr().out
    rows = out[out.index("\n| data "):out.index("\ntotal ")].strip().splitlines()
    table = [row.rsplit("|", 2)[0] for row in rows]  # less the wall seconds, which vary
    return out, table, out.splitlines()[-1]


def test_saved_cells_are_read_back_with_the_same_table_and_headline(matrix, capsys,
                                                                    tmp_path):
    folder = tmp_path / "cells"
    out, table, headline = _run(matrix, capsys, "--save", str(folder))
    assert "0 of 2 cells read back" in out and "2 cells on 1 processes" in out
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["cancer_2x2_0.5_0.001_auto_seed0.json",
                     "cancer_2x2_1_0.001_auto_seed0.json"]
    record = json.loads((folder / files[1]).read_text())
    assert record["fingerprint"]["budget"] == 30 and len(record["fingerprint"]["code"]) == 64

    again, table_again, headline_again = _run(matrix, capsys, "--save", str(folder))
    assert "2 of 2 cells read back" in again and "0 cells on 1 processes" in again
    assert table_again == table and headline_again == headline

    report, table_report, headline_report = _run(matrix, capsys, "--save", str(folder),
                                                 "--report-only")
    assert table_report == table and headline_report == headline



def test_a_cell_of_other_settings_code_or_a_broken_file_runs_again(matrix, capsys,
                                                                 tmp_path, monkeypatch):
    folder = tmp_path / "cells"
    _, table, _ = _run(matrix, capsys, "--save", str(folder))
    out, _, _ = _run(matrix, capsys, "--save", str(folder), "--budget", "20")
    assert "was made with other budget" in out and "0 of 2 cells read back" in out

    _run(matrix, capsys, "--save", str(folder))  # the 30-round cells again
    broken = folder / "cancer_2x2_1_0.001_auto_seed0.json"
    broken.write_text(broken.read_text()[:40])
    monkeypatch.setattr(matrix, "source_digest", lambda: "0" * 64)
    out, table_again, _ = _run(matrix, capsys, "--save", str(folder))
    assert "cannot be read back" in out and "was made with other code" in out
    assert "1 of 2" not in out and table_again == table  # rerun: the same bits


def test_report_only_runs_nothing_and_names_the_missing_cells(matrix, capsys, tmp_path):
    folder = tmp_path / "cells"
    assert matrix.main([*SLICE, "--save", str(folder), "--report-only"]) == 0
    out = capsys.readouterr().out
    assert "2 cells not saved there" in out and "cancer_2x2_1_0.001_auto_seed0.json" in out
    assert out.splitlines()[-1].startswith("headline: diverged_cells=not-run")
    assert not folder.exists()
    with pytest.raises(SystemExit):
        matrix.main([*SLICE, "--report-only"])


def test_cells_saved_by_two_worker_processes_read_back_as_one_process_runs_them(
        matrix, capsys, tmp_path):
    """``--jobs 2`` in a fresh process (a process that has run kernels must not fork
    workers: Numba's threads do not survive it), reported here beside ``--jobs 1``."""
    folder = tmp_path / "cells"
    driver = (f"import importlib.util, sys\n"
              f"spec = importlib.util.spec_from_file_location('m', {str(SCRIPT)!r})\n"
              f"m = importlib.util.module_from_spec(spec); sys.modules['m'] = m\n"
              f"spec.loader.exec_module(m)\n"
              f"m.DATASETS['cancer'] = ('breast_cancer', ('2x2',))\n"
              f"sys.exit(m.main({[*SLICE, '--jobs', '2', '--save', str(folder)]!r}))\n")
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 cells on 2 processes" in done.stdout
    _, table_two, headline_two = _run(matrix, capsys, "--save", str(folder), "--report-only")
    _, table_one, headline_one = _run(matrix, capsys)
    assert table_two == table_one and headline_two == headline_one
