"""The ServerApp: HyFDCA's round loop (``HyFDCARun.remote`` and ``hyfdca._run.train``)
driving the parties' SuperNodes through Flower. The server loads only the public key
file; it never holds data, labels or a private key.

Run configuration (``flwr run`` / ``pyproject.toml`` ``[tool.flwr.app.config]``, or the
simulation helper):

* ``num-clients``: K, the parties to wait for; ``node-timeout``: seconds to wait (120);
* ``server-keys``: the server's key file of ``hyfdca keys``;
* ``settings``: HyFDCASettings as JSON (``json.dumps(settings.as_dict())``);
* ``seed``, ``frac-bits``, ``max-rounds``, ``eval-every``, ``rel-tol`` (0: none),
  ``phase-timeout`` (seconds a phase waits for replies; 0: no limit, and a party that
  does not answer stops the run; with a limit, it is absent and may rejoin: needs
  participation "fraction" or "cyclic");
* ``insecure``: true to allow the plaintext backend's keys (refused by default);
* ``output``: folder for model.npy, history.json, history.csv and events.json (parties
  lost and rejoined, certificates skipped while a party was away);
* ``predict-samples``: after training, predict this many new samples whose features the
  parties hold (their ``predict-file``), written as predictions.npy and margins.npy.

Keys missing from the run configuration come from the ``defaults`` of
:func:`make_server_app` (a simulation's).
"""

import json
import os
import time
from functools import partial
from logging import INFO, WARNING
from pathlib import Path

import numpy as np
from flwr.common.logger import log
from flwr.serverapp import ServerApp

from feddata import History, Layout
from hyfdca._checkpoint import array_bytes, bytes_array, write_atomic
from hyfdca._protocol import HyFDCARun, PredictionError
from hyfdca._run import check_run_arguments, train
from hyfdca._settings import HyFDCASettings
from hyfdca._transport import MissingReplies
from hyfdca.flower._files import read_server_keys
from hyfdca.flower._transport import ClientError, FlowerTransport, ask
from hyfdca.flower._wire import CONFIGURE, DESCRIBE


def wait_for_nodes(grid, count, timeout):
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(nodes)} of {count} SuperNodes connected within "
                               f"{timeout} s")
        time.sleep(0.05)


def connect(grid, config):
    """(layout, node id of each client k) from the parties' own descriptions."""
    count = int(config["num-clients"])
    nodes = wait_for_nodes(grid, count, float(config.get("node-timeout", 120)))
    described = ask(grid, nodes, DESCRIBE, [{}] * len(nodes))
    ids = [int(d["client"]) for d in described]
    if sorted(ids) != list(range(count)):
        raise ValueError(f"the SuperNodes report client ids {sorted(ids)}; expected 0..{count - 1}")
    order = np.argsort(ids)
    layout = Layout.from_ids([bytes_array(described[i]["sample_ids"]) for i in order],
                             [bytes_array(described[i]["feature_ids"]) for i in order],
                             sum(float(described[i]["sq_norm"]) for i in order),
                             sum(float(described[i]["mean_sq"]) for i in order))
    return layout, [nodes[i] for i in order]


def run_options(config):
    """(max_rounds, eval_every, rel_tol, seconds a phase waits or None, seed, frac_bits)
    of a job's run configuration, checked as ``run_hyfdca`` checks its arguments (and
    the phase timeout: a finite number >= 0, 0 for no limit) before any party is asked
    anything."""
    max_rounds, eval_every, seed, frac_bits = (
        _count(config.get(name, default)) for name, default in
        (("max-rounds", 100), ("eval-every", 10), ("seed", 0), ("frac-bits", 32)))
    rel_tol = float(config.get("rel-tol", 0)) or None
    check_run_arguments(max_rounds, eval_every, None, rel_tol, None, None, False, frac_bits,
                        seed)
    timeout = float(config.get("phase-timeout", 0))
    if not 0 <= timeout < float("inf"):
        raise ValueError(f"phase-timeout must be a finite number of seconds >= 0 (0: no "
                         f"limit), got {timeout}")
    return max_rounds, eval_every, rel_tol, timeout or None, seed, frac_bits


def _count(value):
    """A configuration's count as an int where it is a whole number (TOML may give 32.0);
    anything else as it is, for the checks to name."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def main(grid, context, defaults):
    config = {**defaults, **context.run_config}
    max_rounds, eval_every, rel_tol, timeout, seed, frac_bits = run_options(config)
    evaluator = read_server_keys(config["server-keys"])
    if evaluator.protection.startswith("none") and not config.get("insecure", False):
        raise ValueError("the server keys are the plaintext backend's: every value would "
                         "cross the network in the clear; make keys with `hyfdca keys "
                         "--crypto mask|paillier|fast-paillier`, or set insecure = true in "
                         "the run configuration for a trial without protection")
    layout, nodes = connect(grid, config)
    settings = HyFDCASettings.from_dict(json.loads(config["settings"]))
    bound = settings.bind(layout)
    streams = HyFDCARun.client_streams(layout, bound, seed)

    def configuration(k):
        return {"settings": json.dumps(bound.as_dict()), "stream": json.dumps(list(streams[k])),
                "frac_bits": frac_bits}
    ask(grid, nodes, CONFIGURE, [configuration(k) for k in range(len(nodes))])
    transport = FlowerTransport(grid, nodes, evaluator, timeout=timeout, layout=layout,
                                configure=configuration)
    run = HyFDCARun.remote(layout, settings, evaluator, transport, frac_bits=frac_bits,
                           seed=seed)
    history = History()
    train(run, history, max_rounds=max_rounds, eval_every=eval_every, rel_tol=rel_tol,
          callback=lambda run: log(INFO, "HyFDCA: round %d done (%d parties)", run.round,
                                   history.rounds[-1]["available"]))
    out = Path(config["output"])
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("predictions.npy", "margins.npy"):   # an earlier job's, in this folder
        (out / stale).unlink(missing_ok=True)
    write_atomic(out / "model.npy", array_bytes(run.model))
    _written(out / "history.json", history.to_json)
    _written(out / "history.csv", history.to_csv)
    events = {"events": transport.events, "skipped_certificates": run.skipped_certificates,
              "rejoins": run.rejoin_costs}
    n_new = int(config.get("predict-samples", 0))
    if n_new and transport.lost:  # prediction needs every party's features
        events["prediction"] = f"skipped: clients {sorted(transport.lost)} are away"
        log(WARNING, "HyFDCA: prediction skipped, clients %s are away", sorted(transport.lost))
    elif n_new:
        try:
            labels, margins = run.predict(n_new)
        except (MissingReplies, ClientError, PredictionError) as err:   # lost, or not covered
            events["prediction"] = f"skipped: {err}"
            log(WARNING, "HyFDCA: prediction skipped: %s", err)
        else:
            write_atomic(out / "predictions.npy", array_bytes(labels))
            write_atomic(out / "margins.npy", array_bytes(margins))
    write_atomic(out / "events.json", json.dumps(events).encode())


def _written(path, write):
    """``write(a temporary path)``, then the temporary file renamed to ``path``: a kill
    leaves the old file or the new one, never half of one."""
    temporary = path.with_name(f".{path.name}.tmp")
    write(temporary)
    os.replace(temporary, path)


def make_server_app(defaults=None):
    """A ServerApp; ``defaults`` fill in what the run configuration does not give."""
    defaults = dict(defaults or {})
    app = ServerApp()
    app.main()(partial(main, defaults=defaults))
    return app


app = make_server_app()
