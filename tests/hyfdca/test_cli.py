"""The `hyfdca` command line."""

import csv
import json

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
    assert "encryption           BFV lattice homomorphic encryption" in out  # by default
    with open(tmp_path / "history.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 61 and rows[-1]["gap"] != "nan"
    assert (tmp_path / "convergence.png").stat().st_size > 10_000


def test_run_with_the_quadrant_scheme_on_digits(capsys, tmp_path):
    args = ["run", "--dataset", "digits", "--partition", "quadrants:5", "--rounds", "20",
            "--lam", "1e-3", "--quiet", "--output", str(tmp_path), "--positive-class", "3",
            "--crypto", "mask"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "5 clients" in out and "one-vs-rest for class 3" in out
    assert "encryption           additive masking under the clients' shared key" in out
    assert (tmp_path / "history.json").exists()


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["nope"])
    assert stopped.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


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


def test_a_class_index_out_of_range_is_a_clear_error(tmp_path, capsys):
    assert main(["run", "--dataset", "digits", "--positive-class", "99", "--rounds", "2",
                 "--quiet", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "hyfdca run: error: positive_class must index one of the 10 classes" in err
    assert main(["demo", "--eval-every", "0", "--output", str(tmp_path)]) == 2
    assert "eval_every must be a whole number >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("command, option, value, minimum", [
    ("run", "--seed", "-1", 0), ("run", "--rounds", "-3", 0), ("run", "--H", "2.5", 1),
    ("run", "--checkpoint-every", "0", 1), ("app", "--num-clients", "0", 1),
    ("profile", "--repeats", "0", 1),
])
def test_a_count_out_of_range_is_refused_by_name(tmp_path, capsys, command, option, value,
                                                 minimum):
    """Before any work (no data loaded, no P* solved), never passed on to a library."""
    with pytest.raises(SystemExit) as stop:
        main([command, option, value, "--output", str(tmp_path / "out")])
    assert stop.value.code == 2
    assert (f"argument {option}: must be a whole number >= {minimum}, got"
            in capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_rel_tol_stops_the_run_at_a_relative_gap(tmp_path):
    out = tmp_path / "out"
    assert main(["demo", "--rounds", "2000", "--rel-tol", "0.05", "--quiet",
                 "--crypto", "plain", "--output", str(out)]) == 0
    with open(out / "history.csv") as handle:
        rows = [r for r in csv.DictReader(handle) if r["gap"] != "nan"]
    # the certified gap (smallest primal and largest dual of the certificates so far)
    # and its rounding, against 0.05 times the lower bound on P*
    from hyfdca._certificate import certificate_rounding

    best_p = np.minimum.accumulate([float(r["primal"]) for r in rows])
    best_d = np.maximum.accumulate([float(r["dual"]) for r in rows])
    rounding = np.array([certificate_rounding("hinge", p, frac_bits=32, n_clients=9)
                         for p in best_p])   # the demo's 3x3 grid
    met = best_p - best_d + rounding <= 0.05 * (best_d - rounding)
    assert met[-1] and not met[:-1].any()
    assert int(rows[-1]["round"]) < 2000


# --- keeping work: output folders first, checkpoints, Ctrl-C and SIGTERM ---------------

@pytest.mark.parametrize("command", ["demo", "profile", "experiment"])
def test_a_bad_output_folder_is_refused_before_any_work(tmp_path, command):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(SystemExit, match="the output folder .*file is a file"):
        main([command, "--output", str(a_file)])
    with pytest.raises(SystemExit, match="cannot write in the output folder /proc/hyfdca"):
        main([command, "--output", "/proc/hyfdca"])


def test_an_unwritable_output_folder_is_refused(tmp_path, monkeypatch):
    """A folder the user may not write in (read-only for a user; root writes everywhere,
    so there the refusal of the probe file is simulated) is named before any work."""
    import errno
    import os
    import tempfile

    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:
        def refused(*args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied")
        monkeypatch.setattr(tempfile, "TemporaryFile", refused)
    with pytest.raises(SystemExit, match="cannot write in the output folder .*: "
                                         "Permission denied"):
        main(["demo", "--output", str(locked / "out")])


def test_an_unfinished_checkpoint_is_never_overwritten(tmp_path):
    args = ["demo", "--rounds", "3", "--quiet", "--crypto", "plain", "--output", str(tmp_path)]
    assert main(args + ["--checkpoint", str(tmp_path / "ck")]) == 0
    with pytest.raises(SystemExit, match=r"holds the checkpoint of an earlier run "
                                         r"\(round-000003\): add --resume"):
        main(args + ["--checkpoint", str(tmp_path / "ck")])
    assert main(["demo", "--rounds", "6", "--quiet", "--crypto", "plain", "--output",
                 str(tmp_path), "--checkpoint", str(tmp_path / "ck"), "--resume"]) == 0
    assert main(args) == 0 and main(args) == 0  # the default folder keeps no finished run
    assert not (tmp_path / "checkpoint").exists()


def signalled_demo(out, signame, *, pause, times=1, extra=()):
    """(exit code, stderr) of a long demo run in a subprocess, sent ``signame`` ``times``
    times (10 ms apart) ``pause`` seconds after its first checkpoint appears."""
    import signal
    import subprocess
    import sys
    import time

    args = [sys.executable, "-m", "hyfdca.cli", "demo", "--rounds", "1000000", "--quiet",
            "--crypto", "plain", "--eval-every", "5", *extra, "--output", str(out)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (out / "checkpoint" / "LATEST").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(pause)
        for sent in range(times):
            if sent:
                time.sleep(0.01)
            proc.send_signal(getattr(signal, signame))
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, stderr


@pytest.mark.parametrize("signame,code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_stops_after_the_round_and_keeps_history_and_checkpoint(tmp_path, signame,
                                                                         code):
    out = tmp_path / "out"
    returncode, stderr = signalled_demo(out, signame, pause=0.5)  # some rounds into the run
    assert returncode == code, stderr
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    assert last.startswith(f"hyfdca: {signame} at round ") and "--resume" in last
    assert "Traceback" not in stderr
    stopped_at = int(last.split("at round ")[1].split(":")[0])
    with open(out / "history.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert int(rows[-1]["round"]) == stopped_at and rows[-1]["gap"] != "nan"
    assert (out / "checkpoint" / f"round-{stopped_at:06d}").is_dir()
    assert main(["demo", "--rounds", str(stopped_at + 5), "--quiet", "--eval-every", "5",
                 "--crypto", "plain", "--output", str(out), "--resume"]) == 0
    with open(out / "history.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["round"]) for r in rows] == list(range(stopped_at + 6))


@pytest.mark.parametrize("signame,code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_second_signal_aborts_with_its_code_and_names_the_last_checkpoint(
        tmp_path, signame, code):
    """A second signal aborts at once: exit code 143 for SIGTERM (it was 130, as for
    Ctrl-C), and the notice names the checkpoint saved before (it said no work was
    saved)."""
    returncode, stderr = signalled_demo(tmp_path / "out", signame, pause=0, times=2,
                                        extra=("--checkpoint-every", "5"))
    assert returncode == code, stderr
    last = [line for line in stderr.splitlines() if line.strip()][-1]
    if "at round" in last:   # the first signal's stop won the race: its own notice
        pytest.skip("the run stopped after the first signal before the second arrived")
    name = "terminated" if signame == "SIGTERM" else "interrupted"
    assert last.startswith(f"hyfdca: {name}; the checkpoint ") and "--resume" in last
    assert "round-" in last and "Traceback" not in stderr


def test_a_second_signal_ends_the_process_where_it_is_without_unwinding():
    """The second signal prints the notice and exits with the signal's code from the
    handler: raising there unwound through whatever the main thread ran (Numba's compiler
    crashed with SIGSEGV, exit -11, once in 30 runs of the signal tests)."""
    import subprocess
    import sys

    code = ("import os, signal, time\n"
            "from hyfdca._signals import GracefulStop\n"
            "with GracefulStop(abort_notice=lambda terminated: f'notice {terminated}'):\n"
            "    try:\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        time.sleep(30)\n"
            "    finally:\n"
            "        print('unwound', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "notice True"
    assert "unwound" not in proc.stdout


def test_keys_split_and_app_prepare_a_deployment(tmp_path, capsys):
    pytest.importorskip("flwr")
    from hyfdca.flower import read_block, read_client_keys, read_server_keys

    assert main(["keys", "--output", str(tmp_path / "keys")]) == 0
    keys, masker = read_client_keys(tmp_path / "keys" / "clients.keys")
    server = read_server_keys(tmp_path / "keys" / "server.keys")
    assert server.key_id == keys.key_id and keys.key_id.startswith("bfv")  # by default
    assert not any(ctx.has_secret_key() for ctx in server.contexts())
    assert main(["split", "--output", str(tmp_path / "parties")]) == 0
    blocks = [read_block(tmp_path / "parties" / f"client-{k}.npz") for k in range(4)]
    assert sum(b.X.nnz for b in blocks) > 0
    # the validation quarter, split like the training part: each party's predict-file
    from feddata import FederatedDataset
    from feddata.problems import federated_problem

    _, (X_new, y_new), _ = federated_problem("breast_cancer", "2x2")
    new = [read_block(tmp_path / "parties" / f"new-{k}.npz") for k in range(4)]
    for trained, predict in zip(blocks, new):
        np.testing.assert_array_equal(predict.feature_ids, trained.feature_ids)
    back, _ = FederatedDataset(new, X_new.shape[0], X_new.shape[1]).reassemble()
    np.testing.assert_array_equal(back.toarray(), np.asarray(X_new))
    np.testing.assert_array_equal(np.load(tmp_path / "parties" / "new-labels.npy"), y_new)
    assert main(["app", "--num-clients", "4", "--server-keys",
                 str(tmp_path / "keys" / "server.keys"), "--output", str(tmp_path / "app")]) == 0
    toml = (tmp_path / "app" / "pyproject.toml").read_text()
    assert 'serverapp = "hyfdca.flower:server_app"' in toml and "num-clients = 4" in toml
    assert "phase-timeout = 300.0" in toml  # partial participation: absent parties tolerated
    assert main(["split", "--format", "libsvm", "--output", str(tmp_path / "lib")]) == 0
    for k, block in enumerate(blocks):
        back = read_block(tmp_path / "lib" / f"client-{k}.libsvm")
        assert (back.X != block.X).nnz == 0
        assert (read_block(tmp_path / "lib" / f"new-{k}.libsvm").X != new[k].X).nnz == 0
    assert main(["app", "--num-clients", "4", "--server-keys",
                 str(tmp_path / "keys" / "server.keys"), "--participation", "full",
                 "--phase-timeout", "30", "--output", str(tmp_path / "app2")]) == 2
    assert "--phase-timeout needs --participation fraction" in capsys.readouterr().err


def test_keys_for_a_loss_with_a_dual_box_pack_more_values(tmp_path):
    """``hyfdca keys --crypto fast-paillier --loss hinge`` sizes the slots for the hinge's
    dual box (83 bits, 24 per 2048-bit modulus), --loss squared for the codec's range
    (112 bits, 18); without --loss, slots that hold any loss (128 bits, 15)."""
    pytest.importorskip("flwr")
    from hyfdca.flower import read_server_keys

    slots = {}
    for loss in ("hinge", "squared", None):
        folder = tmp_path / str(loss)
        extra = [] if loss is None else ["--loss", loss]
        assert main(["keys", "--crypto", "fast-paillier", "--output", str(folder)]
                    + extra) == 0
        slots[loss] = read_server_keys(folder / "server.keys").slots
    assert slots == {"hinge": 24, "squared": 18, None: 15}


def test_a_diverging_run_keeps_its_history_and_frees_its_folder(tmp_path, capsys):
    """An overflow ends the run with exit code 1 and its history so far; the default
    checkpoint (a resume would diverge again) does not block the folder."""
    out = tmp_path / "out"
    run = ["run", "--dataset", "breast_cancer", "--partition", "3x3", "--participation",
           "fraction", "--fraction", "0.5", "--variant", "combined", "--H", "200", "--loss",
           "squared", "--lam", "1e-4", "--rounds", "100", "--eval-every", "5", "--quiet",
           "--crypto", "plain", "--output", str(out)]
    assert main(run) == 1
    err = capsys.readouterr().err
    assert "the run diverged" in err and f"history up to the divergence in {out}" in err
    rows = json.loads((out / "history.json").read_text())["rows"]
    assert 0 < len(rows) < 100
    assert not (out / "checkpoint").exists()


def test_resuming_a_finished_run_makes_its_last_certificate(tmp_path, capsys):
    """--rounds 25 at --eval-every 10 certifies at 25 after saving; resuming the finished
    run certifies round 25 again instead of reporting round 20's."""
    out = tmp_path / "out"
    run = ["run", "--dataset", "breast_cancer", "--partition", "2x2", "--lam", "1e-2",
           "--eval-every", "10", "--rounds", "25", "--quiet", "--crypto", "plain",
           "--checkpoint", str(tmp_path / "ck"), "--output", str(out)]
    assert main(run) == 0
    first = capsys.readouterr().out
    before = (out / "history.csv").read_text()
    assert main([*run, "--resume"]) == 0
    again = capsys.readouterr().out
    gap = [line for line in first.splitlines() if "duality gap" in line]
    assert gap and gap == [line for line in again.splitlines() if "duality gap" in line]
    assert (out / "history.csv").read_text() == before
