#!/usr/bin/env python
"""The same HyFDCA job in process, on Flower's simulation engine and on a loopback Flower
deployment: wall time per round and per round trip.

Job: breast cancer (embedded; the first 200 rows, standardised) on a 2x2 hybrid grid,
participation 0.5, lam 0.05, the masking backend, seed 3; ``--rounds`` rounds (default 3)
and a certificate at round 0 and at the end. Per engine: seconds per round and per round
trip, as the server measured them (the history's ``protocol_seconds`` and ``rtc``: set-up
and start-up excluded), the fastest round trip seen, and whether the final model equals
the in-process one bit for bit. The reference is the in-process run, measured in the same
invocation. Last, what a 1,000-round job costs at each measured speed and at the paper's
0.2575 s per round trip.

The deployment runs a SuperLink and four SuperNodes as subprocesses with self-signed TLS
(``hyfdca.flower.Loopback``); Flower 1.41 starts a ClientApp process per message and
polls with fixed sleeps (3 s when a SuperNode is idle, 0.5 s for replies; not
configurable), which sets its floor.

    python benchmarks/flower_rounds.py             # 3 rounds: about 8 minutes on 2 cores
    python benchmarks/flower_rounds.py --quick     # 1 round, no deployment: under a minute

The keys, party files and outputs live in a temporary folder that is removed at the end
(``--quick`` does not go with ``--rounds``).

Last line: ``headline: simulation_vs_inprocess_round=<x> deployment_vs_inprocess_round=<y>
same_bits=<yes|no>``.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from crypto import DealtKeys  # noqa: E402
from feddata import History  # noqa: E402
from feddata import partition as P  # noqa: E402
from hyfdca import HyFDCARun, HyFDCASettings, flower, train  # noqa: E402
from hyfdca.cli import whole_number  # noqa: E402

PAPER_RTT = 0.2575


def job():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    fed = P.hybrid_grid(X[:200], np.where(y[:200] == 1, 1.0, -1.0), 2, 2)
    settings = HyFDCASettings.from_variant("auto", lam=0.05, participation="fraction",
                                           fraction=0.5)
    return fed, settings


def per_round(rows):
    """(seconds per round, per round trip, fastest round trip) from history rows."""
    rounds = [r for r in rows if r["round"] > 0]
    seconds = np.array([r["protocol_seconds"] for r in rounds])
    rtc = np.array([r["rtc"] for r in rounds], dtype=float)
    return seconds.mean(), seconds.sum() / rtc.sum(), float(np.min(seconds / rtc))


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def measure(folder, fed, settings, rounds, deploy):
    """{engine: ((s per round, s per round trip, fastest round trip), same bits)}, the
    in-process history and the simulation's and deployment's wall seconds; keys, data and
    outputs under ``folder``."""
    client_keys, server_keys = flower.write_keys(folder / "keys", "mask")
    keys, masker = flower.read_client_keys(client_keys)
    evaluator = flower.read_server_keys(server_keys)

    local = HyFDCARun(fed, settings, dealt=DealtKeys(keys, evaluator, masker), seed=3)
    history = History()
    train(local, history, max_rounds=rounds, eval_every=rounds)
    results = {"in process": (per_round(history.rows()), True)}

    start = time.perf_counter()
    model, rows = flower.simulate(fed, settings, folder / "sim", client_keys=client_keys,
                                  server_keys=server_keys, max_rounds=rounds,
                                  eval_every=rounds, seed=3)
    simulation_wall = time.perf_counter() - start
    results["simulation (Ray)"] = (per_round(rows["rows"]),
                                   bool(np.array_equal(model, local.model)))

    deployment_wall = None
    if deploy:
        data = folder / "parties"
        data.mkdir()
        for k, block in enumerate(fed.blocks):
            flower.write_block(data / f"client-{k}.npz", block)
        app = flower.write_app(folder / "app", {
            "num-clients": fed.n_clients, "server-keys": str(server_keys),
            "settings": json.dumps(settings.as_dict()), "seed": 3, "frac-bits": 32,
            "max-rounds": rounds, "eval-every": rounds, "rel-tol": 0.0,
            "phase-timeout": 0.0, "output": str(folder / "deployed")})
        nodes = [{"client-id": k, "data-file": str(data / f"client-{k}.npz"),
                  "keys-file": str(client_keys)} for k in range(fed.n_clients)]
        start = time.perf_counter()
        with flower.Loopback(folder / "loopback", nodes) as loopback:
            loopback.run(app, timeout=3600)
        deployment_wall = time.perf_counter() - start
        rows = json.loads((folder / "deployed" / "history.json").read_text())["rows"]
        results["loopback deployment (TLS)"] = (
            per_round(rows), bool(np.array_equal(np.load(folder / "deployed" / "model.npy"),
                                                  local.model)))
    return results, history, simulation_wall, deployment_wall


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help="rounds of every engine (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 round, no deployment")
    args = parser.parse_args()
    if args.quick and args.rounds is not None:
        parser.error("--quick runs 1 round: give --quick or --rounds, not both")
    rounds = 1 if args.quick else args.rounds or 3
    fed, settings = job()
    # the keys (the clients' secrets among them) live only as long as the run
    with tempfile.TemporaryDirectory(prefix="hyfdca-flower-") as folder:
        results, history, simulation_wall, deployment_wall = measure(
            Path(folder), fed, settings, rounds, deploy=not args.quick)

    base = results["in process"][0][0]
    rtc = history.column("rtc")[1:].mean()
    print(f"job: 2x2, 200 samples, mask, {rounds} round(s), {rtc:.1f} round trips per "
          f"round; the simulation took {simulation_wall:.1f} s in all"
          + (f", the deployment {deployment_wall:.0f} s" if deployment_wall else ""))
    print("| engine | s per round | s per round trip | fastest round trip | vs in process | "
          "same bits | 1,000 rounds |")
    print("|---|---|---|---|---|---|---|")
    for name, ((seconds, per_rtt, fastest), same) in results.items():
        print(f"| {name} | {seconds:.4f} | {per_rtt:.4f} | {fastest:.4f} | "
              f"{seconds / base:.0f}x | {'yes' if same else 'NO'} | "
              f"{1000 * seconds / 3600:.2f} h |")
    print(f"| paper's 0.2575 s per round trip | {rtc * PAPER_RTT:.3f} | {PAPER_RTT} | - | "
          f"{rtc * PAPER_RTT / base:.0f}x | - | {1000 * rtc * PAPER_RTT / 3600:.2f} h |")
    sim = results["simulation (Ray)"][0][0] / base
    dep = results.get("loopback deployment (TLS)")
    same = all(s for _, s in results.values())
    print(f"headline: simulation_vs_inprocess_round={sim:.0f} "
          f"deployment_vs_inprocess_round={'none' if dep is None else f'{dep[0][0] / base:.0f}'} "
          f"same_bits={'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
