"""The transport seam: how one phase's messages reach the clients and their replies come
back (docs/architecture.md).

:class:`Transport` is the interface the run loop (``hyfdca._protocol``) talks to: one
:meth:`~Transport.exchange` per round trip, a message per client down and a reply per
client up. ``Server`` and ``Client`` never see the transport: the server builds the
messages, a client answers them (``Client.handle``). :class:`InProcessTransport` hands
them to Client objects in this process; a networked transport (processes, sockets) would
implement ``exchange`` with the same accounting and carry the messages as bytes
(``hyfdca._messages.encode_message``).
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from hyfdca._messages import message_nbytes


@dataclass
class Traffic:
    """Round trips and bytes since the last reset."""

    rtc: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    phases: list = field(default_factory=list)


class Transport(ABC):
    """Delivers one phase's messages and returns the replies; counts round trips (one per
    exchange) and bytes each way (ciphertexts at the backend's size).

    With ``record=True`` every message the server receives is kept in ``server_inbox`` as
    (phase, client id, message), for audits, and everything the server saw, sent and
    received, in order, in ``transcript`` as (direction "down" or "up", phase, client id,
    message), for attacks on it (``hyfdca.attacks``).
    """

    def __init__(self, evaluator, record=False):
        self.evaluator = evaluator
        self.record = record
        self.server_inbox = []
        self.transcript = []
        self.traffic = Traffic()

    @abstractmethod
    def exchange(self, phase, clients, build, receive):
        """One round trip with ``clients`` (ids, in order): client k is sent ``build(k)``
        and its reply is handed to ``receive(k, reply)``, in client order.

        :class:`InProcessTransport` builds client k's message after the replies of the
        clients before it were received (the one-process order, in which a refresh of
        shared ciphertexts by one client spares the next). A networked transport may
        build every message first and send them at once: the iterates are the same, the
        masking backend's refresh traffic can be larger. Implementations call
        :meth:`_open` once and :meth:`_sent` / :meth:`_received` per message."""

    def _open(self, phase):
        self.traffic.rtc += 1
        self.traffic.phases.append(phase)

    def _sent(self, phase, client_id, message):
        self.traffic.bytes_down += message_nbytes(message, self.evaluator)
        if self.record:
            self.transcript.append(("down", phase, client_id, message))

    def _received(self, phase, client_id, reply):
        self.traffic.bytes_up += message_nbytes(reply, self.evaluator)
        if self.record:
            self.server_inbox.append((phase, client_id, reply))
            self.transcript.append(("up", phase, client_id, reply))

    def take_traffic(self):
        """The traffic since the last call, and reset."""
        traffic, self.traffic = self.traffic, Traffic()
        return traffic


class InProcessTransport(Transport):
    """Clients in this process: each message goes to ``clients[k].handle``, client after
    client in the order given."""

    def __init__(self, clients, evaluator, record=False):
        super().__init__(evaluator, record)
        self.clients = clients

    def exchange(self, phase, clients, build, receive):
        self._open(phase)
        for k in clients:
            message = build(k)
            self._sent(phase, k, message)
            reply = self.clients[k].handle(message)
            self._received(phase, k, reply)
            receive(k, reply)
