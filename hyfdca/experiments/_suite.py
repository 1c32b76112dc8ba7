"""The paper's convergence-rate experiments (its section 5.2) as a suite of comparisons:
data sets x partitions x participation fractions, each a :class:`Comparison` of HyFDCA,
FedAvg and HyFEM, then figures, tables and the verdict, written to a folder.

``QUICK`` runs on the embedded breast-cancer data (CI-sized); ``FULL`` is the paper's grid
with a9a and the SMS text standing in for its data (they need ``../shared/data``), the
news20-shaped synthetic set, and Fashion-MNIST in the quadrant scheme when installed.
Each setting trains on 75% of the data and holds out the rest; as in the paper, the
searches choose on the held-out quarter and the verdict's accuracies are taken on it.
``held_out_test=True`` in the config splits it in two stratified halves
(:func:`split_held_out`): the searches choose on one, the long runs' accuracies are taken
on the other, which no choice saw.

Comparisons are independent: ``n_jobs`` runs them in parallel processes through joblib
(local by default; where a single comparison is to run, its runs are spread over them:
:func:`inner_jobs`), and ``scheduler`` (the address of a
Dask cluster) spreads them over that cluster's workers through joblib's Dask backend.
Results do not depend on where a comparison or a run ran: with the deterministic time
model they are the same bits (tested). Each comparison and each run runs with its BLAS on
one thread (:func:`compare_on_one_blas_thread`): a
threaded BLAS sums a long dot product (a client's ||X^k||_F^2, which sets the proximal
term kappa) in an order that depends on its thread count, so the bits would otherwise
depend on the machine's cores and on ``n_jobs``.

Each comparison is saved as it finishes (``OUTPUT/comparisons/``, with the settings it was
run with), and a later run into the same folder reuses every saved comparison whose
settings match: an interrupted suite resumes where it stopped. Inside a comparison each
finished run (a tuning candidate, a long run) is saved too
(``OUTPUT/comparisons/unfinished/<setting>/``, :class:`SavedRuns`) until the comparison
is saved whole, so that a comparison stopped part-way resumes from its last finished
run. One output folder takes one suite at a time. A saved comparison is keyed by its
setting, methods and options (the per-value costs included: measured costs differ from
run to run, so only runs with reference costs or none resume) and by a digest of the
toolkit's source that a comparison can run (not the Flower deployment code) and of its
data (:func:`data_digest`), so a changed code or data file recomputes. ``report_only``
redraws the figures and tables from the saved comparisons whatever code ran them, and
says which (a changed plot needs no re-run).
"""

import hashlib
import importlib.util
import json
import pickle
import re
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from joblib import Parallel, cpu_count, delayed, parallel_config
from threadpoolctl import threadpool_limits

from feddata import datasets, federated_problem
from feddata.partition import spec_key
from hyfdca._checkpoint import pickled, write_atomic
from hyfdca.experiments._compare import compare
from hyfdca.experiments._methods import METHODS, Problem
from hyfdca.experiments._report import (plot_grid, plot_time_breakdown, summary_rows,
                                        tuning_table, verdict_table)
from hyfdca.experiments._saved_runs import SavedRuns
from solvers import as_csr, centralized_solution, is_number

FRACTIONS = (0.1, 0.5, 0.9)
QUICK = dict(datasets={"breast_cancer": ("2x2", "3x3")}, fractions=(0.5, 0.9), lam=1e-2,
             rounds=30, tune_rounds=15, max_candidates=3, budget_seconds=None, eval_every=1)
FULL = dict(datasets={"fashion-mnist": ("quadrants:5", "quadrants:500", "quadrants:5000"),
                      "a9a": ("3x3", "5x5", "12x12"),
                      "sms-spam": ("3x3", "5x5", "12x12"),
                      "news20-like": ("dealt:3x3", "dealt:5x5", "dealt:12x12")},
            fractions=FRACTIONS, lam=1e-4, rounds=1000, tune_rounds=200, max_candidates=40,
            budget_seconds=600, eval_every=10)


def prepare(name, partition, *, lam, loss="hinge", seed=0):
    """(FederatedDataset of 75% of the data, validation (X, y), P*) for one setting;
    multi-class data are one class (the first) against the rest."""
    fed, validation, _ = federated_problem(name, partition, seed=seed)
    X_fed, y_fed = fed.reassemble()
    return fed, validation, centralized_solution(X_fed, y_fed, loss=loss, lam=lam)[0]


