"""The transport seam over Flower: each protocol phase is one ``send_and_receive`` on the
ServerApp's grid."""

from flwr.app import Message

from hyfdca._transport import MissingReplies, Transport
from hyfdca.flower._wire import PHASE_ACTIONS, pack, unpack


class ClientError(RuntimeError):
    """A client answered a phase with an error (its message names the cause)."""


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
        replies = {r.metadata.src_node_id: r
                   for r in self.grid.send_and_receive(outgoing, timeout=self.timeout)}
        missing = []
        for k in clients:
            answer = replies.get(self.nodes[k])
            if answer is None:
                missing.append(k)
                continue
            if answer.has_error():
                raise ClientError(f"client {k}, phase {phase!r}: {answer.error.reason}")
            reply = unpack(answer.content)
            self._received(phase, k, reply)
            receive(k, reply)
        if missing:
            raise MissingReplies(phase, missing)
