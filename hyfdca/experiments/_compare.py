"""One comparison: every method tuned on the same problem, then run for the same number of
outer iterations and for the same simulated wall time (the time model of docs/algorithm.md
section 3 at one latency), and the verdict of which reaches the lowest relative loss and the
highest validation accuracy.

Methods that cannot run a setting (ADMM under partial participation) are left out of it.
Where HyFDCA's search chose other than its defaults, HyFDCA also runs at its defaults for
the same rounds (``hyfdca_defaults``): the search's grey relational analysis weighs
runtime, so the tuned run can be a slow one, and a reader sees both.
Equal wall time: the budget is HyFDCA's simulated time after ``rounds`` rounds; each other
method runs ceil(budget / its mean seconds per round) rounds (at most ``time_round_cap``)
and its history is cut at the budget.
"""

import math
from dataclasses import dataclass

import numpy as np

from feddata.history import History
from hyfdca.experiments._methods import applicable, default_params, run_method
from hyfdca.experiments._metrics import evaluated
from hyfdca.experiments._search import tune


@dataclass
class Comparison:
    name: str                  # the setting, e.g. "a9a 3x3 f=0.5"
    tunings: dict              # method -> Tuning
    by_iteration: dict         # method -> History (same rounds)
    by_time: dict              # method -> History (same simulated time)
    latency: float
    hyfdca_defaults: object = None  # History of HyFDCA at its defaults (same rounds), when
                                    # the search chose otherwise; else None


def truncate_by_time(history, budget, latency):
    """A copy of ``history`` holding the rounds (and evaluations) within ``budget``
    seconds of simulated time."""
    elapsed = history.simulated_time(latency)      # index r: after r rounds
    last = int(np.searchsorted(elapsed, budget, side="right")) - 1
    out = History(p_star=history.p_star)
    out.rounds = history.rounds[:last]
    out.evaluations = {r: e for r, e in history.evaluations.items() if r <= last}
    out.certificates = {r: c for r, c in history.certificates.items() if r <= last}
    return out


def compare(name, problem, methods, *, rounds, tune_rounds, max_candidates=8,
            budget_seconds=None, costs=None, latency=0.2575, eval_every=1,
            time_round_cap=20):
    tunings = {m: tune(m, problem, rounds=tune_rounds, max_candidates=max_candidates,
                       budget_seconds=budget_seconds, costs=costs, eval_every=eval_every,
                       seed=problem.seed) for m in methods if applicable(m, problem)}
    viable = {m: t for m, t in tunings.items() if t.params is not None}
    by_iteration = {m: run_method(m, problem, t.params, rounds=rounds, eval_every=eval_every,
                                  costs=costs) for m, t in viable.items()}
    by_time = {}
    if "HyFDCA" in by_iteration:
        budget = by_iteration["HyFDCA"].simulated_time(latency)[-1]
        for m, history in by_iteration.items():
            per_round = history.simulated_time(latency)[-1] / max(1, len(history.rounds))
            n = rounds if m == "HyFDCA" else min(time_round_cap * rounds,
                                                   math.ceil(budget / max(per_round, 1e-12)))
            run = history if n == rounds else run_method(m, problem, viable[m].params,
                                                         rounds=n, eval_every=eval_every,
                                                         costs=costs)
            by_time[m] = truncate_by_time(run, budget, latency)
    defaults, chosen = default_params("HyFDCA", problem.lam), viable.get("HyFDCA")
    at_defaults = None if chosen is None or chosen.params == defaults else run_method(
        "HyFDCA", problem, defaults, rounds=rounds, eval_every=eval_every, costs=costs)
    return Comparison(name, tunings, by_iteration, by_time, latency, at_defaults)


def with_hyfdca_defaults(comparison):
    """The equal-iteration runs with HyFDCA's tuned run replaced by its run at the
    defaults (unchanged where the search chose the defaults)."""
    runs = dict(comparison.by_iteration)
    if comparison.hyfdca_defaults is not None and "HyFDCA" in runs:
        runs["HyFDCA"] = comparison.hyfdca_defaults
    return runs


def final_values(history, last=5):
    """(mean relative loss, mean validation accuracy) over the last ``last`` evaluations."""
    _, rel = evaluated(history, "relative_loss")
    _, acc = evaluated(history, "validation_accuracy")
    return float(np.mean(rel[-last:])), float(np.mean(acc[-last:]))


def winners(runs):
    """(method with the lowest final relative loss, method with the highest accuracy)."""
    finals = {m: final_values(h) for m, h in runs.items()}
    return (min(finals, key=lambda m: finals[m][0]), max(finals, key=lambda m: finals[m][1]))
