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
by default. The last line is ``headline: hyfdca_wins_iter=<a>/<n> hyfdca_wins_time=<b>/<n>
defaults_wins_iter=<c>/<n>`` (c: by outer iterations with every method at its defaults
instead of the searched parameters).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyfdca.cli import main  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    if not any(a == "--output" or a.startswith("--output=") for a in args):
        name = "paper_experiments_quick" if "--quick" in args else "paper_experiments"
        args += ["--output", str(Path(__file__).resolve().parent / "results" / name)]
    sys.exit(main(["experiment", *args]))
