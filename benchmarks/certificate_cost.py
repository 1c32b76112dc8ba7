#!/usr/bin/env python
"""What the certificate costs beside the rounds it certifies (issue 14: the certified
point and the stopping test need every client).

One run of the message-level engine (default variant, hinge, lam 1e-4, seed 0, plain
backend, whose operation counts are exact) per data set, partition and participation:
``--rounds`` rounds, then one certificate. Printed: the certificate's round trips,
messages each way, bytes and encryption operations (``HyFDCARun.certificate_costs``),
the rounds' means (the reference, measured in the same run), and what a certificate every
``--eval-every`` rounds adds per round, also in seconds at the reference per-value costs of
2048-bit Paillier (``hyfdca.experiments.REFERENCE_COSTS``: client-side work split over the
clients that do it, as the experiments' time model charges a round).

    python benchmarks/certificate_cost.py                    # a9a 3x3 at f = 0.5 and 0.1
    python benchmarks/certificate_cost.py --datasets sms-spam --partitions 3x3,5x5

A data set this machine does not have (a9a and SMS need ``../shared/data`` or
``HYFDCA_DATA``) is skipped with a message; the arguments are checked before any data is
loaded. Last line: ``headline: <cell> certificate_rtc_per_round=<x> encrypt_ratio=<x>
paillier_seconds_ratio=<x>`` for the first cell that ran (``not-run`` for each figure,
after the first cell asked for, where none ran): what a certificate every
``--eval-every`` rounds adds per round, over a mean round.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import hyfdca_variants as matrix  # noqa: E402  (first: it pins the BLAS to one thread)
import numpy as np  # noqa: E402
from feddata.datasets import locate_dataset  # noqa: E402
from feddata.partition import partition_from_spec  # noqa: E402
from hyfdca import HyFDCARun, HyFDCASettings  # noqa: E402
from hyfdca.experiments import REFERENCE_COSTS, encryption_seconds  # noqa: E402

FIELDS = ("rtc", "bytes_down", "bytes_up", "encrypt", "decrypt", "add", "multiply")
PAILLIER = REFERENCE_COSTS["paillier"]


def measure(fed, participation, rounds, lam):
    """(mean round record, certificate cost) of one run."""
    kind, fraction = matrix.PARTICIPATIONS[participation]
    settings = HyFDCASettings.from_variant(matrix.DEFAULT, loss=matrix.LOSS, lam=lam,
                                           participation=kind, fraction=fraction)
    run = HyFDCARun(fed, settings, crypto="plain", seed=matrix.SEED)
    records = [run.step() for _ in range(rounds)]
    run.certificate()
    mean = {f: float(np.mean([r[f] for r in records])) for f in FIELDS}
    mean["seconds"] = float(np.mean([encryption_seconds(r, PAILLIER) for r in records]))
    cost = dict(run.certificate_costs[-1])
    cost["seconds"] = encryption_seconds(cost, PAILLIER)
    return mean, cost


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="a9a",
                        help=f"comma-separated subset of {list(matrix.DATASETS)}")
    parser.add_argument("--partitions", default="3x3", help="comma-separated partition specs")
    parser.add_argument("--participations", default="0.5,0.1",
                        help=f"comma-separated subset of {list(matrix.PARTICIPATIONS)}")
    parser.add_argument("--lam", type=float, default=1e-4)
    parser.add_argument("--rounds", type=matrix.positive_int, default=10)
    parser.add_argument("--eval-every", type=matrix.positive_int, default=10)
    args = parser.parse_args(argv)
    names, partitions, participations = (getattr(args, key).split(",") for key in (
        "datasets", "partitions", "participations"))
    unknown = sorted(set(names) - set(matrix.DATASETS))
    if unknown:
        parser.error(f"unknown data sets {unknown}; choose from {list(matrix.DATASETS)}")
    unknown = sorted(set(participations) - set(matrix.PARTICIPATIONS))
    if unknown:
        parser.error(f"unknown participations {unknown}; choose from "
                     f"{list(matrix.PARTICIPATIONS)}")
    if not (np.isfinite(args.lam) and args.lam > 0):
        parser.error(f"--lam must be a number > 0, got {args.lam}")
    for partition in partitions:
        try:
            matrix.check_partition(partition)
        except ValueError as err:
            parser.error(f"--partitions: {err}")
    headline = None
    for name in names:
        if locate_dataset(matrix.DATASETS[name][0]) is None:
            print(f"skipping {name}: not on this machine (see `hyfdca datasets`)", flush=True)
            continue
        X, y, shape = matrix.load(name)
        for partition in partitions:
            fed = partition_from_spec(X, y, partition, seed=matrix.SEED, image_shape=shape,
                                      cap=True)
            for participation in participations:
                mean, cost = measure(fed, participation, args.rounds, args.lam)
                cell = f"{name}_{partition}_f{participation}"
                print(f"{cell}: certificate " + ", ".join(
                    f"{f} {cost[f]:,.0f}" for f in ("messages_down", "messages_up", *FIELDS))
                    + f", Paillier {cost['seconds']:.1f} s")
                print(f"{cell}: mean round  " + ", ".join(
                    f"{f} {mean[f]:,.1f}" for f in FIELDS) + f", Paillier {mean['seconds']:.1f} s")
                per_round = {f: cost[f] / args.eval_every for f in ("rtc", "encrypt", "seconds")}
                ratios = (per_round["rtc"], per_round["encrypt"] / mean["encrypt"],
                          per_round["seconds"] / mean["seconds"])
                print(f"{cell}: a certificate every {args.eval_every} rounds adds per round "
                      f"{ratios[0]:.2f} round trips ({ratios[0] / mean['rtc']:.0%} of a "
                      f"round's), {ratios[1]:.0%} of a round's encryptions and {ratios[2]:.0%}"
                      f" of its Paillier seconds ({per_round['seconds']:.1f} s)", flush=True)
                if headline is None:
                    headline = (f"headline: {cell} certificate_rtc_per_round={ratios[0]:.3g} "
                                f"encrypt_ratio={ratios[1]:.3g} "
                                f"paillier_seconds_ratio={ratios[2]:.3g}")
    if headline is None:
        print("no data set named is on this machine: nothing ran")
        headline = (f"headline: {names[0]}_{partitions[0]}_f{participations[0]} "
                    f"certificate_rtc_per_round=not-run encrypt_ratio=not-run "
                    f"paillier_seconds_ratio=not-run")
    print(headline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
