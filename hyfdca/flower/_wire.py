"""HyFDCA messages inside Flower messages: one Flower message type per protocol phase,
the HyFDCA message as the bytes of ``encode_message`` (no pickle on the wire)."""

from flwr.app import ConfigRecord, RecordDict

from hyfdca._messages import decode_message, encode_message

# protocol phase (hyfdca._protocol) -> the action of its Flower message type "query.<action>"
# (Flower wants Python names)
PHASE_ACTIONS = {
    "set-up: shared row norms": "setup_norm_parts",
    "set-up: row norms": "setup_norms",
    "dual sync + primal aggregation": "dual_sync",
    "secure inner product": "inner_products",
    "local dual method": "local_dual_method",
    "primal aggregation": "primal_aggregation",
    "second secure inner product": "second_inner_products",
    "rejoin: dual sync + primal contribution": "resync",
    "certificate: dual sync + primal aggregation": "certificate_sync",
    "certificate: inner products": "certificate_inner_products",
    "certificate: loss and conjugate sums": "certificate_sums",
    "prediction": "predict",
    "prediction: entry tags": "predict_entry_tags",
}
# before the protocol: the server asks each node who it is, then configures it
DESCRIBE, CONFIGURE = "describe", "configure"
RECORD = "hyfdca"
# the reply of a node that holds no session (restarted under the same node id): absent
NO_SESSION = "no_session"


def pack(message, attempt=0, committed=0):
    """RecordDict carrying one HyFDCA message; a message to a client also carries the
    round attempt it belongs to (0: none) and the last attempt the server committed for
    that client (``hyfdca.flower._transport``)."""
    return RecordDict({RECORD: ConfigRecord({"message": encode_message(message),
                                             "attempt": int(attempt),
                                             "committed": int(committed)})})


def unpack(content):
    return decode_message(content[RECORD]["message"])


def attempts(content):
    """(attempt, committed) of a message to a client."""
    record = content[RECORD]
    return int(record.get("attempt", 0)), int(record.get("committed", 0))