def split_held_out(validation, seed=0):
    """(validation, test): the held-out quarter in two stratified halves, seeded; the
    searches choose on the first, the long runs' accuracy is taken on the second."""
    from sklearn.model_selection import train_test_split

    X, y = validation
    classes, counts = np.unique(y, return_counts=True)
    if classes.size < 2 or counts.min() < 2:
        raise ValueError(f"a held-out test set needs two held-out rows of each of two "
                         f"classes or more; the held-out quarter has "
                         f"{dict(zip(classes.tolist(), counts.tolist()))}")
    X_val, X_test, y_val, y_test = train_test_split(X, y, test_size=0.5, random_state=seed,
                                                    stratify=y)
    return (X_val, y_val), (X_test, y_test)


def _log(message):
    print(message, flush=True)


def compare_on_one_blas_thread(*args, code, **kwargs):
    """:func:`compare` with the BLAS libraries limited to one thread, in whichever process
    runs it (the suite's own, a joblib worker or a Dask worker), once that process's
    source digest is found to be ``code``, the one its result is saved under."""
    here = source_digest()
    if here != code:
        raise RuntimeError(f"this worker runs other code (source digest {here[:12]}) than "
                           f"the suite that sent it the comparison ({code[:12]}): install "
                           f"the same checkout on every worker")
    with threadpool_limits(limits=1, user_api="blas"):
        return compare(*args, **kwargs)


@contextmanager
def _cluster(scheduler):
    """joblib's Dask backend on the cluster at ``scheduler`` (None: joblib's local
    processes)."""
    if scheduler is None:
        yield
        return
    try:
        from dask.distributed import Client
    except ImportError as err:
        raise ImportError("a Dask scheduler needs dask[distributed]: pip install "
                          "'hyfdca[cluster]'") from err
    with Client(scheduler), parallel_config(backend="dask"):
        yield


def inner_jobs(n_jobs, n_comparisons):
    """The runs of a comparison to run at once: ``n_jobs`` (-1: the cores) where one
    comparison is to run, else 1 (comparisons side by side keep the cores busier than a
    comparison's batches, which wait for their slowest run, and a search with a time
    budget runs its candidates one after the other)."""
    n_jobs = cpu_count() if n_jobs == -1 else n_jobs
    return n_jobs if n_comparisons == 1 else 1


def _finished(runs):
    """Delete the saved runs of a saved comparison, and their parent folder if empty."""
    runs.remove()
    try:
        runs.folder.parent.rmdir()
    except OSError:   # missing, or holding another setting's runs
        pass


def _formats(stem):
    """The figure files for ``stem``: PNG and PDF."""
    return [Path(f"{stem}.{ext}") for ext in ("png", "pdf")]


SOURCE_PACKAGES = ("hyfdca", "baselines", "solvers", "feddata", "crypto")
# code no comparison runs (tested: a comparison loads no module of it), so that changing
# it leaves the saved comparisons reusable
NOT_RUN_BY_A_COMPARISON = ("hyfdca.flower",)


