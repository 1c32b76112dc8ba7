#!/usr/bin/env python
"""A probe of the update rule, not of the protocol: does a momentum term speed up HyFDCA's
dual ascent on a vertical split under full participation?

At full participation the default (auto-full) adds the holders' weighted mean Delta of
their LocalDualMethod updates with the exact line search g* on the dual (docs/algorithm.md
sections 3-4). On a vertical split of a9a the local updates overshoot (each holder
extrapolates the margin change of its own features with rho_i), g* is 0.003-0.03 and
w(alpha) swings between two states every other round (relative loss 0.2 and 3.5 at lam
1e-5, 3x3): the dual creeps.

This script simulates that round in the clear (numpy; ``hyfdca.rules``'
LocalDualMethod and norm-share weights, every sample drawn each round, iic = 1) and
compares two rules for the step, hinge loss, over the same rounds:

* ``line search`` (today): alpha += g* Delta, g* in [0, 1] maximising D exactly;
* ``momentum``: alpha += g Delta + b e, e the previous round's applied step, (g, b) the
  exact maximiser of D's quadratic model (g clipped to [0, 1]), then alpha clipped to the
  hinge box 0 <= alpha_i y_i <= 1. The clip is what no secure protocol of this code does
  yet (the server cannot clip Enc(alpha)): the figure is what momentum could buy, an
  upper bound for a protocol design, not a feature.

``--check-engine`` also runs the batched engine (the protocol's iterates) on the same
partition with the default settings and prints its dual beside the simulated line
search, which should agree to about three digits (the draw orders differ).

    python benchmarks/dual_momentum_probe.py                  # a9a 1x3, lam 1e-5, 200 rounds
    python benchmarks/dual_momentum_probe.py --lam 1e-4 --check-engine

Last line: ``headline: rounds=<R> dual_gap_line_search=<x> dual_gap_momentum=<y>
ratio=<x/y>``, the dual gaps (P* - D(alpha)) / P* after R rounds.
"""

import os

for _var in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from feddata.datasets import load_dataset, locate_dataset  # noqa: E402
from feddata.partition import partition_from_spec  # noqa: E402
from hyfdca import HyFDCASettings  # noqa: E402
from hyfdca import BatchedHyFDCA  # noqa: E402
from hyfdca.rules import aggregation_weights, line_search_step, local_dual_method  # noqa: E402
from solvers import LOSS_CODES, centralized_solution  # noqa: E402

REPORT = (10, 25, 50, 100, 200, 400, 800)


class VerticalRound:
    """Full-participation HyFDCA rounds on the feature blocks of ``fed`` (one sample
    group), in the clear: Delta, the weighted mean of the holders' LocalDualMethod
    updates (rho = "norm", norm-share weights, every sample drawn)."""

    def __init__(self, fed, lam):
        X, y = fed.reassemble()
        self.X, self.y = sp.csr_matrix(X), np.asarray(y, dtype=np.float64)
        self.n = self.X.shape[0]
        self.lam, self.lam_n = lam, lam * self.n
        self.blocks = [sp.csr_matrix(self.X[:, block.feature_ids]) for block in fed.blocks]
        self.q = np.asarray(self.X.multiply(self.X).sum(axis=1)).ravel()
        parts = [np.asarray(B.multiply(B).sum(axis=1)).ravel() for B in self.blocks]
        ones = np.ones(self.n)
        self.rho = [np.where(p > 0, self.q / np.where(p > 0, p, 1.0), 1.0) for p in parts]
        self.weights = [aggregation_weights("norm-share", ones * len(parts), self.q, p)
                        for p in parts]

    def w(self, alpha):
        return self.X.T @ alpha / self.lam_n

    def dual(self, alpha):
        w = self.w(alpha)
        return float(np.mean(self.y * alpha) - 0.5 * self.lam * w @ w)

    def delta(self, alpha, order):
        z = self.X @ self.w(alpha)
        out = np.zeros(self.n)
        for B, rho, weight in zip(self.blocks, self.rho, self.weights):
            dalpha, _ = local_dual_method(B.data, B.indices.astype(np.int64),
                                          B.indptr.astype(np.int64), self.y, alpha, z,
                                          self.q, rho, order, LOSS_CODES["hinge"],
                                          self.lam_n, 1.0, 0.0, B.shape[1])
            out += weight * dalpha
        return out


