#!/usr/bin/env python
"""What encryption costs inside a HyFDCA round, per backend: a9a on a 3x3 hybrid grid at
participation 1.0 and 0.5, hinge, lam 1e-4, the default variant, seed 0.

Per backend and participation, over the measured rounds (after one warm-up round):
wall seconds per round of the one-process run (every client in turn), the encryption
seconds per round as the clients in parallel would see it (the slowest client's
encrypt/decrypt plus the server's add/multiply, ``hyfdca.profile.round_breakdown``), the
encryption share of the wall time (everyone's crypto seconds over the wall), bytes per
round (up and down, ciphertexts at the backend's size) and the ratio of ``paillier``'s
(python-paillier, one value per ciphertext) encryption seconds to the backend's. Keys:
2048-bit Paillier moduli; BFV at N = 8192 (128-bit security); the masking backend is
additive masking, not homomorphic encryption, and is shown for reference only.

The reference is ``paillier`` measured in the same run. ``fast-paillier`` and ``bfv``
pack their ciphertexts in the protocol's block layout (``hyfdca._packing``: 15 and 8,192
values per ciphertext); ``fast-paillier slots=1`` is shown beside them.

    python benchmarks/encrypted_rounds.py           # full a9a, 50 rounds (~10 hours)
    python benchmarks/encrypted_rounds.py --quick   # first 300 rows, 2 rounds (~1 min)
    python benchmarks/encrypted_rounds.py --rows 3000 --rounds 5   # anything between
    python benchmarks/encrypted_rounds.py --rounds 3 --slow-rounds 1   # full a9a (~40 min)

``--slow-rounds N``: the one-value-per-ciphertext Paillier backends (about 17 minutes per
round each on full a9a at participation 1) measure N rounds with no warm-up round instead
(the kernels are compiled by the backends before them).

Last line: ``headline: best_he_vs_paillier_round=<x> fast_paillier_vs_paillier_round=<y>``,
each the smaller of the two participation levels' encryption-time ratios (x: the best
homomorphic backend other than paillier).
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from feddata.datasets import load_dataset, locate_dataset  # noqa: E402
from feddata.partition import partition_from_spec  # noqa: E402
from hyfdca import HyFDCASettings  # noqa: E402
from hyfdca.profile import encryption_ratio, round_breakdown, round_costs_table  # noqa: E402

# (label, backend, options)
BACKENDS = (("plain", "plain", {}), ("mask", "mask", {}), ("paillier", "paillier", {}),
            ("fast-paillier slots=1", "fast-paillier", dict(slots=1)),
            ("fast-paillier", "fast-paillier", {}), ("bfv", "bfv", {}))
HOMOMORPHIC = ("paillier", "fast-paillier slots=1", "fast-paillier", "bfv")
SLOW = ("paillier", "fast-paillier slots=1")
FRACTIONS = (1.0, 0.5)
FULL = dict(rows=None, rounds=50)
QUICK = dict(rows=300, rounds=2)


def problem(rows, fraction):
    data = load_dataset("a9a")
    X, y = data.X, np.asarray(data.y, dtype=np.float64)
    if rows:
        X, y = X[:rows], y[:rows]
    fed = partition_from_spec(X, y, "3x3", seed=0)
    settings = HyFDCASettings.from_variant("auto", loss="hinge", lam=1e-4,
                                           participation="fraction", fraction=fraction)
    return fed, settings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, help="first rows of a9a (default: all)")
    parser.add_argument("--rounds", type=int, help="measured rounds (default: 50)")
    parser.add_argument("--slow-rounds", type=int,
                        help="measured rounds of the slow backends, without warm-up")
    parser.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS),
                        help="participation fractions (comma-separated; the headline is "
                             "over these)")
    args = parser.parse_args()
    if locate_dataset("a9a") is None:
        print("a9a is not on this machine (../shared/data or HYFDCA_DATA): nothing to run")
        return
    cfg = dict(QUICK if args.quick else FULL)
    cfg.update({k: v for k, v in (("rows", args.rows), ("rounds", args.rounds)) if v})
    fractions = tuple(float(f) for f in args.fractions.split(","))
    results = {}
    for fraction in fractions:
        fed, settings = problem(cfg["rows"], fraction)
        for label, backend, options in BACKENDS:
            print(f"f = {fraction}: {label} ...", flush=True)
            rounds, warmup = cfg["rounds"], 1
            if args.slow_rounds and label in SLOW:
                rounds, warmup = args.slow_rounds, 0
            r = results[fraction, label] = round_breakdown(fed, settings, crypto=backend,
                                                           crypto_options=options,
                                                           rounds=rounds, warmup=warmup)
            print(f"  {r['wall']:.4g} s per round, {r['encryption']:.4g} s encryption, "
                  f"{r['bytes'] / 1e6:.3f} MB", flush=True)
    rows = f"first {cfg['rows']} rows" if cfg["rows"] else "all rows"
    slow = (f" ({', '.join(SLOW)}: {args.slow_rounds} rounds, no warm-up)"
            if args.slow_rounds else "")
    print(f"\na9a ({rows}), 3x3, hinge, lam 1e-4, {cfg['rounds']} rounds after one warm-up"
          f"{slow}")
    ratios = {}
    for fraction in fractions:
        rows = [dict(results[fraction, label], label=label) for label, _, _ in BACKENDS]
        print(f"\nparticipation {fraction:g}")
        print(round_costs_table(rows))
        for label, _, _ in BACKENDS:
            ratios[fraction, label] = encryption_ratio(results[fraction, "paillier"],
                                                       results[fraction, label])
    best = max(min(ratios[f, b] for f in fractions) for b in HOMOMORPHIC if b != "paillier")
    fast = min(ratios[f, "fast-paillier"] for f in fractions)
    print(f"headline: best_he_vs_paillier_round={best:.1f} "
          f"fast_paillier_vs_paillier_round={fast:.1f}")


if __name__ == "__main__":
    main()
