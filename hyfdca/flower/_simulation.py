"""A HyFDCA job on Flower's simulation engine (Ray): the same apps as a deployment, one
virtual SuperNode per party."""

import json
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hyfdca.flower._client_app import make_client_app
from hyfdca.flower._files import write_block
from hyfdca.flower._server_app import make_server_app, run_options


def simulate(dataset, settings, folder, *, client_keys, server_keys, max_rounds=100,
             eval_every=10, rel_tol=None, seed=0, frac_bits=32, phase_timeout=None,
             predict=None, client_mods=()):
    """Write each party's block to ``folder``/data, run the job on Flower's simulation
    engine with the key files of ``hyfdca.flower.write_keys``, and return (model, the
    history as JSON rows) as the ServerApp wrote them to ``folder``/output. ``predict``:
    a FederatedDataset of new samples split like ``dataset``; the ServerApp then writes
    their federated predictions to ``folder``/output/predictions.npy. ``client_mods``:
    Flower mods around every ClientApp message (fault injection in tests).

    The parties run in Ray's worker processes, which Ray starts at niceness 15; they run
    at the caller's priority here (:func:`_workers_at_callers_priority`) unless the
    caller set ``RAY_worker_niceness``."""
    from flwr.simulation import run_simulation

    folder = Path(folder)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    for k, block in enumerate(dataset.blocks):
        write_block(folder / "data" / f"client-{k}.npz", block)
    if predict is not None:
        (folder / "predict").mkdir(exist_ok=True)
        for k, block in enumerate(predict.blocks):
            write_block(folder / "predict" / f"client-{k}.npz", block)
    config = {"num-clients": dataset.n_clients, "server-keys": str(server_keys),
              "client-keys": str(client_keys), "data-dir": str(folder / "data"),
              "settings": json.dumps(settings.as_dict()), "seed": int(seed),
              "frac-bits": int(frac_bits), "max-rounds": int(max_rounds),
              "eval-every": int(eval_every), "rel-tol": float(rel_tol or 0.0),
              "phase-timeout": float(phase_timeout or 0.0),
              "output": str(folder / "output"),
              "predict-dir": str(folder / "predict"),
              "predict-samples": 0 if predict is None else int(predict.n_samples)}
    run_options(config)   # a bad configuration is refused here, not inside the simulation
    with _workers_at_callers_priority():
        run_simulation(server_app=make_server_app(config),
                       client_app=make_client_app(config, client_mods),
                       num_supernodes=dataset.n_clients,
                       backend_config={"client_resources": {"num_cpus": 1}})
    out = folder / "output"
    if not (out / "model.npy").is_file():
        raise RuntimeError(f"the simulated ServerApp wrote no model to {out} (see the "
                           f"log above for its error)")
    history = json.loads((out / "history.json").read_text())
    return np.load(out / "model.npy"), history


@contextmanager
def _workers_at_callers_priority():
    """Ray starts its workers at niceness 15 (``RAY_worker_niceness``) so that a driver's
    own work comes first; in a simulation the workers do the parties' work, and beside
    other jobs on the machine niceness 15 starves them (a 2-round 2x2 job: 140 s against
    26 s with two benchmarks on both cores). The value is an increment over the niceness
    Ray's processes inherit from the caller, so 0 keeps the caller's (Ray's own job
    manager does the same for its drivers); a value the caller set is kept. The
    environment is restored afterwards."""
    if "RAY_worker_niceness" in os.environ:
        yield
        return
    os.environ["RAY_worker_niceness"] = "0"
    try:
        yield
    finally:
        os.environ.pop("RAY_worker_niceness", None)
