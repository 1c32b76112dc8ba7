"""``run_hyfdca``: pick an engine, run rounds, certify, record the history."""

import json
import time

import numpy as np

from feddata import History
from hyfdca._batched import BatchedHyFDCA
from hyfdca._certificate import certificate_rounding, check_best_pair
from hyfdca._checkpoint import (CheckpointError, check_same_run, dataset_fingerprint,
                                latest_checkpoint, load_checkpoint, save_checkpoint)
from hyfdca._protocol import HyFDCARun
from hyfdca._transport import MissingReplies
from solvers import check_validation_set, is_whole, sign_labels

ENGINES = ("protocol", "batched")


def run_hyfdca(dataset, settings, *, max_rounds=100, tol=None, rel_tol=None, eval_every=1,
               p_star=None, validation=None, crypto="plain", crypto_options=None,
               frac_bits=32, seed=0, record=False, progress=False, callback=None,
               engine="protocol", backend="numba", checkpoint=None, checkpoint_every=None,
               resume=False, stop=None, transport=None):
    """Run HyFDCA on a FederatedDataset and return (run, History).

    ``engine="protocol"`` (:class:`HyFDCARun`): server and clients exchanging messages,
    with every encryption backend and the message-level accounting. ``engine="batched"``
    (``crypto="plain"`` only, no ``record``; :class:`BatchedHyFDCA`): the same iterates
    bit for bit, every client of a round in one Numba call per phase (``backend="cupy"``:
    on a GPU), bytes reported as 0 and the plain backend's operation counts.

    Every certificate (round 0, every ``eval_every`` rounds and the last round) gives the
    dual D_t = D(alpha_t) and a certified point w_t: the best point of the segment
    between w_{t-1} and w(alpha_t), or its proximal iterate x_t, or of the triangle with
    the round before's x_{t-1} as well (``hyfdca._certificate``), so its primal
    P_t = P(w_t) <= min(P_{t-1}, P(x_t)) (but after a reset, when a client lost the
    point's margins); the history records P_t, D_t and the iterate's P(x_t).
    Since D(alpha) <= P* <= P(w) for every alpha and w, the best of them bound the best
    point: P(w_best) - P* <= min_t P_t - max_t D_t, the certified gap. The run stops
    after round ``max_rounds``, when the certified gap is at most ``tol`` or at most
    ``rel_tol`` max_t D_t (a relative duality gap, which bounds the relative loss
    (P - P*)/P*), the fixed point's rounding counted (:func:`run_converged`), when a
    certificate's gap is not finite (divergence; the bound uses finite certificates
    only), or when ``stop()`` (checked after every round) returns True. ``run.model`` is
    the certified point with the smallest primal (the primal of w(alpha) itself is noisy
    along the run, docs/algorithm.md section 5 lesson (d); under partial participation
    the server's running w also holds stale parts of absent clients). ``validation`` =
    (X_val, y_val) adds the validation accuracy of each certified point to the history.
    ``transport`` (protocol engine): how messages travel (``HyFDCARun``).

    ``checkpoint`` = a folder: the run's state, model and history are saved there every
    ``checkpoint_every`` rounds (default: ``eval_every``) and when the run ends
    (``hyfdca._checkpoint``: atomic files, the server's apart from each client's).
    ``resume=True`` continues the newest checkpoint in that folder: the same data,
    settings, seed, engine and encryption are required, and the iterates are those of an
    uninterrupted run, bit for bit. A folder that already holds a checkpoint is never
    overwritten without ``resume=True``.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    check_run_arguments(max_rounds, eval_every, tol, rel_tol, checkpoint, checkpoint_every,
                         resume, frac_bits, seed)
    try:
        check_validation_set(validation, dataset.n_features, settings.loss)
    except ValueError as err:
        raise ValueError(f"run_hyfdca: {err}") from None
    if engine == "batched" and (crypto != "plain" or record or transport is not None):
        raise ValueError(f"engine='batched' runs the plaintext protocol without messages "
                         f"(crypto='plain', record=False, no transport); got "
                         f"crypto={crypto!r}, record={record}, transport={transport!r}")
    if engine == "batched":
        engine_class, options = BatchedHyFDCA, dict(frac_bits=frac_bits, seed=seed,
                                                     backend=backend)
    else:
        engine_class, options = HyFDCARun, dict(crypto=crypto, crypto_options=crypto_options,
                                                frac_bits=frac_bits, seed=seed, record=record,
                                                transport=transport)
    identity = None
    if checkpoint is not None:
        identity = dict(engine=engine, settings=_jsonable(settings.as_dict()), seed=int(seed),
                        frac_bits=int(frac_bits), crypto=crypto,
                        crypto_options=_jsonable(crypto_options or {}),
                        eval_every=int(eval_every), n_clients=dataset.n_clients,
                        data=dataset_fingerprint(dataset))
    if resume:
        description, model, folder = load_checkpoint(checkpoint)
        check_same_run(description, identity)
        run = engine_class.from_checkpoint(folder, dataset, settings, **options)
        check_same_run(description, dict(transport=_transport_settings(run)))
        run.model = model
        history = History.from_state(description["history"])
        history.p_star = p_star if p_star is not None else history.p_star
    else:
        earlier = None if checkpoint is None else latest_checkpoint(checkpoint)
        if earlier is not None:
            raise CheckpointError(f"{checkpoint} already holds a checkpoint ({earlier.name}): "
                                  f"pass resume=True to continue it, or choose another folder")
        run = engine_class(dataset, settings, **options)
        history = History(p_star=p_star)
    def save():
        save_checkpoint(checkpoint, dict(identity, transport=_transport_settings(run),
                                         round=run.round, history=history.state()),
                        run.model, run.checkpoint_files())

    train(run, history, max_rounds=max_rounds, tol=tol, rel_tol=rel_tol,
          eval_every=eval_every, validation=validation, progress=progress,
          callback=callback, stop=stop, save=None if checkpoint is None else save,
          save_every=checkpoint_every or eval_every, resumed=resume)
    return run, history


def train(run, history, *, max_rounds, tol=None, rel_tol=None, eval_every=1,
          validation=None, progress=False, callback=None, stop=None, save=None,
          save_every=None, resumed=False):
    """The loop of :func:`run_hyfdca` on an engine ``run`` already built (also the server
    side of a deployment, ``HyFDCARun.remote``): certify round 0 (unless ``resumed``),
    run rounds up to ``max_rounds``, certify every ``eval_every`` rounds and at the end,
    stop on the certified gap, divergence or ``stop()``; ``save()`` (if given) at round 0,
    every ``save_every`` rounds and at the end (before the end's certificate where that
    is off the ``eval_every`` schedule, so that a resume gives the uninterrupted run's
    bits; a resume of such a finished run makes that certificate). ``run.model`` is the
    certified point with the smallest primal. A fixed-point overflow raises
    :class:`Diverged` carrying the history so far."""

    def evaluate():
        try:
            primal, dual, w, iterate_primal, iterate_dual = _guarded(run, run.certificate)
        except MissingReplies:
            # a client is away (a transport that may lose it): certify when it is back
            if not (run.transport.may_lose and history.evaluations):
                raise
            run.skipped_certificates.append(run.round)
            last = history.last_evaluation
            return _certified_gap(history, last["primal"], last["dual"])
        if np.isfinite(primal - dual):   # (a diverged certificate is reported as that)
            _check_best_pair(run, {**history.evaluations,
                                   run.round: dict(primal=primal, dual=dual)})
        first = not history.evaluations
        history.add_evaluation(run.round, primal, dual, _accuracy(w, validation),
                               iterate_primal, iterate_dual)
        history.add_certificate_cost(run.round, run.certificate_costs[-1])
        gap, best_primal = _certified_gap(history, primal, dual)
        if first or primal == best_primal:  # the first, then the smallest finite primal
            run.model = w
        return gap, best_primal

    try:
        _train_rounds(run, history, evaluate, max_rounds, tol, rel_tol, eval_every,
                      progress, callback, stop, save, save_every, resumed)
    except Diverged as err:
        err.history = history
        raise
    return history


def _train_rounds(run, history, evaluate, max_rounds, tol, rel_tol, eval_every, progress,
                  callback, stop, save, save_every, resumed):
    """The rounds of :func:`train`."""
    if resumed:
        _check_best_pair(run, history.evaluations)   # the history as it was saved
        last = history.last_evaluation
        gap, primal = _certified_gap(history, last["primal"], last["dual"])
        if run.round >= max_rounds and max(history.evaluations) != run.round:
            # a finished run saved before its end's off-schedule certificate: make it
            gap, primal = evaluate()
    else:
        gap, primal = evaluate()
        if save is not None:
            save()
    rounds = range(run.round, max_rounds)
    if progress:
        from tqdm import tqdm
        rounds = tqdm(rounds, desc="HyFDCA", unit="round", initial=run.round,
                      total=max_rounds)
    if run_converged(run, gap, primal, tol, rel_tol) or not np.isfinite(gap):
        rounds = ()
    for _ in rounds:
        start = time.perf_counter()
        record_ = _guarded(run, run.step)
        record_["protocol_seconds"] = time.perf_counter() - start
        history.add_round(record_)
        stopping = run.round == max_rounds or (stop is not None and stop())
        on_schedule = run.round % eval_every == 0
        saved = False
        if save is not None and stopping and not on_schedule:
            # before the stop's extra certificate, which an uninterrupted run does not
            # make: later certificates depend on every earlier one, so a resume from
            # here certifies as the uninterrupted run does
            save()
            saved = True
        if on_schedule or stopping:
            gap, primal = evaluate()
            if progress:
                rounds.set_postfix(gap=f"{gap:.2e}")
            stopping |= run_converged(run, gap, primal, tol, rel_tol) or not np.isfinite(gap)
        if save is not None and not saved and (run.round % save_every == 0 or stopping):
            save()
        if callback is not None:
            callback(run)
        if stopping:
            break


def _check_best_pair(run, evaluations):
    """:func:`~hyfdca._certificate.check_best_pair` at ``run``'s rounding: the best primal
    and dual of different certificates checked against each other, before a certificate
    is recorded and on resume."""
    check_best_pair(evaluations, lambda primal: run_rounding(run, primal))


def _certified_gap(history, primal, dual):
    """(certified gap, best primal); NaN when this certificate diverged (the run stops)."""
    best_primal, best_dual = history.certified()
    if not np.isfinite(primal - dual):
        return np.nan, primal
    return best_primal - best_dual, best_primal


def _jsonable(value):
    """``value`` as it reads back from JSON (so that saved and current runs compare)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def check_run_arguments(max_rounds, eval_every, tol, rel_tol, checkpoint, checkpoint_every,
                         resume, frac_bits, seed):
    problems = [text for ok, text in (
        (is_whole(frac_bits) and frac_bits >= 1,
         f"frac_bits must be a whole number >= 1, got {frac_bits!r}"),
        (is_whole(seed) and seed >= 0, f"seed must be a whole number >= 0, got {seed!r}"),
        (is_whole(max_rounds) and max_rounds >= 0,
         f"max_rounds must be a whole number >= 0, got {max_rounds!r}"),
        (is_whole(eval_every) and eval_every >= 1,
         f"eval_every must be a whole number >= 1, got {eval_every!r}"),
        (tol is None or (np.isfinite(tol) and tol >= 0),
         f"tol must be None or a finite number >= 0, got {tol!r}"),
        (rel_tol is None or (np.isfinite(rel_tol) and rel_tol >= 0),
         f"rel_tol must be None or a finite number >= 0, got {rel_tol!r}"),
        (checkpoint_every is None or (is_whole(checkpoint_every) and checkpoint_every >= 1),
         f"checkpoint_every must be None or a whole number >= 1, got {checkpoint_every!r}"),
        (checkpoint is not None or (checkpoint_every is None and not resume),
         "checkpoint_every and resume need a checkpoint folder"),
    ) if not ok]
    if problems:
        raise ValueError("run_hyfdca: " + "; ".join(problems))


