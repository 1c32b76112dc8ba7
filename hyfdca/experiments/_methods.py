"""The methods an experiment compares, their hyperparameter spaces, and one run of each
on a FederatedDataset with the time model of docs/algorithm.md section 3.

Encryption time. HyFDCA runs with exact operation counts (the plaintext backend counts
every encrypt, decrypt, add and multiply; the batched engine, which gives the same bits,
reports the same counts, one value per ciphertext); each round is charged those counts
times the per-value costs measured on this machine for the chosen backend with one value
per ciphertext (:func:`hyfdca.profile.measure_operations`; packed layouts are measured
inside the round by benchmarks/encrypted_rounds.py): client-side operations split evenly
over the
round's present clients (they work in parallel), server-side ones in full. Each
certificate (every ``eval_every`` rounds, with every client: HyFDCA's certified point and
stopping test need it) is charged the same way, with its round trips (three, or four
where it searches the round before's iterate as well)
(``History.certificates``); its local work (one pass over each block) is not. The
baselines encrypt nothing, and their evaluations, which their models do not need, are not
charged.

Deterministic time model (``Problem.deterministic``): the machine's clock is read nowhere.
Each round's compute time is its ``compute_ops`` (the slowest present client's local work,
``feddata.local_work``) times :data:`SECONDS_PER_OP`, and encryption is charged at the
fixed per-value costs :data:`REFERENCE_COSTS`, so that the tuning, the equal-time runs and
the verdict are the same bits on every machine.
"""

from dataclasses import dataclass

import numpy as np

from baselines import D3CA, BlockSplittingADMM, FedAvg, HyFEMLinear, run_baseline
from feddata.participation import Participation
from hyfdca._run import run_hyfdca
from hyfdca._settings import HyFDCASettings


# Reference constants of the deterministic time model, measured once on the development
# machine (2-core AMD EPYC VM, 2026-11-23; benchmarks/README.md, "The paper's experiments"):
# seconds per unit of local work (a9a rows, one thread: LocalDualMethod 6.8 ns, local SGD
# 5.3-6.7 ns), and per-value seconds of each backend's operations at 2048-bit keys
# (`hyfdca profile`'s measure_operations).
SECONDS_PER_OP = 6.5e-9
REFERENCE_COSTS = {
    "paillier": dict(encrypt=1.07e-2, decrypt=3.0e-3, add=6.1e-6, multiply=9.9e-5),
    "fast-paillier": dict(encrypt=1.5e-4, decrypt=3.95e-3, add=6.0e-6, multiply=1.67e-4),
    "mask": dict(encrypt=9.6e-8, decrypt=2.6e-7, add=1.0e-7, multiply=8.3e-8),
    "plain": None,
}


@dataclass(frozen=True)
class Space:
    """A hyperparameter drawn log-uniformly from [low, high]. ``per_convexity``: the range
    is of the value times the local objective's strong convexity lam + mu (the value is
    divided by it)."""

    low: float
    high: float
    per_convexity: bool = False

    def draw(self, rng):
        return float(np.exp(rng.uniform(np.log(self.low), np.log(self.high))))


# The paper tunes HyFDCA's inner-iterations constant only; FedAvg's iic, a and b; HyFEM's
# iic, a, b and its matching weight mu (HyFDCA supplement, Tables 2-4). The SGD step
# a / (b + t) must reach what theory recommends for a (lam + mu)-strongly convex local
# objective, the Pegasos step 1 / ((lam + mu) t): a (lam + mu) is drawn from [1e-4, 2]
# (a fixed range of a, such as [1e-2, 1e2], never reaches 1/lam = 1e4 at lam = 1e-4).
SGD_SPACE = {"iic": Space(1e-3, 1.0), "a": Space(1e-4, 2.0, per_convexity=True),
             "b": Space(1.0, 1e4)}
SPACES = {
    "HyFDCA": {"iic": Space(1e-3, 1.0)},
    "FedAvg": SGD_SPACE,
    "HyFEM": {**SGD_SPACE, "mu": Space(1e-3, 10.0)},
    # not in the paper's comparison; selectable (ADMM needs full participation)
    "D3CA": {"iic": Space(1e-2, 3.0)},
    "ADMM": {"rho": Space(1e-2, 1e2)},
}
METHODS = ("HyFDCA", "FedAvg", "HyFEM")       # the paper's comparison
ALL_METHODS = tuple(SPACES)
BASELINES = {"FedAvg": FedAvg, "HyFEM": HyFEMLinear, "D3CA": D3CA, "ADMM": BlockSplittingADMM}


def applicable(method, problem):
    """False where a method cannot run the problem: ADMM needs every client every round."""
    return method != "ADMM" or Participation(
        problem.participation, problem.fraction, problem.dataset.n_clients,
        problem.seed).everyone_each_round


# the largest curvature of a sample's loss in its margin, l''(z) <= c: where the gradient
# is not bounded (the squared losses) an SGD step above 1 / (c max_i q_i) blows up
_LOSS_CURVATURE = {"squared": 1.0, "squared_hinge": 2.0}


