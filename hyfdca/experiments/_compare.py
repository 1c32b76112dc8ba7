"""One comparison: every method tuned on the same problem, then run for the same number of
outer iterations and for the same simulated wall time (the time model of docs/algorithm.md
section 3 at one latency), and the verdict of which reaches the lowest relative loss and the
highest validation accuracy.

Methods that cannot run a setting (ADMM under partial participation) are left out of it.
Each method's search draws its own candidates in each setting (seeded by the setting's
name), HyFDCA ``max_candidates`` of them, each baseline ``baseline_candidates`` (its space
has three or four dimensions to HyFDCA's one). Every method whose search chose other than
its defaults also runs at its defaults for the same rounds (``at_defaults``): the search's
grey relational analysis weighs runtime, so a tuned run can be a slow one, and a reader
sees each method as the search left it and as a user gets it.
Equal wall time: the budget is HyFDCA's simulated time after ``rounds`` rounds; each other
method runs ceil(budget / its mean seconds per round) rounds (at most ``time_round_cap``
times ``rounds``), and every history is cut at the shortest time any of them reached: the
budget, unless a method hit the cap, whose reach then bounds every method's (a capped
method compared at a fraction of HyFDCA's time was counted as losing to it). By time
every method is read at its last evaluation within the horizon (the mean of its last
five, the reading by iterations, reached back to round 0, w = 0, where HyFDCA kept a few
rounds). Where that evaluation is more than ``CUT_SLACK`` of the kept rounds short of the
cut, the method runs again (the same iterates: runs are deterministic) to the last round
whose time, with one more certificate (HyFDCA's evaluation is a charged certificate; a
baseline's costs nothing), is within the horizon, and is read there; a re-run that ends
past the horizon all the same (the measured clock) is not used.

Where the problem holds a held-out test set (``Problem.test``), the searches choose on the
validation set as always and every long run records its accuracy on the test set, which
no choice saw (the paper reports the validation accuracy its search chose on).
"""

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from feddata.history import History
from hyfdca.experiments._methods import (DIVERGENCE_ERRORS, applicable, default_params,
                                         run_method, sgd_step_limit)
from hyfdca.experiments._metrics import evaluated
from hyfdca.experiments._run_many import run_many
from hyfdca.experiments._search import tune

CUT_SLACK = 0.01    # a method's last evaluation within 1% of its kept rounds of the cut
                    # is read as it is (a baseline's 20,000 rounds, evaluated every 10)
LAST_BY_ITERATION, LAST_BY_TIME = 5, 1   # evaluations final_values averages per mode


@dataclass
class Comparison:
    name: str                  # the setting, e.g. "a9a 3x3 f=0.5"
    tunings: dict              # method -> Tuning
    by_iteration: dict         # method -> History (same rounds)
    by_time: dict              # method -> History (same simulated time)
    latency: float
    at_defaults: dict = field(default_factory=dict)  # method -> History at its defaults
                                    # (same rounds), where the search chose otherwise
    diverged: dict = field(default_factory=dict)  # (mode, method) -> the error of a long
                                    # run that diverged ("iteration", "time", "defaults";
                                    # "cut": a re-run to the horizon, not used)
    accuracy_on: str = "validation"  # the long runs' accuracy: "validation" or "test"

    def __setstate__(self, state):   # comparisons saved before these fields existed
        self.__dict__.update({"diverged": {}, "accuracy_on": "validation", **state})


def truncate_by_time(history, budget, latency):
    """A copy of ``history`` holding the rounds (and evaluations) within ``budget``
    seconds of simulated time (round 0 at least, where that alone costs more)."""
    elapsed = history.simulated_time(latency)      # index r: after r rounds
    last = max(0, int(np.searchsorted(elapsed, budget, side="right")) - 1)
    out = History(p_star=history.p_star)
    out.rounds = history.rounds[:last]
    out.evaluations = {r: e for r, e in history.evaluations.items() if r <= last}
    out.certificates = {r: c for r, c in history.certificates.items() if r <= last}
    return out


