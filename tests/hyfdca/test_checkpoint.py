"""Checkpoint and resume: atomic files, the same bits as an uninterrupted run, SIGKILL at
any round and phase, nothing private in the server's file, named errors."""

import hashlib
import json
import pickle
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from crypto import SecureSum
from crypto._interface import KeyHolder
from hyfdca import CheckpointError, HyFDCASettings, run_hyfdca
import checkpoint_job as job  # the script beside this file (pytest puts its folder on sys.path)

JOB = Path(job.__file__)
ROOT = JOB.parents[2]
TIMING = {"compute_seconds", "protocol_seconds", "encryption_seconds"}


def run_job(tmp_path, name, checkpoint, engine, crypto, *extra):
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(JOB), str(out), str(checkpoint), engine,
                           crypto, *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    return proc, out


def same_history(a, b):
    strip = [{k: v for k, v in r.items() if k not in TIMING} for r in a["rounds"]]
    assert strip == [{k: v for k, v in r.items() if k not in TIMING} for r in b["rounds"]]
    assert dict(map(tuple, a["evaluations"])).keys() <= dict(map(tuple, b["evaluations"])).keys()
    evals = {t: e for t, e in b["evaluations"]}
    for t, e in a["evaluations"]:
        np.testing.assert_array_equal([e[k] for k in ("primal", "dual")],
                                      [evals[t][k] for k in ("primal", "dual")])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs (no checkpoint folder), per engine and backend."""
    cache = {}

    def get(engine, crypto):
        if (engine, crypto) not in cache:
            tmp = tmp_path_factory.mktemp("reference")
            proc, out = run_job(tmp, "ref", tmp / "ck", engine, crypto)
            assert proc.returncode == 0, proc.stderr
            cache[engine, crypto] = json.loads(out.read_text())
        return cache[engine, crypto]
    return get


CASES = [
    ("batched", "plain", "5:kernel"),
    ("batched", "plain", "6:save:2"),
    ("protocol", "plain", "4:local dual method"),
    ("protocol", "mask", "2:secure inner product"),
    ("protocol", "mask", "7:primal aggregation"),
    ("protocol", "mask", "8:dual sync + primal aggregation"),
    ("protocol", "mask", "6:certificate: inner products"),
    ("protocol", "mask", "9:save:3"),
    ("protocol", "mask", "12:save:0"),
]


@pytest.mark.parametrize("engine,crypto,kill", CASES)
def test_sigkill_then_resume_gives_the_uninterrupted_bits(tmp_path, reference, engine,
                                                         crypto, kill):
    checkpoint = tmp_path / "ck"
    proc, _ = run_job(tmp_path, "killed", checkpoint, engine, crypto, "--kill", kill)
    assert proc.returncode == -9, proc.stderr
    proc, out = run_job(tmp_path, "resumed", checkpoint, engine, crypto, "--resume")
    assert proc.returncode == 0, proc.stderr
    resumed, ref = json.loads(out.read_text()), reference(engine, crypto)
    np.testing.assert_array_equal(resumed["alpha"], ref["alpha"])
    np.testing.assert_array_equal(resumed["model"], ref["model"])
    # the resumed history has every round once; its certificates include the reference's
    same_history(ref["history"], resumed["history"])


@pytest.mark.parametrize("crypto", ["paillier", "bfv"])
def test_resume_with_homomorphic_encryption_in_process(tmp_path, crypto):
    fed, settings = job.problem()
    opts = dict(eval_every=2, crypto=crypto, **job.options(crypto))
    a, ha = run_hyfdca(fed, settings, max_rounds=4, **opts)
    run_hyfdca(fed, settings, max_rounds=2, checkpoint=tmp_path, **opts)
    b, hb = run_hyfdca(fed, settings, max_rounds=4, checkpoint=tmp_path, resume=True, **opts)
    keys = a.clients[0].keys
    np.testing.assert_array_equal(b.clients[0].keys.decrypt(b.server.enc_alpha),
                                  keys.decrypt(a.server.enc_alpha))
    np.testing.assert_array_equal(a.model, b.model)
    same_history(ha.state(), hb.state())


def assert_resumed_run_is_uninterrupted(tmp_path, engine, crypto, rounds,
                                        participation="fraction", eval_every=1, stop_at=3,
                                        **fields):
    """auto under ``participation`` with ``fields``: a run stopped after round
    ``stop_at`` and resumed to ``rounds`` gives the uninterrupted run's model, iterates
    and every certificate of its history; returns the resumed run."""
    fed, settings = job.problem()
    settings = HyFDCASettings.from_variant("auto", lam=settings.lam,
                                           participation=participation, **fields)
    opts = dict(eval_every=eval_every, crypto=crypto, engine=engine, **job.options(crypto))
    a, ha = run_hyfdca(fed, settings, max_rounds=rounds, **opts)
    run_hyfdca(fed, settings, max_rounds=stop_at, checkpoint=tmp_path, **opts)
    b, hb = run_hyfdca(fed, settings, max_rounds=rounds, checkpoint=tmp_path, resume=True,
                       **opts)
    np.testing.assert_array_equal(a.model, b.model)
    same_history(ha.state(), hb.state())
    assert [t for t, _ in hb.state()["evaluations"]] == [t for t, _ in
                                                        ha.state()["evaluations"]]
    return b


@pytest.mark.parametrize("engine, crypto", [("protocol", "mask"), ("batched", "plain")])
def test_a_stop_off_the_certificate_schedule_resumes_with_the_uninterrupted_certificates(
        tmp_path, engine, crypto):
    """A run that stops between two certificates (round 7 of eval_every 5) certifies at
    its stop, but saves before that certificate: the certified points of later
    certificates depend on every earlier one, and the resumed run's are the
    uninterrupted run's."""
    assert_resumed_run_is_uninterrupted(tmp_path, engine, crypto, rounds=15, fraction=0.5,
                                        eval_every=5, stop_at=7)


