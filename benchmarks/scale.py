#!/usr/bin/env python
"""Scale of the batched plaintext HyFDCA engine (issue 5): paper-sized data and clients.

For each data set and partition the script runs ``BatchedHyFDCA`` (variant "auto",
hinge, lam = 1e-4, seed 0) at participation 1.0 (variant auto-full: line search, a full
local pass) and at the fractions 0.1, 0.5, 0.9 (auto-partial on hybrid partitions:
sigma-safe + rho, iic = 0.01, at least 10 steps), and reports per configuration:

* s/round: median wall time of a round (after one warm-up round);
* updates/s: coordinate updates (drawn samples of the available clients) per second;
* ratio: HyFDCA's seconds per coordinate update over the centralized SDCA kernel's
  (``solvers.kernels.sdca_pass``, one epoch in a random order on the pooled data),
  measured in the same process;
* fixed ms (5,000 clients, full participation): the fixed cost of a round, everything
  but the coordinate updates, = F + 5,000 c: F the median round in which no client takes
  a step (every phase still runs over every client), c the cost of a client taking part
  with at least one step, apart from its steps. c comes from two rounds with the same
  work counts: every client one step (5,000 clients, 5,000 updates) and one eighth of
  the sample groups eight steps each (the clients that draw the same samples, ~625
  clients, ~5,000 updates; the same union samples, parts and aggregated updates, checked
  through the operation counts). Solving T = F + c clients + a updates over the three
  configurations (in turns on one engine, 12 cycles of 3 timed rounds each, medians;
  measured 3 times in the full run, once in ``--quick``) gives c and the cost a of an
  update. c is the first touch of a client's state each round: the per-holding arrays
  around its drawn rows, its segment of every pass, its feature ids where the engine
  keeps no global column ids (~0.7-1.1 us, spread over the passes; benchmarks/README.md
  has the profile);
* peak mem: the process's peak resident memory while the engine runs its rounds (freed
  heap given back with malloc_trim after the engine is built), minus the memory before
  the data was loaded (interpreter, libraries, compiled kernels), over the bytes of the
  pooled CSR (data + indices + indptr). The pooled matrix is dropped once partitioned;
  the federated dataset (whose block values the engine shares, see ``share_storage``)
  and all engine state are counted.

Each data set runs in its own worker process (clean peak-memory accounting). Data:
news20-like (19,996 x 1,355,191, ~9 M non-zeros) 'dealt' 3x3, 5x5, 12x12; covtype-like
(581,012 x 54) dealt 12x12; mnist-like (70,000 x 784, labels: digit < 5 vs the rest; or
Fashion-MNIST when installed, same labels) in the quadrant scheme with 5, 500, 5,000
clients. covtype 12x12 also gets the extrapolated time of the paper's 30,000 rounds.

    python benchmarks/scale.py            # everything (several minutes on 2 cores)
    python benchmarks/scale.py --quick    # news20 12x12, mnist 5,000 (1.0, 0.1), covtype
                                          # 12x12 (0.1), 2-5 rounds each; ~55 s (~70 s
                                          # while Numba compiles its cache)
    python benchmarks/scale.py --quick --fractions 0.5   # the quick plan at 0.5, not 0.1

``--fractions`` (partial participation, each in (0, 1); full participation runs beside
them where the plan has it) replaces the plan's fractions in either mode.

Last line: ``headline: update_cost_ratio=<x> round_overhead_ms_5000=<y>
peak_mem_ratio_news20=<z>``: x the largest ratio at full participation, y the fixed cost
of a round at 5,000 clients and full participation, z the news20 12x12 peak-memory ratio.
"""

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hyfdca.cli import whole_number  # noqa: E402

LAM = 1e-4
FRACTIONS = (0.1, 0.5, 0.9)
PAPER_ROUNDS = 30_000


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def _status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0


