"""The ClientApp: a party answering HyFDCA's phases with the same ``Client`` code as in
process. It loads its own block and keys from local files and keeps its state in the
node's context between messages.

Node configuration (``flower-supernode --node-config``), else the run configuration, else
the ``defaults`` of :func:`make_client_app` (a simulation's):

* ``client-id``: the party's index k (simulation: the node's ``partition-id``);
* ``data-file``: its block, an .npz of ``hyfdca.flower.write_block`` (simulation:
  ``data-dir``/client-<k>.npz from the run configuration);
* ``keys-file``: the clients' key file of ``hyfdca keys`` (simulation: ``client-keys``);
* ``predict-file``: its block of new samples to predict, same layout as ``data-file``
  (simulation: ``predict-dir``/client-<k>.npz).
"""

import json
import logging
import pickle
from functools import lru_cache, partial

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp

from feddata import block_mean_sq, block_sq_norm
from hyfdca._checkpoint import array_bytes
from hyfdca._client import Client
from hyfdca._messages import EntryTagRequest, PredictRequest
from hyfdca._settings import HyFDCASettings
from hyfdca.flower._files import read_block, read_client_keys
from hyfdca.flower._wire import (CONFIGURE, DESCRIBE, NO_SESSION, PHASE_ACTIONS, RECORD,
                                 attempts, pack, unpack)

SESSION = "hyfdca-session"
_LOG = logging.getLogger("hyfdca.flower.party")


def _setting(context, key, defaults, default=None):
    for source in (context.node_config, context.run_config, defaults):
        if key in source:
            return source[key]
    return default


def _party_file(context, defaults, kind, k):
    """``<kind>-file`` of the node, else ``<kind>-dir``/client-<k>.npz."""
    return (_setting(context, f"{kind}-file", defaults)
            or f"{_setting(context, f'{kind}-dir', defaults)}/client-{k}.npz")


def _store(context, client, settings_json, held=0, snapshot=b""):
    """Keep the client's session in the node's context until its next message, with the
    snapshot of its state from before round attempt ``held`` (0: none)."""
    context.state[SESSION] = ConfigRecord({"session": pickle.dumps(client.session()),
                                           "settings": settings_json, "held": held,
                                           "snapshot": snapshot})


def _session_for(stored, attempt, committed):
    """(session bytes, held attempt, snapshot) to answer a message of round attempt
    ``attempt`` (0: outside the rounds) when the server's last committed attempt for this
    client is ``committed``: a held attempt that a later message shows was not committed
    is rolled back to its snapshot; a new attempt takes a snapshot first."""
    session, held, snapshot = stored["session"], int(stored["held"]), stored["snapshot"]
    if held and held != attempt:
        if committed < held:
            session = snapshot
        held, snapshot = 0, b""
    if attempt and not held:
        held, snapshot = attempt, session
    return session, held, snapshot


def _identity(context, defaults):
    """(client id, data file, keys file) of this node."""
    k = int(_setting(context, "client-id", defaults,
                     context.node_config.get("partition-id", -1)))
    if k < 0:
        raise ValueError("no client-id in the node configuration")
    data = _party_file(context, defaults, "data", k)
    keys = (_setting(context, "keys-file", defaults)
            or _setting(context, "client-keys", defaults))
    if not keys:
        raise ValueError(f"client {k}: no keys-file in the node configuration")
    return k, data, keys


@lru_cache(maxsize=8)
def _block(path):
    return read_block(path)


@lru_cache(maxsize=8)
def _keys(path):
    return read_client_keys(path)


def describe(message, context, defaults):
    """Who this node is: its client id, its I_k, J_k, ||X^k||_F^2 and |I_k| ||m_k||^2
    (public set-up information, ``feddata.Layout``)."""
    k, data, _ = _identity(context, defaults)
    block = _block(data)
    return Message(RecordDict({RECORD: ConfigRecord({
        "client": k, "sample_ids": array_bytes(block.sample_ids),
        "feature_ids": array_bytes(block.feature_ids),
        "sq_norm": block_sq_norm(block.X), "mean_sq": block_mean_sq(block.X)})}),
        reply_to=message)