@pytest.mark.parametrize("engine, crypto", [("protocol", "fast-paillier"),
                                            ("batched", "plain")])
def test_resume_with_block_draws_gives_the_uninterrupted_bits(tmp_path, engine, crypto):
    """draw_block = 3 (the 512-bit test keys' slots): the resumed run draws the same
    blocks as the uninterrupted one (the protocol's clients get their units again from
    the set-up; the batched engine saves them with its draws)."""
    assert_resumed_run_is_uninterrupted(tmp_path, engine, crypto, rounds=6, fraction=0.5,
                                        draw_block=3)


def test_a_batched_checkpoint_resumes_under_another_numba_thread_count(tmp_path, monkeypatch):
    """The batched engine's per-thread scratch (one row per Numba thread) is not state:
    a run saved where Numba had 5 threads resumes where it has the machine's count (the
    shapes were compared and the file refused), with the uninterrupted bits."""
    import numba

    fed, settings = job.problem()
    settings = HyFDCASettings.from_variant("auto", lam=settings.lam, participation="fraction",
                                           fraction=0.5, draw_block=3)
    opts = dict(eval_every=2, engine="batched")
    a, ha = run_hyfdca(fed, settings, max_rounds=6, **opts)
    threads = numba.config.NUMBA_NUM_THREADS
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", threads + 3)
    run_hyfdca(fed, settings, max_rounds=3, checkpoint=tmp_path, **opts)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", threads)
    b, hb = run_hyfdca(fed, settings, max_rounds=6, checkpoint=tmp_path, resume=True, **opts)
    np.testing.assert_array_equal(a.model, b.model)
    same_history(ha.state(), hb.state())


@pytest.mark.parametrize("engine, crypto", [("protocol", "mask"), ("batched", "plain")])
def test_resume_inside_the_proximal_outer_loop_gives_the_uninterrupted_bits(tmp_path, engine,
                                                                           crypto):
    """prox > 0: a checkpoint between two moves of the centre (round 3 of prox_rounds 2)
    keeps the centre and the last w, and the resumed run is the uninterrupted one."""
    assert_resumed_run_is_uninterrupted(tmp_path, engine, crypto, rounds=7, fraction=0.6,
                                        prox=0.3, prox_rounds=2)


@pytest.mark.parametrize("engine, crypto", [("protocol", "mask"), ("batched", "plain")])
def test_resume_after_prox_adapt_weakened_the_outer_loop_gives_the_uninterrupted_bits(
        tmp_path, engine, crypto):
    """Full participation (auto-full) with prox_adapt: the kappa the rule left at round 2
    and the tracked conjugate term are kept, and the clients of a resumed protocol run
    learn that kappa again with their next dual sync."""
    run = assert_resumed_run_is_uninterrupted(tmp_path, engine, crypto, rounds=7,
                                              participation="full", prox=0.3, prox_rounds=2,
                                              prox_adapt=True)
    state = run.server if engine == "protocol" else run
    assert state.prox_kappa is not None and state.prox_kappa < 0.3  # the rule fired