def _trim():
    """Give freed heap memory back to the OS (glibc), so that RSS counts live data only."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _reset_peak():
    gc.collect()
    _trim()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _load(name):
    from feddata.datasets import load_dataset
    if name == "mnist-like":
        from feddata.datasets import locate_dataset
        if locate_dataset("fashion-mnist") is not None:
            name = "fashion-mnist"
    ds = load_dataset(name)
    y = np.asarray(ds.y)
    if name in ("mnist-like", "fashion-mnist"):
        y = np.where(y < 5, 1.0, -1.0)
    return name, ds, y


def _sdca_seconds_per_update(X, y):
    from solvers import as_csr
    from solvers.kernels import sdca_pass
    Xc = as_csr(X)
    q = np.asarray(Xc.multiply(Xc).sum(axis=1)).ravel()
    Y = y.reshape(-1, 1).astype(np.float64)
    alpha, W = np.zeros_like(Y), np.zeros((Xc.shape[1], 1))
    order = np.random.default_rng(0).permutation(Xc.shape[0])
    lam_n = LAM * Xc.shape[0]
    sdca_pass(Xc.data, Xc.indices, Xc.indptr, Y, alpha, W, q, order[:100], 0, lam_n, 1.0, 1.0)
    start = time.perf_counter()
    sdca_pass(Xc.data, Xc.indices, Xc.indptr, Y, alpha, W, q, order, 0, lam_n, 1.0, 1.0)
    return (time.perf_counter() - start) / order.size


def _warm_kernels():
    """Compile or load every kernel on a tiny problem (kept out of the measurements)."""
    import scipy.sparse as sp

    from feddata import partition as P
    from hyfdca import BatchedHyFDCA
    from hyfdca import HyFDCASettings
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.random((60, 20)))  # no empty rows (q_i > 0)
    y = np.where(rng.random(60) < 0.5, 1.0, -1.0)
    for participation in ("full", "fraction"):
        s = HyFDCASettings.from_variant("auto", lam=0.1, participation=participation,
                                        fraction=0.5)
        run = BatchedHyFDCA(P.hybrid_grid(X, y, 2, 2), s)
        run.step(), run.step(), run.certificate()


def fixed_cost(fed, cycles):
    """{zero_step_ms, us_per_client, us_per_update, fixed_ms} of a full-participation round
    (module docstring: fixed ms). The three configurations take turns in short blocks (2
    rounds to settle, 3 timed), ``cycles`` times, so that this VM's slow spells fall on
    all of them alike."""
    from hyfdca import BatchedHyFDCA
    from hyfdca import HyFDCASettings
    settings = HyFDCASettings.from_variant("auto", lam=LAM, participation="full", H=8)
    run = BatchedHyFDCA(fed, settings, seed=0, share_storage=True)
    groups, group_of = np.unique(run.draws.stream_keys, return_inverse=True)  # same draws
    chosen = np.random.default_rng(0).choice(groups.size, groups.size // 8, replace=False)
    configs = {"none": 0, "all": 1, "eighth": np.where(np.isin(group_of, chosen), 8, 0)}
    times = {name: [] for name in configs}
    counts, clients = {}, {}
    for _ in range(cycles):
        for name, steps in configs.items():
            run.draws.H[:] = steps
            run.step(), run.step()  # the first still uses the draws made before
            for _ in range(3):
                t0 = time.perf_counter()
                record = run.step()
                times[name].append(time.perf_counter() - t0)
            # (not "add": it counts the commit, which a rejected line-search step skips)
            counts[name] = [record[f] for f in ("updates", "encrypt", "decrypt")]
            clients[name] = int(np.count_nonzero(run.draws.H))
    if not np.allclose(counts["all"], counts["eighth"], rtol=0.02):
        raise RuntimeError(f"the matched configurations do different work: {counts}")
    t = {name: float(np.median(v)) for name, v in times.items()}
    A = np.array([[1.0, clients[n], counts[n][0]] for n in ("none", "all", "eighth")])
    _, per_client, per_update = np.linalg.solve(A, [t["none"], t["all"], t["eighth"]])
    return dict(zero_step_ms=1e3 * t["none"], us_per_client=1e6 * float(per_client),
                us_per_update=1e6 * float(per_update),
                fixed_ms=1e3 * (t["none"] + fed.n_clients * float(per_client)))


def worker(name, specs, rounds, fractions, threads, with_full=True, fixed_repeats=1):
    """One data set: every partition and participation; JSON rows on stdout."""
    import numba

    from feddata import partition as P
    from hyfdca import BatchedHyFDCA
    from hyfdca import HyFDCASettings
    numba.set_num_threads(threads)
    _warm_kernels()
    gc.collect()
    _trim()
    base = _status("VmRSS")
    name, ds, y = _load(name)
    X = ds.X
    csr_bytes = (X.nnz * (8 + 4) + (X.shape[0] + 1) * 8) if hasattr(X, "nnz") else \
        X.shape[0] * X.shape[1] * (8 + 4) + (X.shape[0] + 1) * 8
    sdca = _sdca_seconds_per_update(X, y)
    rows = []
    for spec in specs:
        fed = P.partition_from_spec(X, y, spec, seed=0, image_shape=ds.image_shape)
        if spec == specs[-1]:
            del X, ds
        gc.collect()
        for fraction in ((1.0,) if with_full else ()) + tuple(fractions):
            participation = "full" if fraction == 1.0 else "fraction"
            settings = HyFDCASettings.from_variant("auto", lam=LAM, participation=participation,
                                                   fraction=fraction)
            gc.collect()
            start = time.perf_counter()
            run = BatchedHyFDCA(fed, settings, seed=0, share_storage=True)
            build = time.perf_counter() - start
            tracked = _reset_peak()  # the run's peak: heap freed while building is trimmed
            times, updates = [], []
            for _ in range(rounds + 1):
                t0 = time.perf_counter()
                record = run.step()
                times.append(time.perf_counter() - t0)
                updates.append(record["updates"])
            peak = _status("VmHWM") if tracked else float("nan")
            per_round = float(np.median(times[1:]))
            n_updates = float(np.mean(updates[1:]))
            rows.append(dict(
                data=name, partition=spec, clients=fed.n_clients, fraction=fraction,
                sec_per_round=per_round, updates_per_round=n_updates,
                updates_per_sec=n_updates / per_round,
                ratio=(per_round / max(n_updates, 1)) / sdca,
                peak_mem_ratio=(peak - base) / csr_bytes, build_s=build,
                paper_rounds_hours=per_round * PAPER_ROUNDS / 3600))
            print(json.dumps(rows[-1]), flush=True)
            del run
        if fed.n_clients == 5000 and with_full:
            for _ in range(fixed_repeats):
                print(json.dumps(fixed_cost(fed, cycles=12)), flush=True)
        del fed
    return rows


# (data set, partitions, timed rounds, fractions (None: 0.1, 0.5, 0.9), with full participation)
PLANS = {
    "full": [("news20-like", ["dealt:3x3", "dealt:5x5", "dealt:12x12"], 5, None, True),
             ("covtype-like", ["dealt:12x12"], 10, None, True),
             ("mnist-like", ["quadrants:5", "quadrants:500", "quadrants:5000"], 10, None, True)],
    "quick": [("news20-like", ["dealt:12x12"], 1, (0.1,), True),
              ("covtype-like", ["dealt:12x12"], 2, (0.1,), False),
              ("mnist-like", ["quadrants:5000"], 2, (0.1,), True)],
}


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--specs", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=positive_int, help=argparse.SUPPRESS)
    parser.add_argument("--no-full", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fixed-repeats", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--fractions", default=None,
                        help="comma-separated participation fractions in (0, 1) (default: "
                             "0.1,0.5,0.9; --quick: 0.1)")
    parser.add_argument("--threads", type=positive_int, default=1,
                        help="Numba threads (default 1: on a shared 2-core machine every "
                             "parallel launch waits for a busy core, ~8 ms)")
    args = parser.parse_args()
    fractions = None
    if args.fractions is not None:
        try:
            fractions = tuple(float(f) for f in args.fractions.split(",") if f)
        except ValueError:
            parser.error(f"--fractions takes comma-separated numbers, got {args.fractions!r}")
        if not fractions or not all(0.0 < f < 1.0 for f in fractions):
            parser.error(f"--fractions must lie in (0, 1) (full participation runs beside "
                         f"them), got {args.fractions!r}")
    if args.worker:
        worker(args.worker, args.specs.split(","), args.rounds, fractions, args.threads,
               with_full=not args.no_full, fixed_repeats=args.fixed_repeats)
        return
    plan = PLANS["quick" if args.quick else "full"]
    rows = []
    start = time.perf_counter()
    for name, specs, rounds, plan_fractions, with_full in plan:
        run_fractions = fractions or plan_fractions or FRACTIONS
        command = [sys.executable, __file__, "--worker", name, "--specs", ",".join(specs),
                   "--rounds", str(rounds), "--fractions", ",".join(map(str, run_fractions)),
                   "--threads", str(args.threads), "--fixed-repeats",
                   "1" if args.quick else "3"] + ([] if with_full else ["--no-full"])
        out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            raise SystemExit(f"worker {name} failed")
        rows += [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    fixed = [r for r in rows if "fixed_ms" in r]
    rows = [r for r in rows if "fixed_ms" not in r]
    header = ("| data | partition | clients | fraction | s/round | updates/round | updates/s "
              "| ratio to SDCA | peak mem / CSR | 30k rounds (h) |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in rows:
        print(f"| {r['data']} | {r['partition']} | {r['clients']} | {r['fraction']:g} "
              f"| {r['sec_per_round']:.4g} | {r['updates_per_round']:.0f} "
              f"| {r['updates_per_sec']:.3g} | {r['ratio']:.2f} "
              f"| {r['peak_mem_ratio']:.2f} | {r['paper_rounds_hours']:.2f} |")
    for r in fixed:
        print(f"fixed cost of a round, 5,000 clients, full participation: "
              f"{r['fixed_ms']:.2f} ms = {r['zero_step_ms']:.2f} ms without steps + 5,000 x "
              f"{r['us_per_client']:.2f} us per client taking part; an update "
              f"{r['us_per_update']:.2f} us")
    full = [r for r in rows if r["fraction"] == 1.0]
    ratio = max(r["ratio"] for r in full)
    overhead = float(np.median([r["fixed_ms"] for r in fixed])) if fixed else float("nan")
    mem = [r["peak_mem_ratio"] for r in rows
           if r["data"] == "news20-like" and r["partition"] == "dealt:12x12"]
    print(f"total {time.perf_counter() - start:.1f} s")
    print(f"headline: update_cost_ratio={ratio:.3g} "
          f"round_overhead_ms_5000={overhead:.3g} "
          f"peak_mem_ratio_news20={max(mem) if mem else float('nan'):.3g}")


if __name__ == "__main__":
    main()