def compare(name, problem, methods, *, rounds, tune_rounds, max_candidates=8,
            baseline_candidates=None, budget_seconds=None, costs=None, latency=0.2575,
            eval_every=1, time_round_cap=20, run=run_method, n_jobs=1):
    """The :class:`Comparison` named ``name``; ``baseline_candidates`` None: as many as
    ``max_candidates``. ``run`` runs each method (``run_method``, or a
    :class:`SavedRuns` that keeps finished runs so that a stopped comparison resumes).
    ``n_jobs`` runs at once (joblib processes, each run's BLAS on one thread; the same
    result as one after the other): each method's candidates, then the long runs in two
    batches (equal iterations; then equal time and the defaults). A long run that
    diverges (an overflow, or a primal that is no longer finite) is left out of its mode
    and recorded in ``diverged``; a method whose run of
    equal iterations diverged has no run of equal time."""
    if baseline_candidates is None:
        baseline_candidates = max_candidates
    tunings = {m: tune(m, problem, rounds=tune_rounds,
                       max_candidates=max_candidates if m == "HyFDCA" else baseline_candidates,
                       budget_seconds=budget_seconds, costs=costs, eval_every=eval_every,
                       seed=problem.seed, stream=name, run=run, n_jobs=n_jobs)
               for m in methods if applicable(m, problem)}
    viable = {m: t.params for m, t in tunings.items() if t.params is not None}
    assessed = (problem if problem.test is None
                else dataclasses.replace(problem, accuracy_on="test"))

    diverged = {}

    def long_runs(calls):   # {(mode, method): History} of [(mode, method, params, rounds)]
        n_rounds = {(mode, m): n for mode, m, _, n in calls}
        outcomes = run_many(run, assessed, [
            (m, params, dict(rounds=n, eval_every=eval_every, costs=costs))
            for _, m, params, n in calls], n_jobs)
        finished = {}
        for (mode, m, *_), outcome in zip(calls, outcomes):
            if isinstance(outcome, DIVERGENCE_ERRORS):
                diverged[mode, m] = f"{type(outcome).__name__}: {outcome}"
            elif not np.all(np.isfinite(evaluated(outcome, "iterate_primal")[1])):
                # a baseline stops at a non-finite primal without raising
                diverged[mode, m] = (f"its primal is not finite after round "
                                     f"{len(outcome.rounds)} of {n_rounds[mode, m]}")
            else:
                finished[mode, m] = outcome
        return finished

    by_iteration = {m: history for (_, m), history in long_runs(
        [("iteration", m, params, rounds) for m, params in viable.items()]).items()}
    defaults = {m: default_params(m, problem.lam, sgd_step_limit(problem)) for m in viable}
    later = [("defaults", m, defaults[m], rounds)
             for m, params in viable.items() if params != defaults[m]]
    budget = (by_iteration["HyFDCA"].simulated_time(latency)[-1]
              if "HyFDCA" in by_iteration else None)
    if budget is not None:
        for m, history in by_iteration.items():
            per_round = history.simulated_time(latency)[-1] / max(1, len(history.rounds))
            n = rounds if m == "HyFDCA" else min(time_round_cap * rounds,
                                                   math.ceil(budget / max(per_round, 1e-12)))
            if n != rounds:
                later.append(("time", m, viable[m], n))
    done = long_runs(later)
    by_time = {}
    if budget is not None:
        timed = {m: done.get(("time", m), history) for m, history in by_iteration.items()
                 if ("time", m) not in diverged}
        horizon = min([budget] + [h.simulated_time(latency)[-1] for h in timed.values()])
        by_time = {m: truncate_by_time(h, horizon, latency) for m, h in timed.items()}
        cuts = {m: _certifiable_round(timed[m], len(h.rounds), horizon, latency)
                for m, h in by_time.items() if _read_short_of_the_cut(h)}
        reruns = long_runs([("cut", m, viable[m], r) for m, r in cuts.items()
                            if r > max(by_time[m].evaluations, default=0)])
        by_time.update({m: history for (_, m), history in reruns.items()
                        if history.simulated_time(latency)[-1] <= horizon})
    at_defaults = {m: done["defaults", m] for m in viable if ("defaults", m) in done}
    return Comparison(name, tunings, by_iteration, by_time, latency, at_defaults,
                      diverged, assessed.accuracy_on)


def _read_short_of_the_cut(history):
    """Whether the last evaluation of a history cut at the horizon is more than
    ``CUT_SLACK`` of its rounds before the cut."""
    kept = len(history.rounds)
    return kept - max(history.evaluations, default=0) > CUT_SLACK * kept


def _certifiable_round(history, kept, horizon, latency):
    """The last round r <= ``kept`` whose simulated time in ``history`` plus its dearest
    certificate (0 without certificates) is within ``horizon``."""
    elapsed = history.simulated_time(latency)[:kept + 1]
    certificate = max((c["encryption_seconds"] + latency * c["rtc"]
                       for c in history.certificates.values()), default=0.0)
    within = np.flatnonzero(elapsed + certificate <= horizon)
    return int(within[-1]) if within.size else 0


def with_defaults(comparison):
    """The equal-iteration runs with every method at its defaults (its tuned run where
    the search chose the defaults; none where its run at the defaults diverged)."""
    runs = {**comparison.by_iteration, **comparison.at_defaults}
    return {m: h for m, h in runs.items() if ("defaults", m) not in comparison.diverged}


def final_values(history, last=LAST_BY_ITERATION):
    """(mean relative loss, mean accuracy) over the last ``last`` evaluations (the
    accuracy on the set the run recorded it on: ``Comparison.accuracy_on``)."""
    _, rel = evaluated(history, "relative_loss")
    _, acc = evaluated(history, "validation_accuracy")
    return float(np.mean(rel[-last:])), float(np.mean(acc[-last:]))


def winners(runs, last=LAST_BY_ITERATION):
    """(method with the lowest final relative loss, method with the highest accuracy) over
    the last ``last`` evaluations, each "tie: A, B" where several share the best value to
    12 digits (means of the same values summed in another order; no method wins it) and
    "-" where no run has a finite value; a NaN value wins nothing."""
    finals = {m: final_values(h, last) for m, h in runs.items()}
    return tuple(_best({m: sign * v[i] for m, v in finals.items()})
                 for i, sign in ((0, 1.0), (1, -1.0)))


def _best(scores):
    """The method with the smallest finite score, "tie: ..." or "-"."""
    finite = {m: v for m, v in scores.items() if np.isfinite(v)}
    if not finite:
        return "-"
    low = min(finite.values())
    best = [m for m, v in finite.items() if np.isclose(v, low, rtol=1e-12, atol=0.0)]
    return best[0] if len(best) == 1 else "tie: " + ", ".join(best)