@pytest.mark.parametrize("engine, crypto", [("protocol", "mask"), ("batched", "plain")])
@pytest.mark.parametrize("participation, fraction", [("full", 1.0), ("fraction", 0.9)])
def test_resume_before_the_warm_started_outer_loop_starts_gives_the_uninterrupted_bits(
        tmp_path, engine, crypto, participation, fraction):
    """A warm-started outer loop (prox_warm_start: auto-full's, and the option at f =
    0.9) starts after its first period: a run saved after round 3, in that period (kappa
    0), starts it after round 4 when resumed, and its clients run the new kappa from
    their next dual sync."""
    run = assert_resumed_run_is_uninterrupted(tmp_path, engine, crypto, rounds=7,
                                              participation=participation,
                                              fraction=fraction, prox=0.3, prox_rounds=4,
                                              prox_warm_start=True)
    state = run.server if engine == "protocol" else run
    assert state.prox_kappa == 0.3 and state.round_settings.kappa == 0.3


def _objects(value, seen=None):
    """Every object reachable from ``value`` through containers and attributes."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return
    seen.add(id(value))
    yield value
    children = ()
    if isinstance(value, dict):
        children = list(value.keys()) + list(value.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        children = value
    elif hasattr(value, "__dict__"):
        children = vars(value).values()
    elif hasattr(value, "__slots__"):
        children = [getattr(value, s) for s in value.__slots__ if hasattr(value, s)]
    for child in children:
        yield from _objects(child, seen)


@pytest.mark.parametrize("crypto", ["mask", "paillier", "fast-paillier", "bfv"])
def test_the_servers_file_holds_no_private_or_prf_key(tmp_path, crypto):
    fed, settings = job.problem()
    run, _ = run_hyfdca(fed, settings, max_rounds=2, crypto=crypto, checkpoint=tmp_path,
                        **job.options(crypto))
    folder = next(tmp_path.glob("round-*"))
    server = pickle.loads((folder / "server.pkl").read_bytes())
    found = list(_objects(server))
    assert not [o for o in found if isinstance(o, (KeyHolder, SecureSum))]
    assert not [o for o in found if "private" in type(o).__name__.lower()]
    secrets = [run.clients[0].masker._key]
    for value in vars(run.clients[0].keys).values():  # key bytes (bfv: one per prime)
        secrets += [value] if isinstance(value, bytes) else [
            v for v in value if isinstance(v, bytes)] if isinstance(value, list) else []
    raw = (folder / "server.pkl").read_bytes()
    assert secrets and not [s for s in secrets if s in raw]
    client = pickle.loads((folder / "client-0.pkl").read_bytes())
    assert isinstance(client["keys"], KeyHolder)  # a client keeps its own keys


def test_refusals_name_the_problem(tmp_path):
    fed, settings = job.problem()
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        run_hyfdca(fed, settings, max_rounds=2, checkpoint=tmp_path / "none", resume=True)
    run_hyfdca(fed, settings, max_rounds=2, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match=r"already holds a checkpoint \(round-000002\)"):
        run_hyfdca(fed, settings, max_rounds=4, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match="differs in seed: checkpoint 0, this run 1"):
        run_hyfdca(fed, settings, max_rounds=4, checkpoint=tmp_path, resume=True, seed=1)
    other = job.P.hybrid_grid(fed.reassemble()[0][:, ::-1], fed.labels, 3, 3)
    with pytest.raises(CheckpointError, match="differs in data"):
        run_hyfdca(other, settings, max_rounds=4, checkpoint=tmp_path, resume=True)
    with pytest.raises(CheckpointError, match="engine: checkpoint 'protocol'"):
        run_hyfdca(fed, settings, max_rounds=4, checkpoint=tmp_path, resume=True,
                   engine="batched")
    with pytest.raises(ValueError, match="need a checkpoint folder"):
        run_hyfdca(fed, settings, max_rounds=4, resume=True)
    with pytest.raises(CheckpointError, match=r"differs in settings\.lam: checkpoint "
                                              r"[0-9.e-]+, this run 0\.5$"):
        run_hyfdca(fed, replace(settings, lam=0.5), max_rounds=4, checkpoint=tmp_path,
                   resume=True)


@pytest.mark.parametrize("engine, name, damage", [
    ("protocol", "run.json", "truncate"), ("protocol", "model.npy", "truncate"),
    ("protocol", "model.npy", "delete"), ("protocol", "server.pkl", "truncate"),
    ("protocol", "client-1.pkl", "truncate"), ("batched", "engine.npz", "truncate"),
    ("batched", "engine.npz", "delete"),
])
def test_a_damaged_or_missing_file_is_named(tmp_path, engine, name, damage):
    fed, settings = job.problem()
    run_hyfdca(fed, settings, max_rounds=2, engine=engine, checkpoint=tmp_path)
    path = tmp_path / "round-000002" / name
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    problem = "missing" if damage == "delete" else "damaged"
    with pytest.raises(CheckpointError, match=f"checkpoint file .*{name} is {problem}"):
        run_hyfdca(fed, settings, max_rounds=4, engine=engine, checkpoint=tmp_path,
                   resume=True)


def record_digest(path):
    """Rewrite run.json beside ``path`` with path's SHA-256, as if the save wrote it."""
    run_json = path.parent / "run.json"
    description = json.loads(run_json.read_text())
    description["files"][path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    run_json.write_text(json.dumps(description))


@pytest.mark.parametrize("dropped", ["dual_point_alpha", "prox_centre", "solved_centre"])
def test_an_engine_file_without_an_array_is_refused(tmp_path, dropped):
    """The batched engine's file holds every state array (kappa 0 or not): one that
    lacks any is refused by name, never resumed from zeros."""
    fed, settings = job.problem()
    run_hyfdca(fed, settings, max_rounds=2, engine="batched", checkpoint=tmp_path)
    path = tmp_path / "round-000002" / "engine.npz"
    with np.load(path) as saved:
        kept = {key: saved[key] for key in saved.files if key != dropped}
    np.savez(path.with_suffix(""), **kept)  # np.savez appends ".npz"
    with pytest.raises(CheckpointError, match="engine.npz is damaged: its SHA-256 differs"):
        run_hyfdca(fed, settings, max_rounds=4, engine="batched", checkpoint=tmp_path,
                   resume=True)
    # the same file with its digest recorded (an engine of another version): by name
    record_digest(path)
    with pytest.raises(CheckpointError, match=f"lacks the arrays .*{dropped}"):
        run_hyfdca(fed, settings, max_rounds=4, engine="batched", checkpoint=tmp_path,
                   resume=True)


@pytest.mark.parametrize("change", ["bit", "stale client", "swapped client", "server"])
def test_a_file_changed_after_the_save_is_refused(tmp_path, change):
    """A flipped bit in the model, a client's file from an earlier checkpoint, another
    client's file, or a server file replaced by a valid pickle: each resumed silently
    with other bits before; now each fails the SHA-256 run.json recorded, by name."""
    fed, settings = job.problem()
    run_hyfdca(fed, settings, max_rounds=4, crypto="mask", checkpoint=tmp_path,
               checkpoint_every=2)
    folder = tmp_path / "round-000004"
    if change == "bit":
        name, data = "model.npy", bytearray((folder / "model.npy").read_bytes())
        data[-1] ^= 1
    elif change == "stale client":
        name, data = "client-1.pkl", (tmp_path / "round-000002" / "client-1.pkl").read_bytes()
    elif change == "swapped client":
        name, data = "client-1.pkl", (folder / "client-2.pkl").read_bytes()
    else:
        name, data = "server.pkl", pickle.dumps(dict(round=4))
    (folder / name).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{name} is damaged: its SHA-256 differs"):
        run_hyfdca(fed, settings, max_rounds=6, crypto="mask", checkpoint=tmp_path,
                   resume=True)


def test_run_json_without_its_fields_is_named(tmp_path):
    fed, settings = job.problem()
    run_hyfdca(fed, settings, max_rounds=2, checkpoint=tmp_path)
    path = tmp_path / "round-000002" / "run.json"
    description = json.loads(path.read_text())
    del description["history"]
    path.write_text(json.dumps(description))
    with pytest.raises(CheckpointError, match=r"run.json is damaged: it lacks \['history'\]"):
        run_hyfdca(fed, settings, max_rounds=4, checkpoint=tmp_path, resume=True)


def test_another_eval_every_is_refused(tmp_path):
    """The certified points depend on the rounds of the certificates: a resume with
    another period would give a history that no single run has."""
    fed, settings = job.problem()
    run_hyfdca(fed, settings, max_rounds=4, eval_every=2, checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match="eval_every: checkpoint 2, this run 3"):
        run_hyfdca(fed, settings, max_rounds=8, eval_every=3, checkpoint=tmp_path,
                   resume=True)


def test_a_key_mismatch_is_named(tmp_path):
    fed, settings = job.problem()
    run_hyfdca(fed, settings, max_rounds=2, crypto="mask", checkpoint=tmp_path / "a")
    run_hyfdca(fed, settings, max_rounds=2, crypto="mask", checkpoint=tmp_path / "b")
    a, b = (next((tmp_path / x).glob("round-*")) for x in "ab")
    (a / "client-4.pkl").write_bytes((b / "client-4.pkl").read_bytes())
    with pytest.raises(CheckpointError, match="client-4.pkl is damaged: its SHA-256 differs"):
        run_hyfdca(fed, settings, max_rounds=4, crypto="mask", checkpoint=tmp_path / "a",
                   resume=True)
    # with its digest recorded too (a folder assembled by hand): the keys are named
    record_digest(a / "client-4.pkl")
    with pytest.raises(CheckpointError, match="key mismatch: client 4's keys"):
        run_hyfdca(fed, settings, max_rounds=4, crypto="mask", checkpoint=tmp_path / "a",
                   resume=True)


def test_a_failed_write_leaves_neither_file_nor_temporary_file(tmp_path, monkeypatch):
    from hyfdca._checkpoint import write_atomic
    target = tmp_path / "run.pkl"

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_atomic(target, b"data")
    assert list(tmp_path.iterdir()) == []


def test_pruning_keeps_the_newest_rounds_by_number(tmp_path):
    """round-1000000 is newer than round-999999 although its name sorts first as text."""
    from hyfdca._checkpoint import KEEP, save_checkpoint
    rounds = [999_998, 999_999, 1_000_000, 1_000_001][-(KEEP + 2):]
    for t in rounds:
        save_checkpoint(tmp_path, dict(round=t), np.zeros(2), {})
    kept = sorted(int(p.name.split("-")[1]) for p in tmp_path.glob("round-*"))
    assert kept == rounds[-KEEP:]
    assert (tmp_path / "LATEST").read_text() == f"round-{rounds[-1]}"


def test_the_next_save_removes_what_a_killed_save_left(tmp_path):
    """A kill during a save can leave a .round-N.partial folder (with its own temporary
    files) and a .LATEST.*.tmp file; the next save removes them, and nothing else."""
    from hyfdca._checkpoint import save_checkpoint
    save_checkpoint(tmp_path, dict(round=5), np.zeros(2), {})
    partial = tmp_path / ".round-000010.partial"
    partial.mkdir()
    (partial / ".run.json.x1.tmp").write_bytes(b"half")
    (tmp_path / ".LATEST.x2.tmp").write_bytes(b"round-0000")
    (tmp_path / "notes.txt").write_text("the user's")
    save_checkpoint(tmp_path, dict(round=12), np.zeros(2), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "notes.txt",
                                                          "round-000005", "round-000012"]


@pytest.mark.parametrize("engine", ["protocol", "batched"])
def test_the_records_outside_the_rounds_survive_a_resume(tmp_path, engine):
    """The certificates' costs of the rounds before the stop are kept (they restarted
    empty, so a resumed run's summary counted only the certificates after it)."""
    fed, settings = job.problem()
    whole, _ = run_hyfdca(fed, settings, max_rounds=8, eval_every=2, engine=engine)
    run_hyfdca(fed, settings, max_rounds=4, eval_every=2, engine=engine, checkpoint=tmp_path)
    resumed, _ = run_hyfdca(fed, settings, max_rounds=8, eval_every=2, engine=engine,
                            checkpoint=tmp_path, resume=True)

    def costs(run):
        return [(c["round"], c["rtc"], c["encrypt"], c["decrypt"])
                for c in run.certificate_costs]

    assert costs(resumed) == costs(whole) and len(costs(whole)) == 5
