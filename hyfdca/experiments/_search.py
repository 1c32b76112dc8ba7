"""Hyperparameter selection as in the paper: random search on a log scale, divergent runs
excluded, the winner chosen by Grey Relational Analysis over the seven metrics.

The search stops after ``max_candidates`` draws or once ``budget_seconds`` of real time
are spent, whichever comes first. Draws are seeded; a time budget makes how many of them
are tried depend on the machine, so the result records the number tried (give only
``max_candidates`` for a search that is the same on every machine). The draws of a method
are seeded by ``seed``, the method and ``stream`` (a comparison passes its setting's name,
so that each setting tries its own candidates).
"""

import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from hyfdca.experiments._gra import grey_relational_grades
from hyfdca.experiments._methods import (ALL_METHODS, DIVERGENCE_ERRORS, default_params,
                                         draw_params, run_method, sgd_step_limit)
from hyfdca.experiments._metrics import LARGER_IS_BETTER, METRIC_NAMES, RESOLUTION, \
    diverged, selection_metrics
from hyfdca.experiments._run_many import run_many


@dataclass
class Tuning:
    method: str
    params: dict | None        # None: every candidate diverged
    history: object | None
    tried: int = 0
    divergent: int = 0
    candidates: list = field(default_factory=list)   # (params, metrics, grade)


def draws(method, problem, max_candidates, *, seed=0, stream=""):
    """The search's draws, in order: the method's defaults, then random draws seeded by
    ``seed``, the method and ``stream``."""
    rng = np.random.default_rng([seed, 7, ALL_METHODS.index(method),
                                 zlib.crc32(stream.encode())])
    limit = sgd_step_limit(problem)
    return [default_params(method, problem.lam, limit) if i == 0
            else draw_params(method, rng, problem.lam, limit) for i in range(max_candidates)]


def tune(method, problem, *, rounds, max_candidates=8, budget_seconds=None, costs=None,
         eval_every=1, seed=0, stream="", run=run_method, n_jobs=1):
    """Random search for ``method`` on ``problem``; candidate 0 is the method's default.
    ``run``: what runs a candidate (``run_method``'s signature; a comparison may pass
    one that saves its runs). Without a time budget the candidates run ``n_jobs`` at
    once (the same result); with one, one after the other. Each runs with its BLAS on one
    thread (``run_many``)."""
    drawn = draws(method, problem, max_candidates, seed=seed, stream=stream)
    options = dict(rounds=rounds, eval_every=eval_every, costs=costs)
    if budget_seconds is None:
        outcomes = run_many(run, problem, [(method, p, options) for p in drawn], n_jobs)
    else:
        start, outcomes = time.perf_counter(), []
        for params in drawn:
            if outcomes and time.perf_counter() - start > budget_seconds:
                break
            outcomes.extend(run_many(run, problem, [(method, params, options)]))
    kept, divergent = [], 0
    for params, history in zip(drawn, outcomes):
        if isinstance(history, DIVERGENCE_ERRORS) or diverged(history):
            divergent += 1
            continue
        kept.append((params, history, selection_metrics(history)))
    tried = len(outcomes)
    if not kept:
        return Tuning(method, None, None, tried, divergent)
    values = [[m[name] for name in METRIC_NAMES] for _, _, m in kept]
    grades = grey_relational_grades(values, LARGER_IS_BETTER, resolution=RESOLUTION)
    best = int(np.argmax(grades))
    return Tuning(method, kept[best][0], kept[best][1], tried, divergent,
                  [(p, m, float(g)) for (p, _, m), g in zip(kept, grades)])