def source_digest():
    """SHA-256 of the toolkit's Python source that a comparison can run (the packages
    above less ``NOT_RUN_BY_A_COMPARISON``), by path."""
    digest = hashlib.sha256()
    for package in SOURCE_PACKAGES:
        folder = Path(importlib.util.find_spec(package).origin).parent
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder)
            module = ".".join((package, *relative.with_suffix("").parts))
            if any(module == m or module.startswith(m + ".") for m in NOT_RUN_BY_A_COMPARISON):
                continue
            digest.update(f"{package}/{relative}".encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def data_digest(fed, *held_out):
    """SHA-256 of a setting's data as its comparisons see them: every client's block (its
    sample and feature ids and values), the labels and the held-out sets (validation, and
    test where there is one), so that a changed data file (a row of the validation part
    alike) is not read back as the old file's comparison."""
    arrays = [fed.labels, *(y for _, y in held_out)]
    for block in fed.blocks:
        arrays += [block.sample_ids, block.feature_ids]
    for X in [*(block.X for block in fed.blocks), *(X for X, _ in held_out)]:
        X = as_csr(X)
        arrays += [np.array(X.shape), X.indptr, X.indices, X.data]
    digest = hashlib.sha256()
    for array in map(np.ascontiguousarray, arrays):
        digest.update(f"{array.dtype.str}{array.shape}".encode() + array.tobytes())
    return digest.hexdigest()


def _fingerprint(label, problem, methods, options, code, data):
    """What a saved comparison must match to be reused (JSON text)."""
    return json.dumps(dict(
        label=label, loss=problem.loss, lam=problem.lam, participation=problem.participation,
        fraction=problem.fraction, p_star=f"{problem.p_star:.12g}", seed=problem.seed,
        engine=problem.engine, deterministic=problem.deterministic, methods=list(methods),
        options=options, code=code, data=data,
        **({"held_out_test": True} if problem.test is not None else {})),
        sort_keys=True, default=repr)


def _saved_path(folder, label):
    return folder / (re.sub(r"[^A-Za-z0-9.=-]+", "_", label) + ".pkl")


_ORIGIN = ("code", "data")   # what a comparison was made by and from, not its settings


def _load_saved(path, fingerprint, *, any_code=False):
    """(comparison, the source digest it was run with, the data digest it was run on, None
    where not recorded) if the comparison saved at ``path`` was run with ``fingerprint``
    (with ``any_code``: with its settings, by any code and on any data digest: a report
    redraws what was run), else None (also for a file that cannot be read back: it is
    computed again). The fingerprint is the first record, checked before the comparison
    is unpickled."""
    wanted = json.loads(fingerprint)
    try:
        with open(path, "rb") as f:
            saved = json.loads(pickle.load(f))
            code, data = (saved.pop(key, None) for key in _ORIGIN)
            if saved != {k: v for k, v in wanted.items() if k not in _ORIGIN}:
                return None
            if not any_code and (code, data) != (wanted["code"], wanted["data"]):
                return None
            try:
                return pickle.load(f), code, data
            except (EOFError, pickle.UnpicklingError, AttributeError, ImportError) as err:
                if any_code:
                    raise ValueError(f"{path} was saved with these settings (source digest "
                                     f"{code[:12]}) but this checkout cannot read it back: "
                                     f"{err!r}") from err
                return None
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError,
            json.JSONDecodeError, TypeError):
        return None


def _saved_fingerprints(comparison_file, runs_folder):
    """The fingerprints (JSON text) under which a setting's comparison and its unfinished
    runs are saved (unreadable files left out: they are computed again anyway)."""
    found = []
    for path, read in [(comparison_file, json.loads),
                       *((run, lambda record: json.loads(json.loads(record)["comparison"]))
                         for run in sorted(runs_folder.glob("*.pkl")))]:
        try:
            with open(path, "rb") as f:
                fingerprint = read(pickle.load(f))
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError,
                json.JSONDecodeError, TypeError, KeyError):
            continue
        if isinstance(fingerprint, dict) and fingerprint not in found:
            found.append(fingerprint)
    return found


def _flat(fingerprint):
    """A fingerprint's settings with its options (rounds, candidates, ...) among them."""
    return {**{k: v for k, v in fingerprint.items() if k != "options"},
            **fingerprint.get("options", {})}


def _check_saved(saved, fingerprints, runs, overwrite, log):
    """ValueError naming each setting whose saved comparison or runs were made with other
    settings (rounds, candidates, time model, ...), which this run would replace (or, for
    a comparison saved whole with these settings, delete), unless ``overwrite``; work of
    other code or data only is logged and not reused (the source digest is what a re-run
    after a code change is for; a changed data file changes the data digest, and mostly
    P*; so are costs measured on the clock, which no run can give again)."""
    clashes = []
    for label, wanted in fingerprints.items():
        ours = _flat(json.loads(wanted))
        for other in _saved_fingerprints(_saved_path(saved, label), runs[label].folder):
            theirs = _flat(other)
            keys = {k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k)}
            measured = not (theirs.get("deterministic") or ours.get("deterministic"))
            settings = sorted(keys - {*_ORIGIN, "p_star"}   # P*: of the code and data
                              - ({"costs"} if measured else set()))
            if settings:
                clashes.append(f"{label} (saved with other {', '.join(settings)})")
            elif keys:
                log(f"{label}: saved work of other code, data or measured costs is not "
                    f"reused")
    if clashes and not overwrite:
        raise ValueError(f"{saved} holds work saved with other settings, which this run "
                         f"would replace: {'; '.join(clashes)}; give the same settings to "
                         f"resume it, another output folder, or overwrite=True "
                         f"(--overwrite) to replace it")
    for clash in clashes:
        log(f"overwriting {clash}")


