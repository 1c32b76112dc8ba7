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
threads, and a last sample at the final round. The reference is the sample at round
10,000 (after the warm-up), in the same run, so ``--rounds`` must be at least 20,000 (a
reference and one later sample); ``--quick`` is 20,000 rounds (about a minute) and does
not go with ``--rounds``.

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


from crypto import BACKENDS  # noqa: E402
from feddata import federated_problem  # noqa: E402
from hyfdca import FaultyTransport, HyFDCARun, HyFDCASettings, save_checkpoint  # noqa: E402

SAMPLE_EVERY, CERTIFY_EVERY, CHECKPOINT_EVERY, WARMUP = 10_000, 1_000, 5_000, 10_000
MIN_ROUNDS = WARMUP + SAMPLE_EVERY  # the reference and one sample after it


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


def show(s, gap, seconds):
    print(f"round {s['round']:>7}: rss {s['rss']:.1f} MB, heap blocks {s['blocks']}, fds "
          f"{s['fds']}, children {s['children']}, threads {s['threads']}, gap {gap:.2e}, "
          f"{seconds:.0f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"rounds to run (default 100,000; at least {MIN_ROUNDS:,})")
    parser.add_argument("--quick", action="store_true", help=f"{MIN_ROUNDS:,} rounds")
    parser.add_argument("--crypto", default="plain", choices=sorted(BACKENDS))
    args = parser.parse_args()
    if args.quick and args.rounds is not None:
        parser.error("--quick runs 20,000 rounds: give --quick or --rounds, not both")
    rounds = MIN_ROUNDS if args.quick else 100_000 if args.rounds is None else args.rounds
    if rounds < MIN_ROUNDS:
        parser.error(f"--rounds must be at least {MIN_ROUNDS:,}: the reference is the "
                     f"sample at round {WARMUP:,} (after the warm-up) and the growth needs "
                     f"a later one; got {rounds}")
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
            if run.round % SAMPLE_EVERY == 0 or run.round == rounds:
                samples.append(sample(run.round))
                show(samples[-1], gap, time.perf_counter() - start)
    reference = next(s for s in samples if s["round"] >= WARMUP)
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
