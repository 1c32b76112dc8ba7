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
                                         draw_params, run_method)
from hyfdca.experiments._metrics import LARGER_IS_BETTER, METRIC_NAMES, diverged, \
    selection_metrics


@dataclass
class Tuning:
    method: str
    params: dict | None        # None: every candidate diverged
    history: object | None
    tried: int = 0
    divergent: int = 0
    candidates: list = field(default_factory=list)   # (params, metrics, grade)


def tune(method, problem, *, rounds, max_candidates=8, budget_seconds=None, costs=None,
         eval_every=1, seed=0, stream="", run=run_method):
    """Random search for ``method`` on ``problem``; candidate 0 is the method's default.
    ``run``: what runs a candidate (``run_method``'s signature; a comparison may pass
    one that saves its runs)."""
    rng = np.random.default_rng([seed, 7, ALL_METHODS.index(method),
                                 zlib.crc32(stream.encode())])
    start = time.perf_counter()
    kept, tried, divergent = [], 0, 0
    for i in range(max_candidates):
        if i and budget_seconds is not None and time.perf_counter() - start > budget_seconds:
            break
        params = (default_params(method, problem.lam) if i == 0
                  else draw_params(method, rng, problem.lam))
        tried += 1
        try:
            history = run(method, problem, params, rounds=rounds, eval_every=eval_every,
                          costs=costs)
        except DIVERGENCE_ERRORS:
            divergent += 1
            continue
        if diverged(history):
            divergent += 1
            continue
        kept.append((params, history, selection_metrics(history)))
    if not kept:
        return Tuning(method, None, None, tried, divergent)
    values = [[m[name] for name in METRIC_NAMES] for _, _, m in kept]
    grades = grey_relational_grades(values, LARGER_IS_BETTER)
    best = int(np.argmax(grades))
    return Tuning(method, kept[best][0], kept[best][1], tried, divergent,
                  [(p, m, float(g)) for (p, _, m), g in zip(kept, grades)])