def check_config(config, latency=0.2575):
    """ValueError naming what of ``config`` (and the time model's ``latency``) no
    comparison can run, or runs twice, before any work."""
    problems = [f"fraction {f!r} is not in (0, 1]" for f in config["fractions"]
                if not (is_number(f) and 0 < f <= 1)]
    problems += [f"fraction {f!r} is given {n} times"
                 for f, n in Counter(float(f) for f in config["fractions"]
                                     if is_number(f)).items() if n > 1]
    for name, specs in config["datasets"].items():
        spelled = {}
        for spec in specs:
            spelled.setdefault(spec_key(spec), []).append(spec)
        problems += [f"partition {key!r} of {name} is given {len(given)} times "
                     f"(as {', '.join(map(repr, given))})"
                     for key, given in spelled.items() if len(given) > 1]
    if not (is_number(latency) and np.isfinite(latency) and latency >= 0):
        problems.append(f"latency must be a finite number of seconds >= 0, got {latency!r}")
    counts = dict(rounds=config["rounds"], tune_rounds=config["tune_rounds"],
                  max_candidates=config["max_candidates"],
                  eval_every=config.get("eval_every", 1))
    problems += [f"{key} must be a whole number >= 1, got {value!r}"
                 for key, value in counts.items()
                 if not (isinstance(value, int) and value >= 1)]
    if not isinstance(config.get("held_out_test", False), bool):
        problems.append(f"held_out_test must be True or False, got "
                        f"{config['held_out_test']!r}")
    candidates = config.get("baseline_candidates")
    if candidates is not None and not (isinstance(candidates, int) and candidates >= 1):
        problems.append(f"baseline_candidates must be a whole number >= 1, got "
                        f"{candidates!r}")
    if not any(config["datasets"].values()) or not config["fractions"]:
        problems.append("these settings name no comparison (no partition or no fraction)")
    if problems:
        raise ValueError("experiment settings: " + "; ".join(problems))


