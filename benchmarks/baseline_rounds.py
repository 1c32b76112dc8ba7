#!/usr/bin/env python
"""What a round of the convex baselines (FedAvg, HyFEM-linear) costs, with the server's
average in Numba kernels (``baselines._server_average``) against the NumPy form it
replaced (the reference, measured in the same run, in this script): the paper
experiments' equal-time runs take up to 20,000 baseline rounds per method and setting,
most of their hours on news20-like (1.35M features).

Each method runs ``--rounds`` rounds from w = 0 at the experiments' defaults for the
hinge loss (one local epoch, iic = 1; the Pegasos step a / (b + t), a = 1 / (lam + mu),
b = 10; HyFEM's mu = 0.5), lam 1e-4, twice, alternating the two forms, and the best time
of each is kept; the two forms' models must be the same bits.

    python benchmarks/baseline_rounds.py                      # news20-like dealt:12x12
    python benchmarks/baseline_rounds.py --partition dealt:3x3 --fraction 0.9

Last line: ``headline: fedavg_round_ms=<x> numpy_form_ms=<x> speedup=<x>
hyfem_speedup=<x> same_bits=<True|False>``.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
from baselines.fedavg import FedAvg, HyFEMLinear  # noqa: E402
from feddata import federated_problem  # noqa: E402

LAM = 1e-4


class NumPyAverage:
    """The server's average as NumPy fancy indexing (the form before the kernels)."""

    @staticmethod
    def _add_client(total, weight, feature_ids, w_k, c_k):
        total[feature_ids] += c_k * w_k
        weight[feature_ids] += c_k

    def _divide_covered(self, total, weight):
        covered = weight > 0
        self.w[covered] = total[covered] / weight[covered]


class FedAvgNumPy(NumPyAverage, FedAvg):
    pass


class HyFEMNumPy(NumPyAverage, HyFEMLinear):
    pass


def timed(cls, fed, params, fraction, rounds):
    """(ms per round, final model) of ``rounds`` rounds of ``cls``."""
    model = cls(fed, loss="hinge", lam=LAM, participation="fraction", fraction=fraction,
                seed=0, **params)
    start = time.perf_counter()
    for _ in range(rounds):
        model.step()
    return 1e3 * (time.perf_counter() - start) / rounds, model.w


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False,
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="news20-like")
    parser.add_argument("--partition", default="dealt:12x12")
    parser.add_argument("--fraction", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    if not 0 < args.fraction <= 1 or args.rounds < 1:
        parser.error("--fraction must be in (0, 1] and --rounds >= 1")
    fed = federated_problem(args.dataset, args.partition)[0]   # the experiments' 75%
    print(f"{args.dataset} {args.partition}: {fed}; fraction {args.fraction}, "
          f"{args.rounds} rounds, best of 2")
    figures, same = {}, True
    for name, kernels, numpy_form in (("FedAvg", FedAvg, FedAvgNumPy),
                                      ("HyFEM", HyFEMLinear, HyFEMNumPy)):
        mu = {"HyFEM": 0.5}.get(name, 0.0)
        params = dict(iic=1.0, a=1.0 / (LAM + mu), b=10.0, **({"mu": mu} if mu else {}))
        best = {kernels: np.inf, numpy_form: np.inf}
        models = {}
        for _ in range(2):
            for cls in (numpy_form, kernels):
                ms, models[cls] = timed(cls, fed, params, args.fraction, args.rounds)
                best[cls] = min(best[cls], ms)
        same &= bool(np.array_equal(models[kernels], models[numpy_form]))
        figures[name] = best[kernels], best[numpy_form]
        print(f"{name}: {best[kernels]:.1f} ms per round (NumPy form {best[numpy_form]:.1f} "
              f"ms): {best[numpy_form] / best[kernels]:.2f}x; same bits: "
              f"{np.array_equal(models[kernels], models[numpy_form])}")
    fedavg, hyfem = figures["FedAvg"], figures["HyFEM"]
    print(f"headline: fedavg_round_ms={fedavg[0]:.1f} numpy_form_ms={fedavg[1]:.1f} "
          f"speedup={fedavg[1] / fedavg[0]:.2f} hyfem_speedup={hyfem[1] / hyfem[0]:.2f} "
          f"same_bits={same}")


if __name__ == "__main__":
    main()
