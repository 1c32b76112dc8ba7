#!/usr/bin/env python
"""A probe of the update rule, not of the protocol: does a momentum term speed up HyFDCA's
dual ascent under full participation?

At full participation the default of the tenth session (auto-full then) added the
holders' weighted mean Delta of their LocalDualMethod updates with the exact line search
g* on the dual (docs/algorithm.md sections 3-4). Where samples have several holders
(vertical and hybrid splits of a9a) the local updates overshoot (each holder extrapolates
the margin change of its own features with rho_i), g* was 0.003-0.03 and w(alpha) swung
between two states every other round (relative loss 0.2 and 3.5 at lam 1e-5, 3x3): the
dual crept.

This script simulates that round in the clear (numpy; ``hyfdca.rules``' LocalDualMethod,
norm-share weights and line search; every sample drawn each round, iic = 1, holders of a
sample group in one order) and compares three rules for the step, hinge loss, over the
same rounds:

* ``line search`` (the default of the tenth session, which wrote this probe): alpha +=
  g* Delta, g* in [0, 1] maximising D exactly;
* ``momentum``: alpha += g Delta + b e, e the previous round's applied step, (g, b) the
  exact maximiser of D's quadratic model (g clipped to [0, 1]), then alpha clipped to the
  hinge box 0 <= alpha_i y_i <= 1 (the clip is outside the model, so D can fall);
* ``momentum, guarded``: the momentum point where its D is at least the line search
  point's, else the line search point (D never falls).

No secure protocol of this code clips Enc(alpha) or compares the two points yet: the
figures are what momentum could buy, input for a protocol design, not a feature.

``--fraction f`` (idealised partial participation): each round each client takes part
with probability f (the same clients in every rule's run); Delta comes from the present
holders (absent ones count as 0), the momentum term moves only samples with a present
holder, and the margins and w stay exact, w = w(alpha). The protocol's absent holders
instead keep stale parts and a stale v_k until they return (docs/algorithm.md section 6),
which this simulation leaves out: it shows what momentum buys against the coupling of
holders' updates, not against staleness.

The simulation models the default of the session that wrote it, not today's: the
default at full participation has changed since (a relaxed line search, a proximal outer
loop, certificates over the last iterates; benchmarks/README.md), and today's engine
ends far below all three simulated rules (a9a 3x3, lam 1e-4, 200 rounds: the engine's
dual gap 0.000701 against the simulated line search's 0.247 and the guarded momentum's
0.00582, forty-third session). The momentum ratio is against an outdated reference: it is not
what momentum would buy today. ``--check-engine`` runs the batched engine (the protocol's
iterates) on the same partition with today's default settings and the same ``--seed``,
prints its dual gap beside the simulated rules and puts its final gap in the headline.
``--seed`` sets the partition (dealt schemes), the draw orders and the participation.

    python benchmarks/dual_momentum_probe.py                  # a9a 1x3, lam 1e-5, 200 rounds
    python benchmarks/dual_momentum_probe.py --lam 1e-4 --partition 3x3 --check-engine
    python benchmarks/dual_momentum_probe.py --lam 1e-4 --partition 5x5 --fraction 0.9
    python benchmarks/dual_momentum_probe.py --dataset fashion-mnist --partition quadrants:5

Without the data set the script says so and prints a headline of ``not-run``.

Last line: ``headline: rounds=<R> dual_gap_line_search=<x> dual_gap_momentum=<y>
dual_gap_guarded=<z> ratio_guarded=<x/z> engine_final=<e>``, the dual gaps
(P* - D(alpha)) / P* after R rounds (nan for a rule left out by ``--rules``; x is the
simulated line search, the tenth session's default) and e today's engine's after R
rounds (``not-run`` without ``--check-engine``).
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

from feddata.datasets import dataset_names, load_dataset, locate_dataset  # noqa: E402
from feddata.partition import partition_from_spec  # noqa: E402
from hyfdca import BatchedHyFDCA, HyFDCASettings  # noqa: E402
from hyfdca.rules import (aggregation_weights, correction_factors,  # noqa: E402
                          line_search_step, local_dual_method)
from solvers import LOSS_CODES, centralized_solution, default_cache_dir  # noqa: E402
from hyfdca.cli import whole_number  # noqa: E402

REPORT = (10, 25, 50, 100, 200, 400, 800, 1600)
RULES = ("line search", "momentum", "momentum, guarded")
RULE_NAMES = dict(zip(("line-search", "momentum", "guarded"), RULES))  # as --rules names them
ENGINE = "engine (today's default)"


class FullRound:
    """Full-participation HyFDCA rounds on the client blocks of ``fed``, in the clear:
    Delta, the weighted mean over each sample's holders of their LocalDualMethod updates
    (rho = "norm", norm-share weights, sigma 1, every sample drawn, holders of a sample
    group in the same order: auto-full's settings)."""

    def __init__(self, fed, lam):
        X, y = fed.reassemble()
        self.X, self.y = sp.csr_matrix(X), np.asarray(y, dtype=np.float64)
        self.n = self.X.shape[0]
        self.lam, self.lam_n = lam, lam * self.n
        self.q = np.asarray(self.X.multiply(self.X).sum(axis=1)).ravel()
        self.clients = []
        for block in fed.blocks:
            ids = np.asarray(block.sample_ids)
            B = sp.csr_matrix(self.X[ids][:, block.feature_ids])
            part, q = np.asarray(B.multiply(B).sum(axis=1)).ravel(), self.q[ids]
            rho = correction_factors("norm", q, part)
            weight = aggregation_weights("norm-share", fed.holder_counts[ids], q, part, 32)
            position = np.full(self.n, -1, dtype=np.int64)
            position[ids] = np.arange(ids.size)
            self.clients.append((ids, B, rho, weight, position))

    def w(self, alpha):
        return self.X.T @ alpha / self.lam_n

    def dual(self, alpha):
        w = self.w(alpha)
        return float(np.mean(self.y * alpha) - 0.5 * self.lam * w @ w)

    def delta(self, alpha, order, present):
        """Delta over the ``present`` clients (absent holders count as 0), and which
        samples have a present holder."""
        z = self.X @ self.w(alpha)
        out, covered = np.zeros(self.n), np.zeros(self.n, dtype=bool)
        for k in np.flatnonzero(present):
            ids, B, rho, weight, position = self.clients[k]
            covered[ids] = True
            local = position[order]
            dalpha, _ = local_dual_method(B.data, B.indices.astype(np.int64),
                                          B.indptr.astype(np.int64), self.y[ids],
                                          alpha[ids], z[ids], self.q[ids], rho,
                                          local[local >= 0], LOSS_CODES["hinge"],
                                          self.lam_n, 1.0, 0.0, B.shape[1])
            out[ids] += weight * dalpha
        return out, covered


def run_rule(sim, rule, rounds, seed, p_star, fraction=1.0):
    """{round: (P* - D) / P*} at the REPORT rounds, and the rounds where D fell. With
    ``fraction`` < 1 each client takes part with that probability (the same clients in
    every rule's run) and the momentum term moves only samples with a present holder."""
    rng = np.random.default_rng(seed)
    who = np.random.default_rng([seed, 1])
    alpha, step = np.zeros(sim.n), np.zeros(sim.n)
    gaps, falls, before = {}, [], 0.0
    for r in range(1, rounds + 1):
        w = sim.w(alpha)
        present = who.random(len(sim.clients)) < fraction
        order = rng.permutation(sim.n).astype(np.int64)
        delta, covered = sim.delta(alpha, order, present)
        step = np.where(covered, step, 0.0)
        dw = sim.w(delta)
        s1 = float(np.mean(sim.y * delta))
        g = line_search_step((s1, 0.0, 0.0), w, dw, sim.lam, 0.0)  # the engines' step
        new = alpha + g * delta
        dual = sim.dual(new)
        if rule != "line search":
            ew = sim.w(step)
            A = sim.lam * np.array([[dw @ dw, dw @ ew], [dw @ ew, ew @ ew]])
            b = np.array([s1 - sim.lam * w @ dw, float(np.mean(sim.y * step)) - sim.lam * w @ ew])
            g, m = np.linalg.lstsq(A, b, rcond=None)[0]
            moved = alpha + float(np.clip(g, 0, 1)) * delta + m * step
            moved = np.clip(moved * sim.y, 0.0, 1.0) * sim.y   # the hinge box
            moved_dual = sim.dual(moved)
            if rule == "momentum" or moved_dual >= dual:
                new, dual = moved, moved_dual
        step, alpha = new - alpha, new
        if r > 1 and dual < before - 1e-12:
            falls.append(r)
        before = dual
        if r in REPORT or r == rounds:
            gaps[r] = (p_star - dual) / p_star
    return gaps, falls


def engine_gaps(fed, lam, rounds, p_star, fraction=1.0, seed=0):
    participation = (dict(participation="fraction", fraction=fraction) if fraction < 1
                     else {})
    settings = HyFDCASettings.from_variant("auto", loss="hinge", lam=lam, **participation)
    run = BatchedHyFDCA(fed, settings, seed=seed)
    gaps = {}
    for r in range(1, rounds + 1):
        run.step()
        if r in REPORT or r == rounds:
            gaps[r] = (p_star - run.certificate().iterate_dual) / p_star
    return gaps


positive_int = whole_number(1)   # argparse type: a whole number >= 1


def main():
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="a9a",
                        help="a catalogue name (fashion-mnist: label < 5 against the rest)")
    parser.add_argument("--lam", type=float, default=1e-5)
    parser.add_argument("--partition", default="1x3", help="a partition spec (1x3: vertical)")
    parser.add_argument("--rounds", type=positive_int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fraction", type=float, default=1.0,
                        help="participation: each client takes part with this probability "
                             "(idealised: margins and w stay exact, see the docstring)")
    parser.add_argument("--rules", default=",".join(RULE_NAMES),
                        help=f"comma-separated subset of {list(RULE_NAMES)}")
    parser.add_argument("--check-engine", action="store_true",
                        help="also run today's batched engine (default settings, --seed)")
    args = parser.parse_args()
    if not 0.0 < args.fraction <= 1.0:
        parser.error(f"--fraction must lie in (0, 1], got {args.fraction}")
    if not args.lam > 0:
        parser.error(f"--lam must be a number > 0, got {args.lam}")
    if args.seed < 0:
        parser.error(f"--seed must be a whole number >= 0, got {args.seed}")
    if args.dataset not in dataset_names():
        parser.error(f"unknown data set {args.dataset!r}; choose from {dataset_names()}")
    names = [name.strip() for name in args.rules.split(",")]
    unknown = sorted(set(names) - set(RULE_NAMES))
    if unknown:
        parser.error(f"unknown rules {unknown}; choose from {list(RULE_NAMES)}")
    if locate_dataset(args.dataset) is None:
        print(f"{args.dataset} is not on this machine (see `hyfdca datasets`): nothing to run")
        print(f"headline: rounds={args.rounds} dual_gap_line_search=not-run "
              f"dual_gap_momentum=not-run dual_gap_guarded=not-run ratio_guarded=not-run "
              f"engine_final=not-run")
        return
    data = load_dataset(args.dataset)
    y = np.asarray(data.y, dtype=np.float64)
    if args.dataset == "fashion-mnist":
        y = np.where(y < 5, 1.0, -1.0)
    try:
        fed = partition_from_spec(data.X, y, args.partition, seed=args.seed,
                                  image_shape=data.image_shape)
    except ValueError as err:
        parser.error(f"--partition: {err}")
    sim = FullRound(fed, args.lam)
    p_star = centralized_solution(sim.X, sim.y, loss="hinge", lam=args.lam,
                                  cache_dir=default_cache_dir())[0]
    taking_part = ("full participation" if args.fraction >= 1
                   else f"participation {args.fraction:g} (idealised)")
    print(f"{args.dataset} {args.partition}, hinge, lam {args.lam:g}, {taking_part}, iic 1; "
          f"P* = {p_star:.6f}; (P* - D(alpha)) / P* after each round count:")
    rules = [RULE_NAMES[name] for name in names]
    results = {rule: run_rule(sim, rule, args.rounds, args.seed, p_star, args.fraction)
               for rule in rules}
    if args.check_engine:
        results[ENGINE] = (engine_gaps(fed, args.lam, args.rounds, p_star,
                                       args.fraction, args.seed), None)
    shown = sorted(results[rules[0]][0])
    print("| rule | " + " | ".join(f"round {r}" for r in shown) + " | dual falls |")
    print("|---|" + "---|" * (len(shown) + 1))
    for rule, (gaps, falls) in results.items():
        fell = "-" if falls is None else f"{len(falls)}"
        print(f"| {rule} | " + " | ".join(f"{gaps[r]:.4g}" for r in shown) + f" | {fell} |")
    gap = {rule: results[rule][0][args.rounds] if rule in results else float("nan")
           for rule in RULES}
    x, y, z = (gap[rule] for rule in RULES)
    engine = f"{results[ENGINE][0][args.rounds]:.4g}" if args.check_engine else "not-run"
    if args.check_engine:
        print("(the simulated rules model the tenth session's default, not today's "
              "engine: ratio_guarded is against that outdated reference)")
    print(f"headline: rounds={args.rounds} dual_gap_line_search={x:.4g} "
          f"dual_gap_momentum={y:.4g} dual_gap_guarded={z:.4g} ratio_guarded={x / z:.1f} "
          f"engine_final={engine}")


if __name__ == "__main__":
    main()