def run_suite(config, output, *, methods=METHODS, costs=None, latency=0.2575, seed=0,
              engine="batched", deterministic=False, n_jobs=1, scheduler=None,
              report_only=False, overwrite=False, log=_log):
    """Run every comparison of ``config`` (QUICK, FULL or alike); write figures, tables and
    JSON under ``output``; return (comparisons, wins_iter, wins_time, total,
    wins_iter with every method at its defaults). HyFDCA runs
    on ``engine`` ("batched" or "protocol": same iterates and operation counts).
    ``deterministic``: compute time from operation counts (``_methods.charge_compute``)
    and no real-time budget for the search, so the results are the same bits on every
    machine (give ``costs`` from ``REFERENCE_COSTS`` too). ``n_jobs`` comparisons run at
    once (joblib processes; -1: one per core), or, where one is to run, ``n_jobs`` of its
    runs at once; ``scheduler``: a Dask scheduler address
    whose workers run them instead (needs ``dask[distributed]``). Finished comparisons,
    and the finished runs of unfinished ones, are saved under ``output/comparisons`` and
    reused by a later call with the same settings (an interrupted suite resumes); work
    saved there with other settings is refused (ValueError naming them) unless
    ``overwrite``.
    ``report_only``: run nothing; draw the figures and tables from the saved comparisons
    of these settings whatever code ran them (say which), or raise ValueError naming
    those that are missing."""
    check_config(config, latency)
    if deterministic and config.get("budget_seconds") is not None:
        config = dict(config, budget_seconds=None)
    out = Path(output).resolve()   # the same folder for every worker
    if report_only and not (out / "comparisons").is_dir():
        raise ValueError(f"report only: {out / 'comparisons'} does not exist")
    out.mkdir(parents=True, exist_ok=True)
    settings, data = {}, {}   # data set -> [(label, problem)]; label -> data digest
    for name, partitions in config["datasets"].items():
        if datasets.locate_dataset(name) is None:
            if report_only:   # its tables would be left out of the redrawn ones
                raise ValueError(f"report only: {name} is not on this machine (see "
                                 "`hyfdca datasets`); its settings are needed to read "
                                 "the saved comparisons")
            log(f"skipping {name}: not on this machine (see `hyfdca datasets`)")
            continue
        for partition in partitions:
            fed, validation, p_star = prepare(name, partition, lam=config["lam"], seed=seed)
            try:
                held_out = (split_held_out(validation, seed) if config.get("held_out_test")
                            else (validation, None))
            except ValueError as err:
                raise ValueError(f"{name} {partition}: {err}") from None
            digest = data_digest(fed, *(s for s in held_out if s is not None))
            for fraction in config["fractions"]:
                # every client in every round is full participation (HyFDCA's auto-full)
                participation = "full" if fraction == 1 else "fraction"
                problem = Problem(fed, "hinge", config["lam"], participation, fraction,
                                  p_star, held_out[0], seed, engine, deterministic,
                                  test=held_out[1])
                label = f"{name} {partition} f={fraction:g}"
                settings.setdefault(name, []).append((label, problem))
                data[label] = digest
    jobs = [job for per_dataset in settings.values() for job in per_dataset]
    if report_only and not jobs:
        raise ValueError("report only: these settings name no comparison")
    counts = Counter(label for label, _ in jobs)
    repeated = sorted(label for label, n in counts.items() if n > 1)
    if repeated:
        raise ValueError(f"settings repeated (each must be run once): {repeated}")
    options = dict(rounds=config["rounds"], tune_rounds=config["tune_rounds"],
                   max_candidates=config["max_candidates"],
                   baseline_candidates=config.get("baseline_candidates"),
                   budget_seconds=config["budget_seconds"], costs=costs, latency=latency,
                   eval_every=config.get("eval_every", 1))
    saved = out / "comparisons"
    saved.mkdir(exist_ok=True)
    code = source_digest()
    fingerprints = {label: _fingerprint(label, problem, methods, options, code, data[label])
                    for label, problem in jobs}
    done, origins = {}, {}
    for label, _ in jobs:
        loaded = _load_saved(_saved_path(saved, label), fingerprints[label],
                             any_code=report_only)
        if loaded is not None:
            done[label], *origins[label] = loaded
    todo = [(label, problem) for label, problem in jobs if label not in done]
    runs = {label: SavedRuns(saved / "unfinished" / _saved_path(saved, label).stem,
                             fingerprints[label]) for label, _ in jobs}
    inner = 1 if scheduler else inner_jobs(n_jobs, len(todo))
    if report_only:
        if todo:
            raise ValueError(f"report only: no comparison saved in {saved} with these "
                             f"settings for {[label for label, _ in todo]}")
        for label, _ in jobs:
            ran, on = origins[label]
            log(f"{label}: run by source digest {ran[:12]}"
                + ("" if ran == code else f" (this checkout: {code[:12]})")
                + ("; its data digest was not recorded" if on is None
                   else "; on other data than this machine's (data digest "
                        f"{on[:12]}, here {data[label][:12]})" if on != data[label] else ""))
    else:
        _check_saved(saved, fingerprints, runs, overwrite, log)
        log(f"{len(jobs)} comparisons"
            + (f", {len(done)} reused from {saved}" if done else "") + ", "
            + (f"on the Dask cluster at {scheduler}" if scheduler else f"n_jobs={n_jobs}")
            + (f", {inner} of its runs at once" if inner > 1 else ""))
        for label in done:   # left by a stop between saving a comparison and this, or
            _finished(runs[label])   # by a stopped run of other settings (--overwrite)
        for label, _ in todo:
            n_saved = runs[label].count()
            if n_saved:
                log(f"{label}: resuming from {n_saved} saved runs in {runs[label].folder}")
    with _cluster(scheduler if todo else None):
        outer = -1 if scheduler else 1 if inner > 1 else n_jobs
        results = Parallel(n_jobs=outer, return_as="generator_unordered")(
            delayed(compare_on_one_blas_thread)(label, problem, methods, run=runs[label],
                                                n_jobs=inner, code=code, **options)
            for label, problem in todo)
        for comp in results:   # saved as each finishes
            write_atomic(_saved_path(saved, comp.name),   # fingerprint first, then comp
                         pickled(fingerprints[comp.name]) + pickled(comp))
            _finished(runs[comp.name])
            done[comp.name] = comp
            log(f"compared on {comp.name} ({len(done)}/{len(jobs)})")
    comparisons = [done[label] for label, _ in jobs]
    finished = iter(comparisons)
    for name, per_dataset in settings.items():
        per_dataset = [next(finished) for _ in per_dataset]
        grid = dict(columns=len(config["fractions"]))  # a row per partition
        for axis, stem in (("iteration", "iterations"), ("time", "time")):
            plot_grid(per_dataset, _formats(out / f"{name}_{stem}"), axis=axis, **grid)
        plot_time_breakdown(per_dataset, _formats(out / f"{name}_time_breakdown"))
    table, wins_iter, wins_time, total, wins_defaults = verdict_table(comparisons)
    (out / "verdict.md").write_text(table + "\n")
    (out / "tuning.md").write_text(tuning_table(comparisons) + "\n")
    (out / "results.json").write_text(json.dumps(summary_rows(comparisons), indent=1))
    return comparisons, wins_iter, wins_time, total, wins_defaults