def configure(message, context, defaults):
    """Start a session: the bound settings and the draw stream from the server."""
    k, data, keys_file = _identity(context, defaults)
    config = message.content[RECORD]
    keys, masker = _keys(keys_file)
    if keys.codec.frac_bits != int(config["frac_bits"]):
        raise ValueError(f"client {k}: its keys encode {keys.codec.frac_bits} fractional "
                         f"bits, the run {config['frac_bits']}")
    settings = HyFDCASettings.from_dict(json.loads(config["settings"]))
    client = Client(k, _block(data), keys, masker, settings, json.loads(config["stream"]))
    _store(context, client, config["settings"])
    return Message(RecordDict({RECORD: ConfigRecord({"client": k})}), reply_to=message)


class PhaseFailed(RuntimeError):
    """A party failed to answer a phase. Flower sends an exception's text, and on its
    simulation engine the traceback with every chained error, to the server, so this one
    names only the party, the request and the error's type, and chains nothing; the
    error itself, whose text can hold the party's values (an encoder's overflow prints
    the largest value, a malformed data file its token), is logged in the party's own
    log (logger ``hyfdca.flower.party``) and kept as ``PhaseFailed.error`` there."""

    def __init__(self, party, request, error):
        super().__init__(f"client {party}: {type(error).__name__} while answering "
                         f"{request} (details in the party's own log)")
        self.error = error


def _failed(party, request, error):
    """:class:`PhaseFailed` for ``error``, logged here first with its details."""
    _LOG.error("client %s: %s while answering %s", party, type(error).__name__, request,
               exc_info=error)
    return PhaseFailed(party, request, error)


def answered(client, request):
    """The client's reply to ``request``, or :class:`PhaseFailed`."""
    try:
        return client.handle(request)
    except Exception as error:
        raise _failed(client.id, type(request).__name__, error) from None


def guarded(handler, action):
    """``handler`` whose every error reaches the server as :class:`PhaseFailed` only:
    reading its files, the session, the keys, the prediction block (``answered`` names
    the request of a protocol phase)."""
    def run(message, context, defaults):
        try:
            return handler(message, context, defaults)
        except PhaseFailed:
            raise
        except Exception as error:
            party = context.node_config.get("client-id",
                                            context.node_config.get("partition-id", "?"))
            raise _failed(party, action, error) from None
    return run


def answer(message, context, defaults):
    """One protocol phase: the Client's reply to the decoded message."""
    k, data, keys_file = _identity(context, defaults)
    if SESSION not in context.state:  # restarted under the same node id: not configured
        return Message(RecordDict({RECORD: ConfigRecord({NO_SESSION: 1})}), reply_to=message)
    stored = context.state[SESSION]
    keys, masker = _keys(keys_file)
    settings = HyFDCASettings.from_dict(json.loads(stored["settings"]))
    session, held, snapshot = _session_for(stored, *attempts(message.content))
    client = Client.resume(_block(data), keys, masker, settings, pickle.loads(session))
    request = unpack(message.content)
    if isinstance(request, (PredictRequest, EntryTagRequest)):
        client.hold_for_prediction(_block(_party_file(context, defaults, "predict", k)))
    reply = answered(client, request)
    _store(context, client, stored["settings"], held, snapshot)
    return Message(pack(reply), reply_to=message)


def make_client_app(defaults=None, mods=()):
    """A ClientApp; ``defaults`` fill in what neither the node nor the run configures;
    ``mods``: Flower mods around every message (e.g. for fault injection in tests)."""
    defaults = dict(defaults or {})
    app = ClientApp(mods=list(mods))
    for action, handler in ((DESCRIBE, describe), (CONFIGURE, configure),
                            *((a, answer) for a in PHASE_ACTIONS.values())):
        app.query(action)(partial(guarded(handler, action), defaults=defaults))
    return app


app = make_client_app()
