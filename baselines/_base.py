"""What every convex baseline shares with HyFDCA: the FederatedDataset, the participation
models, the per-round records and the History.

A baseline implements ``_round(available) -> dict(compute_seconds, rtc, bytes_up,
bytes_down)`` (plus ``compute_ops``, ``feddata.local_work`` of its slowest client, where it
counts its local work) and keeps its global model in ``self.w`` (over all d features).
Baselines have no duality-gap certificate: their evaluations are the primal P(w) and the
validation accuracy, computed by the experimenter on the pooled data (an oracle outside
the protocol); the dual and gap columns are NaN.
"""

import time

import numpy as np

from feddata.history import History
from feddata.participation import Participation
from solvers import (check_classification_labels, check_positive, check_validation_set,
                     check_whole, loss_code, primal_objective, sign_labels)


class ConvexBaseline:
    """Common state: data, loss, lam, participation, round counter and the model w."""

    name = "baseline"

    def __init__(self, dataset, *, loss="hinge", lam=1e-4, smoothing=1.0,
                 participation="full", fraction=1.0, seed=0):
        check_positive(lam, "lam")
        check_positive(smoothing, "smoothing")
        check_whole(seed, "seed", 0)
        self.dataset = dataset
        self.loss, self.code = loss, loss_code(loss)
        check_classification_labels(dataset.labels, loss)
        self.lam, self.smoothing = float(lam), float(smoothing)
        self.seed = int(seed)
        self.participation = Participation(participation, fraction, dataset.n_clients, seed)
        self.w = np.zeros(dataset.n_features)
        self.round = 0

    def _round(self, available):
        raise NotImplementedError

    def step(self):
        """One outer iteration; its record has HyFDCA's round fields (no crypto)."""
        avail = self.participation.available(self.round)
        start = time.perf_counter()
        stats = self._round(avail)
        self.round += 1
        return dict(round=self.round, available=len(avail), step=np.nan,
                    encrypt=0, decrypt=0, add=0, multiply=0,
                    protocol_seconds=time.perf_counter() - start, **stats)

    def rng(self, *stream):
        """The generator of one random stream, derived from the run's seed."""
        return np.random.default_rng((self.seed,) + stream)


def run_baseline(method, *, max_rounds=100, eval_every=1, p_star=None, validation=None,
                 callback=None):
    """Run a baseline for ``max_rounds``; return its History (primal and validation
    accuracy every ``eval_every`` rounds; stops early if the primal is no longer finite)."""
    for name, value, least in (("max_rounds", max_rounds, 0), ("eval_every", eval_every, 1)):
        check_whole(value, name, least)
    check_validation_set(validation, method.dataset.n_features, method.loss)
    X, y = method.dataset.reassemble()
    history = History(p_star=p_star)

    def evaluate():
        primal = primal_objective(X, y, method.w, loss=method.loss, lam=method.lam,
                                  smoothing=method.smoothing)
        accuracy = None
        if validation is not None:
            Xv, yv = validation
            accuracy = float(np.mean(sign_labels(Xv @ method.w) == yv))
        history.add_evaluation(method.round, primal, np.nan, accuracy)
        return primal

    evaluate()
    for _ in range(max_rounds):
        history.add_round(method.step())
        if method.round % eval_every == 0 or method.round == max_rounds:
            if not np.isfinite(evaluate()):
                break
        if callback is not None:
            callback(method)
    return history