def run_rule(sim, rule, rounds, seed, p_star):
    """{round: (P* - D) / P*} at the REPORT rounds, and the rounds where D fell."""
    rng = np.random.default_rng(seed)
    alpha, step = np.zeros(sim.n), np.zeros(sim.n)
    gaps, falls, before = {}, [], 0.0
    for r in range(1, rounds + 1):
        w = sim.w(alpha)
        delta = sim.delta(alpha, rng.permutation(sim.n).astype(np.int64))
        dw = sim.w(delta)
        s1 = float(np.mean(sim.y * delta))
        if rule == "line search":  # the engines' step (hinge: no conjugate curvature)
            g = line_search_step((s1, 0.0, 0.0), w, dw, sim.lam, 0.0)
            new = alpha + g * delta
        else:
            ew = sim.w(step)
            A = sim.lam * np.array([[dw @ dw, dw @ ew], [dw @ ew, ew @ ew]])
            b = np.array([s1 - sim.lam * w @ dw, float(np.mean(sim.y * step)) - sim.lam * w @ ew])
            g, m = np.linalg.lstsq(A, b, rcond=None)[0]
            new = alpha + float(np.clip(g, 0, 1)) * delta + m * step
            new = np.clip(new * sim.y, 0.0, 1.0) * sim.y   # the hinge box
        step, alpha = new - alpha, new
        dual = sim.dual(alpha)
        if r > 1 and dual < before - 1e-12:
            falls.append(r)
        before = dual
        if r in REPORT or r == rounds:
            gaps[r] = (p_star - dual) / p_star
    return gaps, falls


def engine_gaps(fed, lam, rounds, p_star):
    settings = HyFDCASettings.from_variant("auto", loss="hinge", lam=lam)
    run = BatchedHyFDCA(fed, settings, seed=0)
    gaps = {}
    for r in range(1, rounds + 1):
        run.step()
        if r in REPORT or r == rounds:
            gaps[r] = (p_star - run.certificate()[1]) / p_star
    return gaps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lam", type=float, default=1e-5)
    parser.add_argument("--partition", default="1x3", help="a vertical split (1xQ)")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check-engine", action="store_true")
    args = parser.parse_args()
    if locate_dataset("a9a") is None:
        print("a9a is not on this machine (../shared/data or HYFDCA_DATA): nothing to run")
        return
    data = load_dataset("a9a")
    fed = partition_from_spec(data.X, np.asarray(data.y, dtype=np.float64), args.partition,
                              seed=0)
    if any(block.sample_ids.size != fed.n_samples for block in fed.blocks):
        raise SystemExit(f"{args.partition} is not a vertical split (1xQ)")
    sim = VerticalRound(fed, args.lam)
    p_star = centralized_solution(sim.X, sim.y, loss="hinge", lam=args.lam)[0]
    print(f"a9a {args.partition}, hinge, lam {args.lam:g}, full participation, iic 1; "
          f"P* = {p_star:.6f}; (P* - D(alpha)) / P* after each round count:")
    results = {rule: run_rule(sim, rule, args.rounds, args.seed, p_star)
               for rule in ("line search", "momentum")}
    if args.check_engine:
        results["engine (default)"] = (engine_gaps(fed, args.lam, args.rounds, p_star), None)
    shown = sorted(results["line search"][0])
    print("| rule | " + " | ".join(f"round {r}" for r in shown) + " | dual falls |")
    print("|---|" + "---|" * (len(shown) + 1))
    for rule, (gaps, falls) in results.items():
        fell = "-" if falls is None else f"{len(falls)}"
        print(f"| {rule} | " + " | ".join(f"{gaps[r]:.4g}" for r in shown) + f" | {fell} |")
    x = results["line search"][0][args.rounds]
    y = results["momentum"][0][args.rounds]
    print(f"headline: rounds={args.rounds} dual_gap_line_search={x:.4g} "
          f"dual_gap_momentum={y:.4g} ratio={x / y:.1f}")


if __name__ == "__main__":
    main()