def sgd_step_limit(problem):
    """The largest first SGD step a / b the problem's loss allows: 1 / (c max_i q_i) for
    the squared and squared hinge losses (c = 1, 2: a step above 2 / L, L = c max_i q_i +
    lam, diverges); none (inf) for losses with a bounded gradient, where the Pegasos step
    a = 1 / (strong convexity) is safe."""
    curvature = _LOSS_CURVATURE.get(problem.loss)
    largest = float(np.max(problem.dataset.sq_row_norms, initial=0.0))
    if curvature is None or largest == 0.0:
        return np.inf
    return 1.0 / (curvature * largest)


def default_params(method, lam, step_limit=np.inf):
    """The first candidate of a search: HyFDCA's variant defaults; for the SGD baselines
    one local epoch with the Pegasos step a / (b + t), a = 1 / (strong convexity), b = 10:
    a = 1/lam for FedAvg, 1/(lam + mu) for HyFEM (mu = 0.5); b raised to a / step_limit
    where the first step a / b would pass ``step_limit`` (:func:`sgd_step_limit`: the
    squared losses)."""
    if method not in ("FedAvg", "HyFEM"):
        return {}
    mu = {"HyFEM": {"mu": 0.5}}.get(method, {})
    a = 1.0 / (lam + mu.get("mu", 0.0))
    return dict(iic=1.0, a=a, b=max(10.0, a / step_limit), **mu)


def draw_params(method, rng, lam, step_limit=np.inf):
    """One random draw from the method's space; step sizes kept stable (a (lam + mu) / b
    <= 1/2, and a / b <= ``step_limit``)."""
    spaces = SPACES[method]
    params = {name: space.draw(rng) for name, space in spaces.items()}
    convexity = lam + params.get("mu", 0.0)
    params.update({name: params[name] / convexity for name, space in spaces.items()
                   if space.per_convexity})
    if "a" in params:
        limit = min(0.5 * params["b"] / convexity, step_limit * params["b"])
        params["a"] = min(params["a"], limit)
    return params


@dataclass(frozen=True)
class Problem:
    """What every method of a comparison shares."""

    dataset: object          # FederatedDataset
    loss: str
    lam: float
    participation: str
    fraction: float
    p_star: float
    validation: tuple | None = None
    seed: int = 0
    engine: str = "batched"  # HyFDCA's engine: "batched" or "protocol" (same iterates)
    deterministic: bool = False  # compute time from operation counts, not the clock
    test: tuple | None = None    # a held-out (X, y) that no search sees
    accuracy_on: str = "validation"   # the set whose accuracy a run records ("test")

    def __post_init__(self):
        if self.accuracy_on not in ("validation", "test"):
            raise ValueError(f"accuracy_on is 'validation' or 'test', got "
                             f"{self.accuracy_on!r}")
        if self.accuracy_on == "test" and self.test is None:
            raise ValueError("accuracy_on='test' needs a held-out test set (test=)")

    @property
    def assessed(self):
        """The (X, y) whose accuracy a run records."""
        return self.test if self.accuracy_on == "test" else self.validation


# what a run raises when its iterates blow up (a divergent tuning candidate)
DIVERGENCE_ERRORS = (OverflowError, FloatingPointError)


def run_method(method, problem, params, *, rounds, eval_every=1, costs=None):
    """History of ``method`` with ``params`` for ``rounds`` rounds; HyFDCA's rounds are
    charged encryption time from ``costs`` (per-value seconds by operation) if given."""
    common = dict(participation=problem.participation, fraction=problem.fraction)
    if method == "HyFDCA":
        settings = HyFDCASettings.from_variant("auto", loss=problem.loss, lam=problem.lam,
                                               **common, **params)
        _, history = run_hyfdca(problem.dataset, settings, max_rounds=rounds,
                                eval_every=eval_every, p_star=problem.p_star,
                                validation=problem.assessed, seed=problem.seed,
                                engine=problem.engine)
        if costs is not None:
            charge_encryption(history, costs)
    else:
        model = BASELINES[method](problem.dataset, loss=problem.loss, lam=problem.lam,
                                  seed=problem.seed, **common, **params)
        history = run_baseline(model, max_rounds=rounds, eval_every=eval_every,
                               p_star=problem.p_star, validation=problem.assessed)
    if problem.deterministic:
        charge_compute(history, method)
    return history


def charge_compute(history, method):
    """Set each round's ``compute_seconds`` to compute_ops x SECONDS_PER_OP (in place);
    a method that does not count its local work cannot be timed this way."""
    for record in history.rounds:
        if not np.isfinite(record["compute_ops"]):
            raise ValueError(f"{method} does not count its local work (compute_ops): the "
                             f"deterministic time model cannot time it")
        record["compute_seconds"] = record["compute_ops"] * SECONDS_PER_OP


def encryption_seconds(counts, costs):
    """Seconds of a round's or a certificate's operation ``counts`` at per-value
    ``costs``: client-side work (encrypt, decrypt) split over its ``available`` clients,
    server-side work (add, multiply) in full."""
    client_side = counts["encrypt"] * costs["encrypt"] + counts["decrypt"] * costs["decrypt"]
    server_side = counts["add"] * costs["add"] + counts["multiply"] * costs["multiply"]
    return client_side / max(1, counts["available"]) + server_side


def charge_encryption(history, costs):
    """Set each round's and each certificate's ``encryption_seconds`` from its operation
    counts (in place)."""
    for record in [*history.rounds, *history.certificates.values()]:
        record["encryption_seconds"] = encryption_seconds(record, costs)
