#!/usr/bin/env python
"""Soak: 100,000 rounds of a small HyFDCA job with faults on; memory, file descriptors and
processes must stay flat.

The message engine on breast cancer (embedded, 569 x 30) as a 2x2 hybrid grid, lam 1e-2,
every client invited (participation "fraction" at f = 1), over ``FaultyTransport`` with
10% of messages lost, 2% late, 5% duplicated and 1% client crashes per phase, one
retransmission; a certificate every 1,000 rounds and a checkpoint (atomic files,
``hyfdca._checkpoint``) every 5,000, into one folder that keeps the newest two. The loop
calls ``run.step()`` itself, so that no per-round history accumulates (a History holds
one record per round by design).

Printed every 10,000 rounds: resident memory (VmRSS), Python heap blocks
(``sys.getallocatedblocks``), open file descriptors (/proc/self/fd), child processes,
threads. The reference is the first sample after a 10,000-round warm-up, in the same run.
``--rounds`` shortens it (``--quick``: 20,000 rounds, about a minute).

    python benchmarks/soak.py
    python benchmarks/soak.py --quick
    python benchmarks/soak.py --crypto mask

Last line: ``headline: rss_growth_mb=<last - reference> fd_growth=<...>
child_growth=<...> rounds=<n> gap=<last certified relative gap>``.
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from feddata import federated_problem  # noqa: E402
from hyfdca import FaultyTransport, HyFDCARun, HyFDCASettings, save_checkpoint  # noqa: E402

SAMPLE_EVERY, CERTIFY_EVERY, CHECKPOINT_EVERY, WARMUP = 10_000, 1_000, 5_000, 10_000


def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children():
    me = str(os.getpid())
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().split(") ", 1)[1].split()[1] == me:
                    count += 1
            except OSError:
                continue
    return count


def sample(round_):
    return dict(round=round_, rss=rss_mb(), blocks=sys.getallocatedblocks(),
                fds=len(os.listdir("/proc/self/fd")), children=children(),
                threads=threading.active_count())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--crypto", default="plain")
    args = parser.parse_args()
    rounds = 20_000 if args.quick else args.rounds
    fed, _, _ = federated_problem("breast_cancer", "2x2", seed=0)
    settings = HyFDCASettings.from_variant("auto", lam=1e-2, participation="fraction",
                                           fraction=1.0)
    run = HyFDCARun(fed, settings, crypto=args.crypto, transport=lambda c, e, r:
                    FaultyTransport(c, e, r, drop=0.1, delay=0.02, duplicate=0.05,
                                    crash=0.01, retries=1, seed=0))
    samples, gap = [sample(0)], float("nan")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        while run.round < rounds:
            run.step()
            if run.round % CERTIFY_EVERY == 0:
                primal, dual, w = run.certificate()[:3]
                gap = (primal - dual) / primal
            if run.round % CHECKPOINT_EVERY == 0:
                save_checkpoint(folder, dict(round=run.round), w, run.checkpoint_files())
            if run.round % SAMPLE_EVERY == 0:
                samples.append(sample(run.round))
                s = samples[-1]
                print(f"round {s['round']:>7}: rss {s['rss']:.1f} MB, heap blocks "
                      f"{s['blocks']}, fds {s['fds']}, children {s['children']}, threads "
                      f"{s['threads']}, gap {gap:.2e}, {time.perf_counter() - start:.0f} s",
                      flush=True)
    reference = next((s for s in samples if s["round"] >= WARMUP), samples[0])
    last = samples[-1]
    faults = run.transport.faults
    print(f"faults: {faults}")
    print(f"reference: round {reference['round']}; last: round {last['round']}")
    print(f"headline: rss_growth_mb={last['rss'] - reference['rss']:.1f} "
          f"fd_growth={last['fds'] - reference['fds']} "
          f"child_growth={last['children'] - reference['children']} rounds={run.round} "
          f"gap={gap:.2e}")


if __name__ == "__main__":
    main()
