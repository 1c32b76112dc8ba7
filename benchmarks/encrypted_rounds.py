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

The reference is ``paillier`` measured in the same run. Where paillier is too slow to run
(full a9a: 20 minutes a round), ``paillier charged`` stands in for it: the plaintext
run's operations per party (the same as paillier's, one value per ciphertext) priced at
python-paillier's seconds per operation (``hyfdca.profile.charged_encryption``), measured
before the first run and after the last, the lower of the two per operation (a busy
machine inflates a measurement; the lower one favours paillier, so the ratios are
conservative); with both, the charge's error against the measured paillier is printed.
``fast-paillier`` and ``bfv`` pack their ciphertexts in the protocol's block layout
(``hyfdca._packing``: 24 and 8,192 values per ciphertext; fast-paillier's 83-bit slots
are sized for the hinge's dual box, ``hyfdca._encoding_range.packing_options``; 112-bit
slots, 18 per ciphertext, for the squared loss); ``fast-paillier slots=1`` is shown
beside them.

    python benchmarks/encrypted_rounds.py           # full a9a, 50 rounds (~10 hours)
    python benchmarks/encrypted_rounds.py --quick   # first 300 rows, 2 rounds (~1 min)
    python benchmarks/encrypted_rounds.py --rows 3000 --rounds 5   # anything between
    python benchmarks/encrypted_rounds.py --first-rounds 1 --fractions 0.5   # full a9a, ~35 min
    python benchmarks/encrypted_rounds.py --quick --draw-block 24   # block draws
    python benchmarks/encrypted_rounds.py --draw-block 24 \
        --backends plain,paillier-charged,mask,fast-paillier,bfv   # 50 rounds, ~40 min

``--draw-block b``: every backend's run draws whole blocks of b samples
(``settings.draw_block``); with b = 24, fast-paillier's slots, a round decrypts about
H/24 ciphertexts per vector instead of nearly every block of a client. The runs of all
backends stay bit-identical to each other (not to the runs with b = 1).

``--first-rounds N``: every backend measures rounds 0 .. N-1 with no warm-up round (a
throwaway plaintext round compiles the kernels first), so that the one-value-per-ciphertext
Paillier backends (a 22-minute set-up and minutes per round on full a9a) are compared on
the same rounds as the others. Round 0 has no dual sync to do yet, so it is cheaper than
later rounds under partial participation.

``--fractions`` picks the participation levels in every mode, ``--quick`` included.
Without a9a (``../shared/data`` or ``HYFDCA_DATA``) the script says so and prints a
headline of ``not-run``.

Last line: ``headline: paillier_over_best_he_round=<x> paillier_over_fast_paillier_round=<y>``,
each paillier's encryption seconds per round (measured if it ran, else charged) over the
backend's, the smaller over the participation levels (x: the best homomorphic backend
other than paillier, y: fast-paillier as the protocol packs it).
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
from hyfdca.profile import (charged_encryption, encryption_ratio,  # noqa: E402
                            measure_operations, round_breakdown, round_costs_table)
from hyfdca.cli import whole_number  # noqa: E402

# (label, backend, options); "paillier charged" is priced from the plain run
BACKENDS = (("plain", "plain", {}), ("paillier charged", None, {}),
            ("mask", "mask", {}), ("paillier", "paillier", {}),
            ("fast-paillier slots=1", "fast-paillier", dict(slots=1)),
            ("fast-paillier", "fast-paillier", {}), ("bfv", "bfv", {}))
HOMOMORPHIC = ("paillier", "fast-paillier slots=1", "fast-paillier", "bfv")
FRACTIONS = (1.0, 0.5)
FULL = dict(rows=None, rounds=50)
QUICK = dict(rows=300, rounds=2)
CHARGED = "paillier charged"


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def paillier_costs():
    """python-paillier's seconds per operation at 2048 bits, one value per ciphertext."""
    return {c.operation: c.per_value
            for c in measure_operations("paillier", key_bits=2048, n_values=200, repeats=3)}


