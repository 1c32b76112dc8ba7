"""The in-process channel: the only path between server and clients, fully accounted."""

from dataclasses import dataclass, field

from hyfdca._messages import message_nbytes


@dataclass
class Traffic:
    """Round trips and bytes since the last reset."""

    rtc: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    phases: list = field(default_factory=list)


class Channel:
    """Delivers messages and counts bytes each way and round trips (one per phase).

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
        self._phase = None

    def round_trip(self, phase):
        """Open a new phase: one server-to-clients-and-back exchange."""
        self._phase = phase
        self.traffic.rtc += 1
        self.traffic.phases.append(phase)

    def down(self, client_id, message):
        self.traffic.bytes_down += message_nbytes(message, self.evaluator)
        if self.record:
            self.transcript.append(("down", self._phase, client_id, message))
        return message

    def up(self, client_id, message):
        self.traffic.bytes_up += message_nbytes(message, self.evaluator)
        if self.record:
            self.server_inbox.append((self._phase, client_id, message))
            self.transcript.append(("up", self._phase, client_id, message))
        return message

    def take_traffic(self):
        """The traffic since the last call, and reset."""
        traffic, self.traffic = self.traffic, Traffic()
        return traffic