def converged(gap, primal, tol=None, rel_tol=None, rounding=0.0):
    """Whether the certified gap (best primal ``primal`` less best dual D = primal - gap)
    meets a tolerance, ``rounding`` being how far fixed-point rounding can have moved it
    (:func:`~hyfdca._certificate.certificate_rounding`): P - P* <= gap + rounding and P* >=
    D - rounding, so gap + rounding <= tol bounds P - P* by tol, and gap + rounding <=
    rel_tol (D - rounding) bounds (P - P*) / P* by rel_tol (on P in place of D it bounded
    it by rel_tol / (1 - rel_tol) only). Where D - rounding is not positive there is no
    relative bound (P* = 0: zero targets); rel_tol is then met once the gap is within the
    rounding, where no certificate can do better."""
    bound, lower = gap + rounding, primal - gap - rounding   # P - P* <= bound, P* >= lower
    if tol is not None and bound <= tol:
        return True
    if rel_tol is None:
        return False
    return bool(bound <= rel_tol * lower if lower > 0 else gap <= rounding)


def run_rounding(run, primal):
    """The rounding bound e of ``run``'s certificates (its loss, fixed point and clients)
    at best primal ``primal``."""
    return certificate_rounding(run.settings.loss, primal, frac_bits=run.frac_bits,
                                n_clients=run.n_clients)


def run_converged(run, gap, primal, tol=None, rel_tol=None):
    """:func:`converged` with the rounding bound of ``run``'s certificates. At gap 0 it
    says whether any certificate at best primal ``primal`` could meet the tolerance."""
    return converged(gap, primal, tol, rel_tol, run_rounding(run, primal))


class Diverged(OverflowError):
    """The iterates left the fixed-point range: the run diverged. ``history`` holds the
    rounds and certificates before it (set by :func:`train`)."""

    history = None


def _guarded(run, operation):
    """Run a protocol operation; turn a fixed-point overflow into an error that says what
    it means for the run."""
    try:
        return operation()
    except OverflowError as err:
        raise Diverged(
            f"round {run.round}: {err}. The iterates left the range the fixed-point "
            f"encoding can hold: the run diverged (try a safer variant such as "
            f"'sigma-safe' or a smaller H) or the data or targets need scaling"
        ) from err


def _transport_settings(run):
    """How the run's messages travel, as a resume must match it (None: no messages)."""
    transport = getattr(run, "transport", None)
    return None if transport is None else transport.settings()


def _accuracy(w, validation):
    if validation is None:
        return None
    X, y = validation
    return float(np.mean(sign_labels(X @ w) == y))