def problem(rows, fraction, draw_block=1):
    data = load_dataset("a9a")
    X, y = data.X, np.asarray(data.y, dtype=np.float64)
    if rows:
        X, y = X[:rows], y[:rows]
    fed = partition_from_spec(X, y, "3x3", seed=0)
    settings = HyFDCASettings.from_variant("auto", loss="hinge", lam=1e-4,
                                           participation="fraction", fraction=fraction,
                                           draw_block=draw_block)
    return fed, settings


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=positive_int, help="first rows of a9a (default: all)")
    parser.add_argument("--rounds", type=positive_int, help="measured rounds (default: 50)")
    parser.add_argument("--first-rounds", type=positive_int,
                        help="measure rounds 0 .. N-1 of every backend, without warm-up")
    parser.add_argument("--backends", default=",".join(label for label, _, _ in BACKENDS),
                        help="backend labels to measure (comma-separated; paillier or "
                             "'paillier charged' (or paillier-charged) is needed for the "
                             "ratios, and the charge needs plain)")
    parser.add_argument("--draw-block", type=positive_int, default=1,
                        help="settings.draw_block of every backend's run (24: whole "
                             "fast-paillier ciphertexts; the runs stay bit-identical)")
    parser.add_argument("--fractions", default=",".join(str(f) for f in FRACTIONS),
                        help="participation fractions in (0, 1] (comma-separated; the "
                             "headline is over these; --quick too)")
    args = parser.parse_args()
    try:
        fractions = tuple(float(f) for f in args.fractions.split(","))
    except ValueError:
        parser.error(f"--fractions takes comma-separated numbers, got {args.fractions!r}")
    if not all(0.0 < f <= 1.0 for f in fractions):
        parser.error(f"--fractions must lie in (0, 1], got {args.fractions!r}")
    wanted = [name.strip().replace("-charged", " charged") for name in args.backends.split(",")]
    known = [label for label, _, _ in BACKENDS]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        parser.error(f"unknown backends {unknown}; choose from "
                     f"{[label.replace(' charged', '-charged') for label in known]}")
    chosen = [b for b in BACKENDS if b[0] in wanted]
    labels = [label for label, _, _ in chosen]
    if CHARGED in labels and "plain" not in labels:
        parser.error("'paillier charged' is priced from the plain run: add plain")
    if locate_dataset("a9a") is None:
        print("a9a is not on this machine (../shared/data or HYFDCA_DATA): nothing to run")
        print("headline: paillier_over_best_he_round=not-run "
              "paillier_over_fast_paillier_round=not-run")
        return
    cfg = dict(QUICK if args.quick else FULL)
    cfg.update({k: v for k, v in (("rows", args.rows), ("rounds", args.rounds)) if v})
    costs = paillier_costs() if CHARGED in labels else None
    if args.first_rounds:  # compile the kernels outside every measurement
        fed, settings = problem(300, fractions[0])
        round_breakdown(fed, settings, rounds=1, warmup=0)
    results = {}
    for fraction in fractions:
        fed, settings = problem(cfg["rows"], fraction, args.draw_block)
        for label, backend, options in chosen:
            if backend is None:
                continue  # charged: from the plain run
            print(f"f = {fraction}: {label} ...", flush=True)
            rounds, warmup = (args.first_rounds, 0) if args.first_rounds else (cfg["rounds"], 1)
            r = results[fraction, label] = round_breakdown(fed, settings, crypto=backend,
                                                           crypto_options=options,
                                                           rounds=rounds, warmup=warmup)
            print(f"  {r['wall']:.4g} s per round, {r['encryption']:.4g} s encryption, "
                  f"{r['bytes'] / 1e6:.3f} MB", flush=True)
    if costs is not None:
        later = paillier_costs()
        for when, prices in (("before", costs), ("after", later)):
            print(f"python-paillier at 2048 bits, ms per value, {when} the runs: " + ", ".join(
                f"{op} {1e3 * c:.4g}" for op, c in prices.items()))
        costs = {op: min(costs[op], later[op]) for op in costs}
        for fraction in fractions:
            results[fraction, CHARGED] = dict(
                backend=CHARGED, label=CHARGED,
                encryption=charged_encryption(results[fraction, "plain"], costs))
    rows = f"first {cfg['rows']} rows" if cfg["rows"] else "all rows"
    measured = (f"rounds 0-{args.first_rounds - 1}, no warm-up" if args.first_rounds
                else f"{cfg['rounds']} rounds after one warm-up")
    blocks = f", draw_block {args.draw_block}" if args.draw_block > 1 else ""
    print(f"\na9a ({rows}), 3x3, hinge, lam 1e-4{blocks}, {measured}")
    reference = "paillier" if "paillier" in labels else CHARGED
    for fraction in fractions:
        rows = [dict(results[fraction, label], label=label) for label in labels]
        print(f"\nparticipation {fraction:g}")
        print(round_costs_table(rows, reference=reference))
        if {"paillier", CHARGED} <= set(labels):
            paillier = results[fraction, "paillier"]
            print(f"paillier charged / measured: "
                  f"{results[fraction, CHARGED]['encryption'] / paillier['encryption']:.3f} "
                  f"(the measured run's own operations charged: "
                  f"{charged_encryption(paillier, costs) / paillier['encryption']:.3f})")
    if not {reference, "fast-paillier"} <= set(labels):
        print("no ratios without paillier (or paillier charged) and fast-paillier")
        print("headline: paillier_over_best_he_round=not-run "
              "paillier_over_fast_paillier_round=not-run")
        return
    if reference == CHARGED:
        print("reference: paillier charged (the plain run's operations per party x "
              "python-paillier's seconds per operation, the lower of two measurements)")
    ratios = {key: encryption_ratio(results[key[0], reference], r)
              for key, r in results.items()}
    best = max(min(ratios[f, b] for f in fractions) for b in HOMOMORPHIC
               if b != "paillier" and (fractions[0], b) in ratios)
    fast = min(ratios[f, "fast-paillier"] for f in fractions)
    print(f"headline: paillier_over_best_he_round={best:.1f} "
          f"paillier_over_fast_paillier_round={fast:.1f}")


if __name__ == "__main__":
    main()
