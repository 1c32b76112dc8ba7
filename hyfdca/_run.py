"""``run_hyfdca``: pick an engine, run rounds, certify, record the history."""

import time

import numpy as np

from feddata import History
from hyfdca._batched import BatchedHyFDCA
from hyfdca._protocol import HyFDCARun

ENGINES = ("protocol", "batched")


def run_hyfdca(dataset, settings, *, max_rounds=100, tol=None, rel_tol=None, eval_every=1,
               p_star=None, validation=None, crypto="plain", crypto_options=None,
               frac_bits=32, seed=0, record=False, progress=False, callback=None,
               engine="protocol", backend="numba"):
    """Run HyFDCA on a FederatedDataset and return (run, History).

    ``engine="protocol"`` (:class:`HyFDCARun`): server and clients exchanging messages,
    with every encryption backend and the message-level accounting. ``engine="batched"``
    (``crypto="plain"`` only, no ``record``; :class:`BatchedHyFDCA`): the same iterates
    bit for bit, every client of a round in one Numba call per phase (``backend="cupy"``:
    on a GPU), bytes reported as 0 and the plain backend's operation counts.

    Every certificate (round 0, every ``eval_every`` rounds and the last round) gives the
    primal P_t = P(w(alpha_t)) and the dual D_t = D(alpha_t); the history records them
    all. Since D(alpha) <= P* <= P(w) for every alpha and w, the best of them bound the
    best model: P(w_best) - P* <= min_t P_t - max_t D_t, the certified gap. The run stops
    after ``max_rounds``, when the certified gap is at most ``tol`` or at most ``rel_tol``
    min_t P_t (a relative duality gap, which bounds the relative loss (P - P*)/P*), or when
    a certificate's gap is not finite (divergence; the bound uses finite certificates
    only). ``run.model`` is w_best, the w(alpha) of the
    certificate with the smallest primal: a model whose objective was certified (the
    primal of w(alpha) is noisy along the run, docs/algorithm.md section 5 lesson (d);
    under partial participation the server's running w also holds stale parts of absent
    clients). ``validation`` = (X_val, y_val) adds the validation accuracy of each
    certificate's w(alpha) to the history.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "batched":
        if crypto != "plain" or record:
            raise ValueError(f"engine='batched' runs the plaintext protocol without message "
                             f"records (crypto='plain', record=False); got crypto={crypto!r}, "
                             f"record={record}")
        run = BatchedHyFDCA(dataset, settings, frac_bits=frac_bits, seed=seed,
                            backend=backend)
    else:
        run = HyFDCARun(dataset, settings, crypto=crypto, crypto_options=crypto_options,
                        frac_bits=frac_bits, seed=seed, record=record)
    history = History(p_star=p_star)

    def evaluate():
        primal, dual, w = _guarded(run, run.certificate)
        first = not history.evaluations
        history.add_evaluation(run.round, primal, dual, _accuracy(w, validation))
        best_primal, best_dual = history.certified()
        if first or primal == best_primal:  # the first, then the smallest finite primal
            run.model = w
        if not np.isfinite(primal - dual):
            return np.nan, primal  # this certificate diverged: stop
        return best_primal - best_dual, best_primal

    evaluate()
    rounds = range(max_rounds)
    if progress:
        from tqdm import tqdm
        rounds = tqdm(rounds, desc="HyFDCA", unit="round")
    for _ in rounds:
        start = time.perf_counter()
        record_ = _guarded(run, run.step)
        record_["protocol_seconds"] = time.perf_counter() - start
        history.add_round(record_)
        if run.round % eval_every == 0 or run.round == max_rounds:
            gap, primal = evaluate()
            if progress:
                rounds.set_postfix(gap=f"{gap:.2e}")
            if converged(gap, primal, tol, rel_tol) or not np.isfinite(gap):
                break
        if callback is not None:
            callback(run)
    return run, history


def converged(gap, primal, tol=None, rel_tol=None):
    """gap <= tol, or gap <= rel_tol |primal| (either test given)."""
    return bool((tol is not None and gap <= tol)
                or (rel_tol is not None and gap <= rel_tol * abs(primal)))


def _guarded(run, operation):
    """Run a protocol operation; turn a fixed-point overflow into an error that says what
    it means for the run."""
    try:
        return operation()
    except OverflowError as err:
        raise OverflowError(
            f"round {run.round}: {err}. The iterates left the range the fixed-point "
            f"encoding can hold: the run diverged (try a safer variant such as "
            f"'sigma-safe' or a smaller H) or the data or targets need scaling"
        ) from err


def _accuracy(w, validation):
    if validation is None:
        return None
    X, y = validation
    return float(np.mean(np.where(X @ w[:X.shape[1]] >= 0, 1.0, -1.0) == y))
