#!/usr/bin/env python
"""The regime matrix of HyFDCA: data x partition x participation x lam x variant.

Every cell runs HyFDCA (hinge, run seed 0 unless ``--seeds``, the batched engine:
plaintext, the message protocol's iterates bit for bit) from alpha = 0 and evaluates the
certificate every ``--eval-every`` rounds. Per cell it reports

* cert 5e-2, cert 1e-2: the first evaluated round whose duality gap P(w_c) - D(alpha_c)
  is at most 5e-2 P* (1e-2 P*), w_c and alpha_c the certified points (docs/algorithm.md
  section 3: the best point of the segment between the last certified point and w(alpha),
  so its primal never rises, and the best of the segment between the last certified dual
  point and alpha, so its dual never falls): the certificate proves (P(w_c) - P*)/P*
  below the target;
* worst after 50: the largest relative loss (P(w_c) - P*)/P* of the certified point at
  an evaluation from round 50 on; iterate's worst: the same for the point the
  certificate offers, w(alpha) itself or, with the proximal outer loop, its proximal
  iterate (noisy: docs/algorithm.md section 5, lesson (d));
* dual fall: the largest fall of D(alpha) below its best earlier value, over P* (0 for
  a dual that never falls; the certified dual point never falls, the iterate alpha
  may);
* final: the certified point's relative loss at the last evaluation;
* status: ``ok`` (reached cert 1e-2, where the cell stops), ``>budget``, or
  ``diverged``: a fixed-point overflow or a gap that is no longer finite (the cell stops
  there), or, after round 50, a certified relative loss above its round-0 value (the
  cell goes on, so that its later rounds are seen too; it stops once the iterate's
  relative loss passes 1,000 times round 0's).

P* comes from ``solvers.centralized_solution`` on the pooled training data of each
partition (the quadrant scheme appends a bias feature), per lam.

The matrix (the full mode; hours on 2 cores, ``--jobs`` spreads cells over processes):
data {a9a, SMS spam TF-IDF, Fashion-MNIST quadrants with 5 and 500 clients (label < 5
against the rest), news20-like dealt} x partitions {3x3, 5x5, 12x12 where the data allows;
a9a also dealt 3x3, 5x5, 12x12: coherent data whose shared features the dealt scheme
splits} x participation {1, 0.9, 0.5, 0.1, cyclic with 3 subsets} x lam {1e-4, 1e-5} x
variant {paper, auto (the default)}. Budgets: 1,000 rounds at full participation, 2,000 at
0.9, 3,000 at 0.5 and cyclic, 10,000 at 0.1. Data a machine does not have (a9a and SMS
need ``../shared/data`` or ``HYFDCA_DATA``, Fashion-MNIST ``apt-get install -y
dataset-fashion-mnist``) is skipped with a message; where none of the data sets named is
there, the headline reads ``not-run`` (exit status 0). The arguments (variants, ``--set``
fields, partition specs) are checked before any data is loaded. ``--datasets``,
``--partitions``, ``--participations``, ``--lams``, ``--variants`` run a slice.
``--seeds 0,1,2`` runs every cell under each run seed (the participation and index-draw
streams; the partition stays that of seed 0) and adds a line per cell with the spread:
the worst and the median of the rounds to each target over the seeds. ``--trace`` prints
every evaluation of every cell as it runs (round; relative loss of the certified point and
of w(alpha); D(alpha_c) and D(alpha) over P*): with ``--eval-every 100``, the traces of
docs/algorithm.md section 6 (``--budget`` sets every cell's rounds).
Certificates leave the training state as they found it, so ``--eval-every`` changes no
iterate, only when the targets are seen. ``--save DIR`` keeps each finished cell as
``DIR/<cell>.json`` (its result beside its fingerprint: the cell, budget, period,
``--set`` fields, the SHA-256 of the toolkit's source and of the cell's partitioned data)
and a later run with the same DIR reads back the cells whose fingerprint matches instead
of running them, so that the full matrix, longer than one sitting, is run whole over
several (a stop loses only the cells in progress); ``--report-only`` runs nothing and
reports the saved cells of the slice named, listing those not saved.

``--quick`` (about 2 minutes on one core, benchmarks/README.md): a9a 3x3 at lam 1e-4, every
participation, both variants, the full mode's budgets (the cells of issue 14's a9a 3x3
targets).

Last line: ``headline: diverged_cells=<n> worst_rel_after_50=<x>
a9a_3x3_f05_cert1e2=<rounds or >budget> iterate_above_start_cells=<n>
worst_iterate_rel_after_50=<x> worst_dual_fall=<x>``, over the cells (and seeds) of the
default variant that ran (the paper's variant is in the table beside it; without the
default in ``--variants``, over the first variant given); a9a_3x3_f05 is a9a 3x3 at
participation 0.5 and lam 1e-4 (the worst over the seeds); the last three keys judge the
iterate w(alpha) and the dual, which the certified point does not.

    python benchmarks/hyfdca_variants.py --quick
    python benchmarks/hyfdca_variants.py --jobs 2 --markdown
    python benchmarks/hyfdca_variants.py --jobs 2 --markdown --save benchmarks/results/regime_matrix
    python benchmarks/hyfdca_variants.py --datasets a9a --participations 0.5,0.1
    python benchmarks/hyfdca_variants.py --quick --variants scaled-line-search --set iic=0.03
    python benchmarks/hyfdca_variants.py --datasets fashion-mnist --partitions quadrants:5 \
        --participations 0.5 --lams 1e-4 --variants auto --seeds 0,1,2,3,4
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
from contextlib import nullcontext  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from feddata.datasets import locate_dataset  # noqa: E402
from feddata.partition import partition_from_spec  # noqa: E402
from hyfdca import BatchedHyFDCA, HyFDCASettings  # noqa: E402
from hyfdca.experiments import data_digest, source_digest  # noqa: E402
from solvers import centralized_solution, default_cache_dir  # noqa: E402
from hyfdca.cli import whole_number  # noqa: E402

LOSS, SEED, DEFAULT = "hinge", 0, "auto"
TARGETS = (5e-2, 1e-2)
WARMUP = 50  # "worst after 50" and the divergence rule start here
HOPELESS = 1e3  # a cell stops once its relative loss passes this many times round 0's
PARTICIPATIONS = {"1": ("full", 1.0), "0.9": ("fraction", 0.9), "0.5": ("fraction", 0.5),
                  "0.1": ("fraction", 0.1), "cyclic": ("cyclic", 1.0 / 3.0)}
DATASETS = {  # name: (catalogue name, partitions)
    "a9a": ("a9a", ("3x3", "5x5", "12x12", "dealt:3x3", "dealt:5x5", "dealt:12x12")),
    "sms-spam": ("sms-spam", ("3x3", "5x5", "12x12")),
    "fashion-mnist": ("fashion-mnist", ("quadrants:5", "quadrants:500")),
    "news20-like": ("news20-like", ("dealt:3x3", "dealt:5x5", "dealt:12x12")),
}
FULL = dict(datasets=tuple(DATASETS), participations=tuple(PARTICIPATIONS),
            lams=(1e-4, 1e-5), variants=("paper", DEFAULT),
            budget={"1": 1000, "0.9": 2000, "0.5": 3000, "0.1": 10000, "cyclic": 3000},
            eval_every=10)
QUICK = dict(FULL, datasets=("a9a",), partitions=("3x3",), lams=(1e-4,))

INTEGER_FIELDS = ("H", "min_H", "draw_block", "prox_rounds")  # --set parses these as integers

_STATE = {}  # filled before the workers fork: (dataset, partition) -> FederatedDataset


def log(message):
    print(message, flush=True)


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def check_partition(spec):
    """ValueError where ``spec`` names no partition: ``feddata.partition``'s parser run on
    a dummy problem with enough rows for the numbers in it (grids capped, as the cells
    cap them), so that a bad spec is refused before any data is loaded."""
    rows = max([64] + [int(n) for n in re.findall(r"\d+", spec)])
    if rows > 100_000:
        return  # too large to try on a dummy: the data will tell
    X = sp.random(rows, 784, density=0.02, format="csr", random_state=0)
    partition_from_spec(X, np.where(np.arange(rows) % 2, 1.0, -1.0), spec, seed=SEED,
                        cap=True)


def check_settings(variant, participation, lam, overrides=None):
    """ValueError naming the problem where ``HyFDCASettings.from_variant`` refuses these
    settings (an unknown variant, a field it does not have, a value out of range)."""
    kind, fraction = PARTICIPATIONS[participation]
    try:
        HyFDCASettings.from_variant(variant, loss=LOSS, lam=lam, participation=kind,
                                    fraction=fraction, **(overrides or {}))
    except (TypeError, ValueError) as err:
        raise ValueError(f"variant {variant!r} at participation {participation}, lam {lam:g}"
                         + (f" with {overrides}" if overrides else "") + f": {err}") from None


NOT_RUN = ("headline: diverged_cells=not-run worst_rel_after_50=not-run "
           "a9a_3x3_f05_cert1e2=not-run iterate_above_start_cells=not-run "
           "worst_iterate_rel_after_50=not-run worst_dual_fall=not-run")


def load(name):
    """(X, y, image_shape) with +-1 labels (Fashion-MNIST: label < 5 against the rest)."""
    from feddata.datasets import load_dataset

    ds = load_dataset(DATASETS[name][0])
    y = np.asarray(ds.y, dtype=np.float64)
    if name == "fashion-mnist":
        y = np.where(y < 5, 1.0, -1.0)
    return ds.X, y, ds.image_shape


# --- one cell -----------------------------------------------------------------------------

def run_cell(dataset, settings, p_star, budget, eval_every, seed=SEED, trace=None,
             adjust=None):
    """Rounds to the certified targets; the worst relative loss after WARMUP of the
    certified point and of the iterate w(alpha); the largest fall of the dual below its
    best so far (relative to P*); status (judged on the certified point). With ``trace``
    (a label), one line per evaluation. ``adjust(run, cert, fall)`` (a probe's rule, e.g.
    benchmarks/damping_probe.py) is called at every evaluation with the engine, the
    certificate and D(alpha)'s fall below its best; it may change ``run.params`` and
    returns True when it did, and the best dual then restarts from the current one."""
    run = BatchedHyFDCA(dataset, settings, seed=seed)
    best_dual = -np.inf

    def evaluate():
        nonlocal best_dual
        cert = run.certificate()
        if trace:
            log(f"trace {trace} round {run.round}: certified "
                f"{(cert.primal - p_star) / p_star:.4g} iterate "
                f"{(cert.iterate_primal - p_star) / p_star:.4g} D(alpha_c)/P* "
                f"{cert.dual / p_star:.4g} D(alpha)/P* {cert.iterate_dual / p_star:.4g}")
        dual = cert.iterate_dual
        fall = best_dual - dual if np.isfinite(best_dual) else 0.0
        restart = adjust is not None and adjust(run, cert, fall)
        best_dual = dual if restart else max(best_dual, dual)
        return ((cert.primal - p_star) / p_star, (cert.iterate_primal - p_star) / p_star,
                cert.primal - cert.dual, fall / p_star)

    start_rel, _, _, _ = evaluate()
    certified = {t: None for t in TARGETS}
    worst, worst_iterate, dual_fall = -np.inf, -np.inf, 0.0
    rel, above_start, iterate_above = start_rel, False, False
    status = None
    while run.round < budget:
        try:
            run.step()
            if run.round % eval_every and run.round != budget:
                continue
            rel, rel_iterate, gap, fall = evaluate()
        except OverflowError:
            status = "diverged: overflow"
            break
        if not (np.isfinite(rel) and np.isfinite(gap)):
            status = "diverged: not finite"
            break
        dual_fall = max(dual_fall, fall)
        if run.round >= WARMUP:
            worst, worst_iterate = max(worst, rel), max(worst_iterate, rel_iterate)
            above_start |= rel > start_rel
            iterate_above |= rel_iterate > start_rel
            if rel_iterate > HOPELESS * start_rel:
                break
        for t in TARGETS:
            if certified[t] is None and gap <= t * p_star:
                certified[t] = run.round
        if certified[TARGETS[-1]] is not None:
            break
    if status is None:
        status = ("diverged: above start" if above_start
                  else "ok" if certified[TARGETS[-1]] is not None else ">budget")
    return dict(certified=certified, worst=worst, worst_iterate=worst_iterate,
                iterate_above_start=iterate_above, dual_fall=dual_fall, final=rel,
                status=status, rounds=run.round)


def _task(job):
    kind, fraction = PARTICIPATIONS[job.part]
    settings = HyFDCASettings.from_variant(job.variant, loss=LOSS, lam=job.lam,
                                           participation=kind, fraction=fraction,
                                           **job.overrides)
    start = time.perf_counter()
    label = (f"{job.name} {job.partition} {job.part} {job.lam:g} {job.variant} "
             f"seed {job.seed}")
    result = run_cell(_STATE[(job.name, job.partition)], settings, job.p_star, job.budget,
                      job.eval_every, job.seed, trace=label if job.trace else None)
    result.update(dataset=job.name, partition=job.partition, participation=job.part,
                  lam=job.lam, variant=job.variant, seed=job.seed, budget=job.budget,
                  wall=time.perf_counter() - start)
    return result


# --- cells kept on disk -------------------------------------------------------------------

class Job:
    """One cell: where it runs (data set, partition, participation, lam, variant, seed),
    how long (budget, eval_every), with what (``p_star``: a function until the cell is
    to run, then its value; overrides, trace) and the digest of its data."""

    def __init__(self, name, partition, part, lam, variant, seed, budget, eval_every,
                 p_star, overrides, trace, data=None):
        self.name, self.partition, self.part, self.lam = name, partition, part, lam
        self.variant, self.seed, self.budget, self.eval_every = variant, seed, budget, eval_every
        self.p_star, self.overrides, self.trace, self.data = p_star, overrides, trace, data

    def with_p_star(self):
        """This job with P* solved (or read from the cache), as a worker needs it."""
        if callable(self.p_star):
            self.p_star = self.p_star()
        return self

    @property
    def cell(self):
        return (self.name, self.partition, self.part, self.lam, self.variant, self.seed)

    def file_name(self):
        name, partition, part, lam, variant, seed = self.cell
        return f"{name}_{partition.replace(':', '-')}_{part}_{lam:g}_{variant}_seed{seed}.json"

    def fingerprint(self, code):
        """What a saved cell must match to be read back (JSON text): the cell, its
        budget, period and overrides, the toolkit's source and the cell's data."""
        return json.dumps(dict(zip(("dataset", "partition", "participation", "lam",
                                    "variant", "seed"), self.cell),
                               budget=self.budget, eval_every=self.eval_every,
                               overrides=self.overrides, code=code, data=self.data),
                          sort_keys=True, default=repr)


def cell_of(result):
    """The cell a result is of, as ``Job.cell`` names it."""
    return tuple(result[key] for key in ("dataset", "partition", "participation", "lam",
                                         "variant", "seed"))


def save_cell(folder, job, code, result):
    """Write ``result`` as ``folder/<cell>.json`` beside the cell's fingerprint (the
    certified rounds keyed by the target's ``%g``; infinities as JSON's extension
    ``-Infinity``, which Python reads back)."""
    record = dict(fingerprint=json.loads(job.fingerprint(code)),
                  result=dict(result, certified={f"{t:g}": r
                                                 for t, r in result["certified"].items()}))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / job.file_name()
    partial = path.with_name(f".{path.name}.tmp")  # renamed whole: a stop leaves no half file
    partial.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(partial, path)


def saved_cell(folder, job, code):
    """The result saved for ``job`` in ``folder``, or None where there is none, it
    cannot be read, or it was made by other code, data or settings (the reason logged;
    the cell runs again and its file is replaced)."""
    path = folder / job.file_name()
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        fingerprint, result = record["fingerprint"], record["result"]
        result["certified"] = {t: result["certified"][f"{t:g}"] for t in TARGETS}
    except (OSError, ValueError, KeyError, TypeError) as err:
        log(f"  {path.name} cannot be read back ({err!r}): the cell runs again")
        return None
    wanted = json.loads(job.fingerprint(code))
    differ = sorted(key for key in wanted.keys() | fingerprint.keys()
                    if wanted.get(key) != fingerprint.get(key))
    if differ:
        log(f"  {path.name} was made with other {', '.join(differ)}: the cell runs again")
        return None
    return result


# --- the matrix ---------------------------------------------------------------------------

def prepare(cfg):
    """Load the data sets this machine has and partition them; return the jobs, each
    with a ``p_star`` function (P* per pooled problem and lam, solved at the first call:
    grids and dealt partitions re-pool the same data, one solve; the quadrant scheme's
    bias feature makes another) and the digest of its data as the cell sees it."""
    jobs, optima = [], {}

    def optimum(name, fed, lam):
        key = (name, fed.n_features, lam)
        if key not in optima:
            optima[key] = centralized_solution(*fed.reassemble(), loss=LOSS, lam=lam,
                                               cache_dir=default_cache_dir())[0]
            log(f"{name} (d = {fed.n_features}), lam {lam:g}: P* = {optima[key]:.6f}")
        return optima[key]

    for name in cfg["datasets"]:
        if locate_dataset(DATASETS[name][0]) is None:
            log(f"skipping {name}: not on this machine (see `hyfdca datasets`)")
            continue
        X, y, image_shape = load(name)
        partitions = cfg.get("partitions") or DATASETS[name][1]
        for partition in partitions:
            fed = partition_from_spec(X, y, partition, seed=SEED, image_shape=image_shape,
                                      cap=True)
            _STATE[(name, partition)] = fed
            data = data_digest(fed) if cfg.get("save") else None
            log(f"{name} {partition}: {fed.n_clients} clients")
            for lam in cfg["lams"]:
                p_star = (lambda name=name, fed=fed, lam=lam: optimum(name, fed, lam))
                for part in cfg["participations"]:
                    for variant in cfg["variants"]:
                        for seed in cfg["seeds"]:
                            jobs.append(Job(name, partition, part, lam, variant, seed,
                                            cfg["budget"][part], cfg["eval_every"], p_star,
                                            cfg["overrides"], cfg["trace"], data))
    return jobs


def fmt_rounds(r):
    return ">budget" if r is None else str(r)


def table(results, markdown):
    def number(x):
        return "-" if not np.isfinite(x) else f"{x:.3g}"

    header = ["data", "partition", "particip.", "lam", "variant", "seed", "cert 5e-2",
              "cert 1e-2",
              "worst after 50", "iterate's worst", "dual fall", "final", "status",
              "rounds", "wall s"]
    rows = [[r["dataset"], r["partition"], r["participation"], f"{r['lam']:g}", r["variant"],
             str(r["seed"]), fmt_rounds(r["certified"][5e-2]), fmt_rounds(r["certified"][1e-2]),
             number(r["worst"]), number(r["worst_iterate"]), number(r["dual_fall"]),
             f"{r['final']:.3g}", r["status"], str(r["rounds"]), f"{r['wall']:.0f}"]
            for r in results]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(row, widths))
                     for row in [header] + rows)


def worst_rounds(results, target):
    """The most rounds any of ``results`` took to certify ``target`` (None: one did not)."""
    rounds = [r["certified"][target] for r in results]
    return None if None in rounds else max(rounds)


def seed_spread(results):
    """One line per cell run under several seeds: the worst and the median rounds to each
    target (a seed that missed counts as more than its budget)."""
    cells = {}
    for r in results:
        cells.setdefault((r["dataset"], r["partition"], r["participation"], r["lam"],
                          r["variant"]), []).append(r)
    lines = []
    for (name, partition, part, lam, variant), runs in cells.items():
        if len(runs) < 2:
            continue
        spread = []
        for target in TARGETS:
            rounds = np.array([np.inf if r["certified"][target] is None
                               else r["certified"][target] for r in runs])
            median, reached = np.median(rounds), int(np.isfinite(rounds).sum())
            spread.append(f"cert {target:g}: {reached}/{len(runs)} seeds, worst "
                          f"{fmt_rounds(worst_rounds(runs, target))}, median "
                          f"{'>budget' if not np.isfinite(median) else f'{median:g}'}")
        lines.append(f"{name} {partition} {part} {lam:g} {variant} over seeds "
                     f"{[r['seed'] for r in runs]}: " + "; ".join(spread))
    return "\n".join(lines)


def headline(results):
    """Over the default variant's cells (or, where ``--variants`` left it out, over the
    first variant's)."""
    judged = DEFAULT if any(r["variant"] == DEFAULT for r in results) else results[0]["variant"]
    if judged != DEFAULT:
        log(f"(the headline judges variant {judged}: the default did not run)")
    default = [r for r in results if r["variant"] == judged]
    diverged = sum(r["status"].startswith("diverged") for r in default)
    worst = [r["worst"] for r in default if np.isfinite(r["worst"])]
    key = [r for r in default if (r["dataset"], r["partition"], r["participation"], r["lam"])
           == ("a9a", "3x3", "0.5", 1e-4)]
    cert = fmt_rounds(worst_rounds(key, 1e-2)) if key else "not-run"
    worst_iterate = [r["worst_iterate"] for r in default if np.isfinite(r["worst_iterate"])]
    return (f"headline: diverged_cells={diverged} "
            f"worst_rel_after_50={max(worst) if worst else float('nan'):.3g} "
            f"a9a_3x3_f05_cert1e2={cert} "
            f"iterate_above_start_cells={sum(r['iterate_above_start'] for r in default)} "
            f"worst_iterate_rel_after_50="
            f"{max(worst_iterate) if worst_iterate else float('nan'):.3g} "
            f"worst_dual_fall={max(r['dual_fall'] for r in default):.3g}")


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a9a 3x3 at lam 1e-4 only (~2 min on one core)")
    parser.add_argument("--jobs", type=positive_int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--datasets", help=f"comma-separated subset of {list(DATASETS)}")
    parser.add_argument("--partitions", help="comma-separated partition specs")
    parser.add_argument("--participations", help=f"subset of {list(PARTICIPATIONS)}")
    parser.add_argument("--lams", help="comma-separated lam values")
    parser.add_argument("--variants", help="comma-separated variants (default: paper,auto)")
    parser.add_argument("--eval-every", type=positive_int, help="rounds between certificates")
    parser.add_argument("--budget", type=positive_int,
                        help="rounds per cell at every participation (default: the "
                             "matrix's budgets)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="override a settings field in every cell (e.g. step_cap=0.5, "
                             "iic=0.03, second_inner_product=False); repeatable")
    parser.add_argument("--seeds", help="comma-separated run seeds (default 0): the "
                                        "participation and index-draw streams")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--trace", action="store_true",
                        help="print every evaluation of every cell as it runs")
    parser.add_argument("--save", type=Path, metavar="DIR",
                        help="keep each finished cell as DIR/<cell>.json and read back the "
                             "cells saved there by the same code, data and settings")
    parser.add_argument("--report-only", action="store_true",
                        help="with --save: run nothing, report the cells saved in DIR")
    args = parser.parse_args(argv)
    if args.report_only and not args.save:
        parser.error("--report-only reads the cells of --save DIR: give --save")
    cfg = dict(QUICK if args.quick else FULL, save=args.save)
    for key in ("datasets", "partitions", "participations", "variants"):
        if getattr(args, key):
            cfg[key] = tuple(getattr(args, key).split(","))
    try:
        cfg["seeds"] = tuple(int(v) for v in args.seeds.split(",")) if args.seeds else (SEED,)
    except ValueError:
        parser.error(f"--seeds takes comma-separated integers, got {args.seeds!r}")
    if min(cfg["seeds"]) < 0:
        parser.error(f"--seeds must be whole numbers >= 0, got {args.seeds!r}")
    if args.lams:
        try:
            cfg["lams"] = tuple(float(v) for v in args.lams.split(","))
        except ValueError:
            parser.error(f"--lams takes comma-separated numbers, got {args.lams!r}")
        if not all(np.isfinite(lam) and lam > 0 for lam in cfg["lams"]):
            parser.error(f"--lams must be numbers > 0, got {args.lams!r}")
    if args.eval_every:
        cfg["eval_every"] = args.eval_every
    cfg["trace"] = args.trace
    if args.budget:
        cfg["budget"] = {part: args.budget for part in PARTICIPATIONS}
    cfg["overrides"] = {}
    for item in args.set:
        field, equals, value = item.partition("=")
        if not equals or not field:
            parser.error(f"--set takes FIELD=VALUE, got {item!r}")
        try:
            cfg["overrides"][field] = (int(value) if field in INTEGER_FIELDS
                                       else float(value))
        except ValueError:
            cfg["overrides"][field] = {"True": True, "False": False}.get(value, value)
    unknown = sorted(set(cfg["datasets"]) - set(DATASETS)) + \
        sorted(set(cfg["participations"]) - set(PARTICIPATIONS))
    if unknown:
        parser.error(f"unknown data set or participation: {unknown}; data sets "
                     f"{list(DATASETS)}, participations {list(PARTICIPATIONS)}")
    try:  # before any data is loaded
        for variant in cfg["variants"]:
            for part in cfg["participations"]:
                for lam in cfg["lams"]:
                    check_settings(variant, part, lam, cfg["overrides"])
    except ValueError as err:
        parser.error(f"--variants / --set: {err}")
    for partition in cfg.get("partitions") or ():
        try:
            check_partition(partition)
        except ValueError as err:
            parser.error(f"--partitions: {err}")
    t0 = time.perf_counter()
    jobs = prepare(cfg)
    if not jobs:
        log("no data set of the matrix named here is on this machine: nothing to run")
        print(NOT_RUN)
        return 0
    results, to_run = [], jobs
    if args.save:
        code = source_digest()
        saved = {job.cell: saved_cell(args.save, job, code) for job in jobs}
        results = [r for r in saved.values() if r is not None]
        to_run = [job for job in jobs if saved[job.cell] is None]
        log(f"{len(results)} of {len(jobs)} cells read back from {args.save}")
        if args.report_only:
            if to_run:
                log(f"{len(to_run)} cells not saved there (not in the table): "
                    + ", ".join(job.file_name() for job in to_run))
            to_run = []
            if not results:
                print(NOT_RUN)
                return 0
    log(f"{len(to_run)} cells on {args.jobs} processes ...")
    by_cell = {job.cell: job for job in to_run}
    pending = (job.with_p_star() for job in to_run)  # each P* solved as its first cell goes
    with mp.get_context("fork").Pool(args.jobs) if args.jobs > 1 else nullcontext() as pool:
        for result in (pool.imap_unordered(_task, pending) if pool else map(_task, pending)):
            results.append(result)
            log(f"  {result['dataset']} {result['partition']} "
                f"{result['participation']} {result['lam']:g} {result['variant']} "
                f"seed {result['seed']}: "
                f"{result['status']} ({result['rounds']} rounds, {result['wall']:.0f} s)")
            if args.save:
                save_cell(args.save, by_cell[cell_of(result)], code, result)
    order = {job.cell: i for i, job in enumerate(jobs)}
    results.sort(key=lambda r: order[cell_of(r)])
    print(table(results, args.markdown))
    spread = seed_spread(results)
    if spread:
        print(spread)
    print(f"total {time.perf_counter() - t0:.0f} s")
    print(headline(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
