"""A HyFDCA run in a process of its own, for the checkpoint tests (test_checkpoint.py).

    python checkpoint_job.py OUT CHECKPOINT ENGINE CRYPTO [--resume] [--kill ROUND:WHERE]

runs breast cancer on a 3x3 grid at participation 0.5 for ROUNDS rounds, checkpointing
every 3, and writes the final model, alpha and history to OUT (JSON). ``--kill R:W``
SIGKILLs the process in round R (1-based: while computing round R) at W: a protocol
phase (its name, as the transport sees it), "kernel" (the batched engine's primal
updates), or "save:N" (during the checkpoint written at the end of round R, after N of
its files).
"""

import json
import os
import signal
import sys

import numpy as np
from sklearn.datasets import load_breast_cancer

from feddata import partition as P
from hyfdca import HyFDCASettings, InProcessTransport, run_hyfdca
from hyfdca import _batched_kernels, _checkpoint

ROUNDS, EVERY = 14, 3


def problem():
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    settings = HyFDCASettings.from_variant("auto", lam=0.01, participation="fraction",
                                           fraction=0.5)
    return P.hybrid_grid(X, np.where(y == 1, 1.0, -1.0), 3, 3), settings


def options(crypto):
    return dict(crypto_options=dict(n_length=512, insecure=True)) if "paillier" in crypto \
        else {}


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def arm(kill, engine, state):
    """Install the SIGKILL at round R, place W; return the transport factory (or None)."""
    round_, where = kill.split(":", 1)
    round_ = int(round_)
    if where.startswith("save:"):
        after, write = int(where.split(":")[1]), _checkpoint.write_atomic
        written = []

        def write_then_maybe_die(path, data):
            if f"round-{round_:06d}" in str(path) or (written and path.name == "LATEST"):
                if len(written) == after:
                    die()
                written.append(path)
            write(path, data)
        _checkpoint.write_atomic = write_then_maybe_die
        return None
    if engine == "batched":
        kernel = _batched_kernels.primal_updates

        def primal_updates_then_die(*args, **kwargs):
            if state["round"] == round_ - 1:
                die()
            return kernel(*args, **kwargs)
        _batched_kernels.primal_updates = primal_updates_then_die
        return None

    class KillingTransport(InProcessTransport):
        def exchange(self, phase, clients, build, receive):
            if phase == where and state["round"] == round_ - 1:
                die()
            super().exchange(phase, clients, build, receive)

    return KillingTransport


def main(argv):
    out, checkpoint, engine, crypto = argv[:4]
    resume = "--resume" in argv
    kill = argv[argv.index("--kill") + 1] if "--kill" in argv else None
    fed, settings = problem()
    state = {"round": 0}
    transport = arm(kill, engine, state) if kill else None
    run, history = run_hyfdca(
        fed, settings, max_rounds=ROUNDS, eval_every=2, engine=engine, crypto=crypto,
        checkpoint=checkpoint, checkpoint_every=EVERY, resume=resume, transport=transport,
        callback=lambda r: state.update(round=r.round), **options(crypto))
    alpha = run.alpha if engine == "batched" else run.clients[0].keys.decrypt(
        run.server.enc_alpha)
    with open(out, "w") as handle:
        json.dump(dict(model=run.model.tolist(), alpha=np.asarray(alpha).tolist(),
                       history=history.state()), handle)


if __name__ == "__main__":
    main(sys.argv[1:])
