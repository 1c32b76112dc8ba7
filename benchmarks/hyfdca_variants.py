#!/usr/bin/env python
"""HyFDCA variants on a9a (hinge, lam = 1e-4): rounds and simulated time to a target.

For every partition (P sample groups x Q feature groups, ``hybrid_grid``) and participation
model (full; a random half of the clients each round) the script runs

* ``paper``       the published method, at each H of a small grid (the best is reported,
                  with its H: fewest rounds to 5e-2, then to 1e-2, then lowest final loss);
* ``sigma-safe``, ``rho``, ``line-search``, ``combined``   at their default iic;
* ``auto``        the default (``auto-full`` under full participation or on horizontal
                  data, ``auto-partial`` otherwise), at its default iic (1 and 0.01) and at
                  an iic sweep (full: 0.1, 0.3, 3.0; half participation: 0.03, 0.1).

Each run reports the rounds (and simulated seconds: slowest client's compute + RTC x
0.2575 s, ``History.simulated_time``) to reach a relative loss (P(w(alpha)) - P*)/P* <= 5e-2
and <= 1e-2, P* from ``solvers.reference_optimum`` (computed once). The certificate is
evaluated every ``--eval-every`` rounds, so rounds to target are resolved to that
granularity (the first evaluated round at or under the target). A run stops when it has
reached 1e-2, when it diverges (gap not finite, or relative loss > ``--diverge-at``), or at
the round budget (full mode: 1,000 rounds at full participation, 2,000 at half; the paper on
3x3 at full participation gets 5,000 so that the headline ratio can be decided); a target
not reached is reported as ``>budget``. "final" is the relative loss at the last evaluation
(the stopping round). The primal P(w(alpha)) is noisy from round to round
(docs/algorithm.md section 5, lesson (d)): a first hit of a target can be a lucky iterate
followed by much larger values. So the table also gives "cert. 5e-2", the first evaluated
round whose certificate proves the target
(gap <= 5e-2 P*, hence P - P* <= 5e-2 P* and P* - D <= 5e-2 P*); runs continue until both
1e-2 (relative loss) and the certified 5e-2 are reached.

The certificate costs about as much as several rounds' compute on full a9a, so the full mode
evaluates it every 10 rounds and the quick mode every 5.

Run from the repository root:

    python benchmarks/hyfdca_variants.py            # full a9a, all partitions (~15-20 min)
    python benchmarks/hyfdca_variants.py --quick    # 5,000-row subsample, 3x3 (< 60 s)
    # the default alone at half participation (~40 s):
    python benchmarks/hyfdca_variants.py --participations 0.5 --variants auto \
        --auto-iic-partial ''

Quick mode: a 5,000-row subsample (P* recomputed), 3x3 only: the paper's H grid and the
default at full participation (600 rounds; paper 3,000), the default at half (600).

The last output line is ``headline: paper_rounds_3x3=<a> default_rounds_3x3=<b>``: rounds
to 5e-2 on 3x3 at full participation for the paper's best H and for the default (auto).
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from feddata.history import History  # noqa: E402
from hyfdca import HyFDCARun  # noqa: E402
from hyfdca import HyFDCASettings  # noqa: E402
from feddata.datasets import load_a9a  # noqa: E402
from feddata.partition import hybrid_grid  # noqa: E402
from solvers import reference_optimum  # noqa: E402

LOSS, LAM = "hinge", 1e-4
LATENCY = 0.2575
TARGETS = (5e-2, 1e-2)
SEED = 0

FULL = dict(partitions=((3, 1), (1, 3), (3, 3), (5, 5)), participations=(1.0, 0.5),
            paper_H=(10, 50, 200), variants=("sigma-safe", "rho", "line-search", "combined"),
            auto_iic={1.0: (0.1, 0.3, 3.0), 0.5: (0.03, 0.1)},
            budget={1.0: 1000, 0.5: 2000}, paper_budget_3x3=5000, eval_every=10,
            subsample=None)
# Quick: a 5,000-row subsample; 3x3 at full participation (paper and the default: the
# headline), plus the default at half participation.
QUICK = dict(partitions=((3, 3),), participations=(1.0, 0.5), paper_H=(10, 50, 200),
             variants=(), auto_iic={1.0: (), 0.5: ()}, budget={1.0: 600, 0.5: 600},
             paper_budget_3x3=3000, eval_every=5, subsample=5000, skip_paper_partial=True)

_STATE = {}  # filled before the workers fork: data sets by partition, P*


def log(message):
    print(message, flush=True)


# --- one run ------------------------------------------------------------------------------

def run_to_target(dataset, settings, p_star, max_rounds, eval_every, diverge_at, seed=SEED):
    """The loop of ``hyfdca.run_hyfdca`` (same steps, same certificate, same History),
    stopping early once the last targets are met or the run diverges (a fixed-point
    overflow, which ``run_hyfdca`` raises, counts as divergence here)."""
    run = HyFDCARun(dataset, settings, seed=seed)
    history = History(p_star=p_star)
    history.add_evaluation(0, *run.certificate()[:2])
    reached = {t: None for t in TARGETS}
    certified = None  # first round with gap <= 5e-2 P*: proves (P - P*)/P* <= 5e-2
    diverged = False
    while run.round < max_rounds:
        start = time.perf_counter()
        try:
            record = run.step()
        except OverflowError:  # iterates left the fixed-point range: diverged
            diverged = True
            break
        record["protocol_seconds"] = time.perf_counter() - start
        history.add_round(record)
        if run.round % eval_every and run.round != max_rounds:
            continue
        try:
            primal, dual, _ = run.certificate()
        except OverflowError:
            diverged = True
            break
        history.add_evaluation(run.round, primal, dual)
        ev = history.evaluations[run.round]
        if not (np.isfinite(ev["gap"]) and np.isfinite(ev["relative_loss"])) \
                or ev["relative_loss"] > diverge_at:
            diverged = True
            break
        for t in TARGETS:
            if reached[t] is None and ev["relative_loss"] <= t:
                reached[t] = run.round
        if certified is None and ev["gap"] <= TARGETS[0] * p_star:
            certified = run.round
        if reached[TARGETS[-1]] is not None and certified is not None:
            break
    sim = history.simulated_time(LATENCY)  # index r = after r rounds
    last = history.last_evaluation
    return dict(rounds={t: reached[t] for t in TARGETS}, certified=certified,
                seconds={t: (float(sim[r]) if r is not None else None)
                         for t, r in reached.items()},
                final=float(last["relative_loss"]), final_gap=float(last["gap"]),
                stopped=run.round, diverged=diverged,
                H=[c.H for c in run.clients])


def _task(job):
    (P, Q), part, label, variant, overrides, budget, eval_every, diverge_at = job
    participation = dict(participation="full") if part == 1.0 else \
        dict(participation="fraction", fraction=part)
    settings = HyFDCASettings.from_variant(variant, loss=LOSS, lam=LAM, **participation,
                                           **overrides)
    start = time.perf_counter()
    result = run_to_target(_STATE["data"][(P, Q)], settings, _STATE["p_star"], budget,
                           eval_every, diverge_at)
    result.update(partition=f"{P}x{Q}", participation=part, label=label, variant=variant,
                  overrides=overrides, wall=time.perf_counter() - start,
                  iic=settings.iic, sigma=settings.bind(_STATE["data"][(P, Q)]).sigma_bound)
    return result


# --- the plan -----------------------------------------------------------------------------

def plan(cfg, eval_every, diverge_at):
    jobs = []
    for pq in cfg["partitions"]:
        for part in cfg["participations"]:
            budget = cfg["budget"][part]
            common = (budget, eval_every, diverge_at)
            if "paper" in cfg["names"] and not (part < 1.0 and cfg.get("skip_paper_partial")):
                # 3x3 at full participation (the headline): a longer budget for the paper,
                # so that "10x fewer rounds than the paper" can be decided
                paper = (cfg["paper_budget_3x3"] if (pq, part) == ((3, 3), 1.0) else budget,
                         eval_every, diverge_at)
                for H in cfg["paper_H"]:
                    jobs.append((pq, part, f"paper H={H}", "paper", dict(H=H)) + paper)
            for v in cfg["variants"]:
                if v in cfg["names"]:
                    jobs.append((pq, part, v, v, {}) + common)
            if "auto" in cfg["names"]:
                jobs.append((pq, part, "auto (default)", "auto", {}) + common)
            for iic in cfg["auto_iic"][part]:
                jobs.append((pq, part, f"auto iic={iic:g}", "auto", dict(iic=iic)) + common)
    # longest first (big grids, line-search variants, half participation) for the pool
    def cost(job):
        (P, Q), part, label, variant = job[:4]
        heavy = variant in ("line-search", "combined") or variant == "auto" and part == 1.0
        return (P + Q) * job[5] * (3 if heavy else 1)
    order = sorted(range(len(jobs)), key=lambda i: -cost(jobs[i]))
    return jobs, order


# --- reporting ----------------------------------------------------------------------------

def fmt_rounds(r, res):
    if r is not None:
        return str(r)
    return "diverged" if res["diverged"] else ">budget"


def fmt_seconds(s, res):
    if s is not None:
        return f"{s:.1f}"
    return "-" if res["diverged"] else ">budget"


def fmt_loss(x):
    return f"{x:.2e}" if np.isfinite(x) else str(x)


def paper_best(results):
    def key(r):
        a = r["rounds"][TARGETS[0]]
        b = r["rounds"][TARGETS[1]]
        return (a is None, a or 0, b is None, b or 0, r["diverged"],
                r["final"] if np.isfinite(r["final"]) else math.inf)
    return min(results, key=key)


def table(results, cfg, markdown):
    head = ["partition", "part.", "variant", "H/client", "rounds 5e-2", "rounds 1e-2",
            "cert. 5e-2", "sim s 5e-2", "sim s 1e-2", "final rel", "stop", "diverged"]
    rows = []
    for pq in cfg["partitions"]:
        for part in cfg["participations"]:
            group = [r for r in results
                     if r["partition"] == f"{pq[0]}x{pq[1]}" and r["participation"] == part]
            papers = [r for r in group if r["variant"] == "paper"]
            shown = []
            if papers:
                best = paper_best(papers)
                others = ", ".join(f"{r['overrides']['H']}: " + (
                    "div" if r["diverged"] else fmt_loss(r["final"]))
                    for r in papers if r is not best)
                shown.append((best, f"paper best H={best['overrides']['H']}"
                              + (f" (others: {others})" if others else "")))
            shown += [(r, r["label"]) for r in group if r["variant"] != "paper"]
            for r, label in shown:
                Hs = sorted(set(r["H"]))
                rows.append([f"{pq[0]}x{pq[1]}", f"{part:g}", label,
                             str(Hs[0]) if len(Hs) == 1 else f"{Hs[0]}-{Hs[-1]}",
                             fmt_rounds(r["rounds"][5e-2], r), fmt_rounds(r["rounds"][1e-2], r),
                             fmt_rounds(r["certified"], r),
                             fmt_seconds(r["seconds"][5e-2], r),
                             fmt_seconds(r["seconds"][1e-2], r), fmt_loss(r["final"]),
                             str(r["stopped"]), "yes" if r["diverged"] else "no"])
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return "\n".join(out)


def headline(results):
    group = [r for r in results if r["partition"] == "3x3" and r["participation"] == 1.0]
    papers = [r for r in group if r["variant"] == "paper"]
    default = [r for r in group if r["label"] == "auto (default)"]
    a = fmt_rounds(paper_best(papers)["rounds"][5e-2], paper_best(papers)) if papers else "nan"
    b = fmt_rounds(default[0]["rounds"][5e-2], default[0]) if default else "nan"
    return f"headline: paper_rounds_3x3={a} default_rounds_3x3={b}"


# --- main ---------------------------------------------------------------------------------

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="5,000-row subsample, 3x3 only, 600 rounds (< 60 s)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="worker processes (default: 2)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="rounds between certificates (default: 10 full, 5 quick)")
    parser.add_argument("--diverge-at", type=float, default=1e3,
                        help="relative loss above which a run counts as diverged")
    parser.add_argument("--partitions", default=None,
                        help="comma-separated PxQ list overriding the mode's partitions")
    parser.add_argument("--participations", default=None,
                        help="comma-separated subset of 1,0.5")
    parser.add_argument("--variants", default=None,
                        help="comma-separated subset of paper, sigma-safe, rho, line-search, "
                             "combined, auto (auto: the default and its iic sweep)")
    parser.add_argument("--auto-iic-full", default=None,
                        help="comma-separated iic sweep of auto at full participation")
    parser.add_argument("--auto-iic-partial", default=None,
                        help="comma-separated iic sweep of auto at participation 0.5")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    cfg["names"] = {"paper", "auto", *cfg["variants"]}
    if args.partitions:
        cfg["partitions"] = tuple(tuple(int(x) for x in p.split("x"))
                                  for p in args.partitions.split(","))
    if args.participations:
        cfg["participations"] = tuple(float(x) for x in args.participations.split(","))
        if not set(cfg["participations"]) <= {1.0, 0.5}:
            parser.error("--participations: only 1 and 0.5 are benchmarked")
    if args.variants:
        cfg["names"] = set(args.variants.split(","))
        cfg["variants"] = tuple(v for v in FULL["variants"] if v in cfg["names"])
    sweep = dict(cfg["auto_iic"])
    for part, text in ((1.0, args.auto_iic_full), (0.5, args.auto_iic_partial)):
        if text is not None:
            sweep[part] = tuple(float(x) for x in text.split(",") if x)
    cfg["auto_iic"] = sweep
    if "auto" not in cfg["names"]:
        cfg["auto_iic"] = {1.0: (), 0.5: ()}
    eval_every = args.eval_every or cfg["eval_every"]

    t0 = time.perf_counter()
    data = load_a9a()
    X, y = data.X, data.y
    if cfg["subsample"]:
        rows = np.sort(np.random.default_rng(SEED).choice(X.shape[0], cfg["subsample"],
                                                           replace=False))
        X, y = X[rows], y[rows]
    p_star, _ = reference_optimum(X, y, loss=LOSS, lam=LAM)
    _STATE["p_star"] = p_star
    _STATE["data"] = {pq: hybrid_grid(X, y, *pq) for pq in cfg["partitions"]}
    log(f"a9a{' subsample' if cfg['subsample'] else ''}: {X.shape[0]} x {X.shape[1]}, "
        f"hinge, lam={LAM:g}, P*={p_star:.6f}; certificate every {eval_every} rounds "
        f"(rounds to target resolved to {eval_every}); budgets "
        + ", ".join(f"participation {p:g}: {cfg['budget'][p]} rounds"
                    for p in cfg["participations"])
        + f" (paper on 3x3 at full participation: {cfg['paper_budget_3x3']})"
        + f"; latency {LATENCY} s per RTC; set-up {time.perf_counter() - t0:.1f} s")

    jobs, order = plan(cfg, eval_every, args.diverge_at)
    results = [None] * len(jobs)
    if args.jobs > 1:
        with mp.get_context("fork").Pool(args.jobs) as pool:
            it = pool.imap_unordered(_indexed, [(i, jobs[i]) for i in order])
            for i, res in it:
                results[i] = res
                _progress(res, t0)
    else:
        for i in order:
            results[i] = _task(jobs[i])
            _progress(results[i], t0)

    log("")
    log(table(results, cfg, args.markdown))
    log(f"\ntotal wall {time.perf_counter() - t0:.1f} s")
    log(headline(results))


def _indexed(item):
    i, job = item
    return i, _task(job)


def _progress(res, t0):
    log(f"[{time.perf_counter() - t0:6.1f} s] {res['partition']} part={res['participation']:g} "
        f"{res['label']}: 5e-2@{fmt_rounds(res['rounds'][5e-2], res)} "
        f"1e-2@{fmt_rounds(res['rounds'][1e-2], res)} "
        f"cert5e-2@{fmt_rounds(res['certified'], res)} final={fmt_loss(res['final'])} "
        f"stop={res['stopped']} ({res['wall']:.1f} s)")


if __name__ == "__main__":
    main()
