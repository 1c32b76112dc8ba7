#!/usr/bin/env python
"""The paper's convergence-rate experiments (HyFDCA section 5.2): HyFDCA against FedAvg
and HyFEM on each data set x partition x participation fraction, hyperparameters chosen by
random search and Grey Relational Analysis, equal outer iterations and equal wall time
(HyFDCA charged the encryption time measured for the chosen backend), Figure 3 style plots,
the tuning and verdict tables.

    python benchmarks/paper_experiments.py --quick        # breast cancer, < 60 s
    python benchmarks/paper_experiments.py                # the paper's grid (hours)
    python benchmarks/paper_experiments.py --datasets a9a --output benchmarks/results/a9a

This is ``hyfdca experiment`` with the results written under ``benchmarks/results/``
by default. Here ``--quick`` implies ``--deterministic`` (the time model from operation
counts and the reference per-value costs of 2048-bit keys, no real-time search budget):
measured timings would change the searched winners from run to run, and the quick
headline is meant to be the same on every run and machine (so ``--key-bits`` does not go
with ``--quick``). The last line is ``headline: hyfdca_wins_iter=<a>/<n>
hyfdca_wins_time=<b>/<n> defaults_wins_iter=<c>/<n>`` (c: by outer iterations with every
method at its defaults instead of the searched parameters).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyfdca.cli import main  # noqa: E402

NOTE = ("benchmarks/paper_experiments.py: `hyfdca experiment` with --output under "
        "benchmarks/results/ by default; here --quick implies --deterministic (the same "
        "headline on every run: measured timings would change the searched winners), so "
        "--key-bits does not go with --quick. The options of `hyfdca experiment`:\n")


def given(args, option):
    return any(a == option or a.startswith(option + "=") for a in args)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(NOTE)
    quick = "--quick" in args
    if quick and given(args, "--key-bits"):
        sys.exit("paper_experiments.py: --quick implies --deterministic, which charges the "
                 "reference costs of 2048-bit keys: drop --key-bits, or run `hyfdca "
                 "experiment --quick --key-bits ...` for measured costs")
    if quick and "--deterministic" not in args:
        args.append("--deterministic")
    if not given(args, "--output"):
        name = "paper_experiments_quick" if quick else "paper_experiments"
        args += ["--output", str(Path(__file__).resolve().parent / "results" / name)]
    sys.exit(main(["experiment", *args]))
