#!/usr/bin/env python
"""HyFDCA over a lossy network: rounds to a certified relative gap of 1e-2 when 0%, 10% or
30% of the messages are lost.

The message engine (plaintext: the faults act on the transport, whatever the encryption)
over ``hyfdca.FaultyTransport``: every message, down or up, is lost independently with
probability p (besides, late with p/10, duplicated with p/10). Every client is invited
each round (participation "fraction" at f = 1: the protocol for absent clients); a client
whose reply is lost is absent for the round (the round is rolled back and rerun without
it). ``retries``: how often a lost message is sent again before the client counts as
absent (0: the issue's strict rule; 2: at-least-once delivery with the message ids making
a retransmission apply once). The certificate, which needs every client, retransmits up
to 50 times.

Per cell: the first evaluated round (every 10) whose certified gap (best primal - best
dual over the certificates, as ``run_hyfdca`` stops) is at most 1e-2 of the primal, the
mean number of clients per round, the messages lost and retransmitted, wall seconds.
The reference is the same grid at 0% loss, measured in the same run.

Data: a9a (``../shared/data`` or ``HYFDCA_DATA``) on 3x3 and 3x1 grids, hinge, lam 1e-4,
the default variant, seed 0; budget 3,000 rounds. ``--quick``: the first 5,000 rows,
lam 1e-3, budget 1,000 (about a minute).

    python benchmarks/faults.py
    python benchmarks/faults.py --quick

Without a9a the script says so and the headline's figures read ``not-run``. Last line:
``headline: rounds_ratio_3x3_loss30=<rounds at 30% / at 0%, retries 2>
rounds_ratio_3x3_loss10=<...> uncertified=<cells that did not reach 1e-2>``.
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from feddata.datasets import load_dataset, locate_dataset  # noqa: E402
from feddata.partition import partition_from_spec  # noqa: E402
from hyfdca import FaultyTransport, HyFDCASettings, run_hyfdca  # noqa: E402
from hyfdca.cli import whole_number  # noqa: E402

SEED, TARGET, EVAL_EVERY = 0, 1e-2, 10
LOSSES = (0.0, 0.1, 0.3)
RETRIES = (0, 2)
FULL = dict(rows=None, lam=1e-4, budget=3000, grids=("3x3", "3x1"))
QUICK = dict(rows=5000, lam=1e-3, budget=1000, grids=("3x3", "3x1"))


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def cell(job):
    grid, loss, retries, cfg = job
    data = load_dataset("a9a")
    X, y = data.X, np.asarray(data.y, dtype=np.float64)
    if cfg["rows"]:
        X, y = X[:cfg["rows"]], y[:cfg["rows"]]
    fed = partition_from_spec(X, y, grid, seed=SEED)
    settings = HyFDCASettings.from_variant("auto", lam=cfg["lam"], participation="fraction",
                                           fraction=1.0)

    def transport(clients, evaluator, record):
        return FaultyTransport(clients, evaluator, record, drop=loss, delay=loss / 10,
                               duplicate=loss / 10, retries=retries, seed=SEED)

    start = time.perf_counter()
    run, history = run_hyfdca(fed, settings, max_rounds=cfg["budget"], eval_every=EVAL_EVERY,
                              rel_tol=TARGET, seed=SEED, transport=transport)
    primal, dual = history.certified()
    reached = primal - dual <= TARGET * primal
    faults = run.transport.faults
    return dict(grid=grid, loss=loss, retries=retries, rounds=run.round if reached else None,
                clients=float(np.mean([r["available"] for r in history.rounds])),
                of=fed.n_clients, lost=faults.dropped + faults.delayed,
                retransmitted=faults.retransmitted, gap=(primal - dual) / primal,
                wall=time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=positive_int, default=2,
                        help="cells run at once in worker processes")
    args = parser.parse_args()
    if locate_dataset("a9a") is None:
        print("a9a is not on this machine (../shared/data or HYFDCA_DATA): nothing to run")
        print("headline: rounds_ratio_3x3_loss30=not-run rounds_ratio_3x3_loss10=not-run "
              "uncertified=not-run")
        return
    cfg = QUICK if args.quick else FULL
    jobs = [(g, loss, r, cfg) for g in cfg["grids"] for loss in LOSSES
            for r in (RETRIES if loss else (0,))]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(cell, jobs))
    print(f"a9a{' first ' + str(cfg['rows']) + ' rows' if cfg['rows'] else ''}, lam "
          f"{cfg['lam']:g}, budget {cfg['budget']} rounds, certified relative gap {TARGET:g}")
    print("| grid | messages lost | retries | rounds to 1e-2 | vs 0% | clients per round | "
          "lost | retransmitted | final gap | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = {r["grid"]: r["rounds"] for r in results if r["loss"] == 0}
    ratio = {}
    for r in results:
        rounds = r["rounds"] if r["rounds"] is not None else f">{cfg['budget']}"
        rel = (r["rounds"] / base[r["grid"]]) if r["rounds"] and base[r["grid"]] else None
        ratio[r["grid"], r["loss"], r["retries"]] = rel
        print(f"| {r['grid']} | {r['loss']:.0%} | {r['retries']} | {rounds} | "
              f"{'-' if rel is None else f'{rel:.2f}'} | {r['clients']:.2f} of {r['of']} | "
              f"{r['lost']} | {r['retransmitted']} | {r['gap']:.2e} | {r['wall']:.0f} |")
    missed = sum(r["rounds"] is None for r in results)

    def show(key):
        value = ratio.get(key)
        return "none" if value is None else f"{value:.2f}"
    print(f"headline: rounds_ratio_3x3_loss30={show(('3x3', 0.3, 2))} "
          f"rounds_ratio_3x3_loss10={show(('3x3', 0.1, 2))} uncertified={missed}")


if __name__ == "__main__":
    main()
