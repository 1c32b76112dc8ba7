#!/usr/bin/env python
"""A probe of certificate-driven damping under partial participation (issue 14; not a rule
of the package, docs/algorithm.md section 6, thirteenth round).

One regime-matrix cell (hinge, seed 0, the default variant, the batched engine) runs twice:
as it is (the reference) and damped. Both certify every ``--eval-every`` rounds; the
damped run doubles the local curvature sigma (s = sigma q_i / (lam N) and the margin
correction rho_i sigma x_i^k . u, docs/algorithm.md section 3) whenever a certificate
shows the iterate's dual D(alpha) more than ``--tol`` times the certified gap
P(w_c) - D(alpha_c) below its best since the last doubling, at most once per
``--cooldown`` rounds. The certificate needs every client, so such a rule would need the
all-client exchange that the stopping test already makes, and the iterates would depend on
when it is made. Per run: rounds to a certified 5e-2 and 1e-2, the iterate's worst relative
loss after round 50, the largest fall of D(alpha) below its best over P*, the certified
point's final relative loss, the final sigma and the rounds where it doubled.

    python benchmarks/damping_probe.py --dataset fashion-mnist --partition quadrants:5 \\
        --lam 1e-4 --participation 0.1 --budget 10000

Without the data set (Fashion-MNIST: ``apt-get install -y dataset-fashion-mnist``; a9a
and SMS: ``../shared/data`` or ``HYFDCA_DATA``) the script says so and every figure of the
headline reads ``not-run``. Last line: ``headline: <cell> reference_final=<x>
damped_final=<x> reference_dual_fall=<x> damped_dual_fall=<x> doublings=<n>``.
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import hyfdca_variants as matrix  # noqa: E402
from feddata.datasets import locate_dataset  # noqa: E402
from feddata.partition import partition_from_spec  # noqa: E402
from hyfdca import HyFDCASettings  # noqa: E402
from solvers import centralized_solution, default_cache_dir  # noqa: E402


class Doubling:
    """The probe's rule, a ``run_cell`` adjustment: double sigma when D(alpha) has
    fallen more than ``tol`` times the certified gap below its best since the last
    doubling, at most once per ``cooldown`` rounds."""

    def __init__(self, tol, cooldown=0):
        self.tol, self.cooldown = tol, cooldown
        self.rounds, self.sigma = [], None

    def __call__(self, engine, cert, fall):
        self.sigma = engine.params.sigma
        last = self.rounds[-1] if self.rounds else -np.inf
        if (not fall > self.tol * (cert.primal - cert.dual)
                or engine.round - last < self.cooldown):
            return False
        self.sigma = 2.0 * engine.params.sigma
        engine.params = engine.params._replace(sigma=self.sigma)
        self.rounds.append(engine.round)
        return True


def main(argv=None):
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="fashion-mnist", choices=list(matrix.DATASETS))
    parser.add_argument("--partition", default="quadrants:5")
    parser.add_argument("--lam", type=float, default=1e-4)
    parser.add_argument("--participation", default="0.1", choices=list(matrix.PARTICIPATIONS))
    parser.add_argument("--budget", type=matrix.positive_int, default=10000)
    parser.add_argument("--eval-every", type=matrix.positive_int, default=10)
    parser.add_argument("--tol", type=float, default=0.01)
    parser.add_argument("--cooldown", type=int, default=0)
    args = parser.parse_args(argv)
    if not (np.isfinite(args.lam) and args.lam > 0):
        parser.error(f"--lam must be a number > 0, got {args.lam}")
    if not args.tol >= 0:
        parser.error(f"--tol must be a number >= 0, got {args.tol}")
    if args.cooldown < 0:
        parser.error(f"--cooldown must be a whole number of rounds >= 0, got {args.cooldown}")
    try:
        matrix.check_partition(args.partition)
    except ValueError as err:
        parser.error(f"--partition: {err}")
    cell = f"{args.dataset} {args.partition} {args.participation} {args.lam:g}"
    if locate_dataset(matrix.DATASETS[args.dataset][0]) is None:
        print(f"{args.dataset} is not on this machine (see `hyfdca datasets`): nothing to run")
        print(f"headline: {cell.replace(' ', '_')} reference_final=not-run "
              f"damped_final=not-run reference_dual_fall=not-run damped_dual_fall=not-run "
              f"doublings=not-run")
        return 0
    X, y, shape = matrix.load(args.dataset)
    fed = partition_from_spec(X, y, args.partition, seed=matrix.SEED, image_shape=shape,
                              cap=True)
    p_star = centralized_solution(*fed.reassemble(), loss=matrix.LOSS, lam=args.lam,
                                  cache_dir=default_cache_dir())[0]
    kind, fraction = matrix.PARTICIPATIONS[args.participation]
    settings = HyFDCASettings.from_variant(matrix.DEFAULT, loss=matrix.LOSS, lam=args.lam,
                                           participation=kind, fraction=fraction)
    results = {}
    for name, tol in (("reference", np.inf), ("damped", args.tol)):
        rule = Doubling(tol, args.cooldown)
        r = results[name] = matrix.run_cell(fed, settings, p_star, args.budget,
                                            args.eval_every, adjust=rule)
        r["doublings"] = rule.rounds
        print(f"{cell} {name}: cert 5e-2 {matrix.fmt_rounds(r['certified'][5e-2])}, "
              f"1e-2 {matrix.fmt_rounds(r['certified'][1e-2])}, iterate's worst "
              f"{r['worst_iterate']:.3g}, dual fall {r['dual_fall']:.3g}, final "
              f"{r['final']:.3g}, sigma {rule.sigma:g}, doubled at {rule.rounds} "
              f"({r['rounds']} rounds, {r['status']})", flush=True)
    ref, damped = results["reference"], results["damped"]
    print(f"headline: {cell.replace(' ', '_')} reference_final={ref['final']:.3g} "
          f"damped_final={damped['final']:.3g} reference_dual_fall={ref['dual_fall']:.3g} "
          f"damped_dual_fall={damped['dual_fall']:.3g} "
          f"doublings={len(damped['doublings'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
