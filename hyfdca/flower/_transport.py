"""The transport seam over Flower: each protocol phase is one ``send_and_receive`` on the
ServerApp's grid."""

from flwr.app import Message

from hyfdca._transport import MissingReplies, Transport
from hyfdca.flower._wire import PHASE_ACTIONS, pack, unpack


class ClientError(RuntimeError):
    """A client answered a phase with an error (its message names the cause)."""


def send_all(grid, outgoing, names, timeout=None):
    """One Flower round trip: the reply to each outgoing message, in order (None where
    none came within ``timeout``); a reply carrying an error raises :class:`ClientError`
    naming the sender as ``names[i]``."""
    replies = {r.metadata.src_node_id: r
               for r in grid.send_and_receive(outgoing, timeout=timeout)}
    answers = []
    for message, name in zip(outgoing, names):
        answer = replies.get(message.metadata.dst_node_id)
        if answer is not None and answer.has_error():
            raise ClientError(f"{name}: {answer.error.reason}")
        answers.append(answer)
    return answers


class FlowerTransport(Transport):
    """Messages of one phase go to the clients' SuperNodes at once (every message is
    built first, as docs/architecture.md allows: the same iterates); a reply that does not
    come within ``timeout`` seconds counts as missing (:class:`MissingReplies`), a reply
    carrying an error raises :class:`ClientError`."""

    def __init__(self, grid, nodes, evaluator, timeout=None, record=False):
        super().__init__(evaluator, record)
        self.grid, self.nodes, self.timeout = grid, list(nodes), timeout

    def exchange(self, phase, clients, build, receive):
        self._open(phase)
        outgoing = []
        for k in clients:
            message = build(k)
            self._sent(phase, k, message)
            outgoing.append(Message(pack(message), dst_node_id=self.nodes[k],
                                    message_type=f"query.{PHASE_ACTIONS[phase]}"))
        answers = send_all(self.grid, outgoing, [f"client {k}, phase {phase!r}"
                                                 for k in clients], self.timeout)
        missing = []
        for k, answer in zip(clients, answers):
            if answer is None:
                missing.append(k)
                continue
            reply = unpack(answer.content)
            self._received(phase, k, reply)
            receive(k, reply)
        if missing:
            raise MissingReplies(phase, missing)
