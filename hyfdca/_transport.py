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

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from hyfdca._messages import message_nbytes


@dataclass
class Traffic:
    """Round trips, messages and bytes since the last reset: down, every message the
    server sends (a retransmission too); up, every reply that reaches it (a reply lost on
    the way, or late, is not counted; the client's work on it is, in the encryption
    counts); a round trip per phase, however many retransmissions it took."""

    rtc: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    messages_up: int = 0
    messages_down: int = 0
    phases: list = field(default_factory=list)


class Transport(ABC):
    """Delivers one phase's messages and returns the replies; counts round trips (one per
    exchange) and bytes each way (ciphertexts at the backend's size).

    With ``record=True`` every message the server receives is kept in ``server_inbox`` as
    (phase, client id, message), for audits, and everything the server saw, sent and
    received, in order, in ``transcript`` as (direction "down" or "up", phase, client id,
    message), for attacks on it (``hyfdca.attacks``). Both keep copies: the server updates
    some of what it received in place (a client's stored parts), and the record is of what
    crossed the wire when it did.

    ``may_lose``: whether a client's reply can fail to arrive. Then a round runs in
    attempts (``HyFDCARun.step``): :meth:`start_attempt` with its clients, and
    :meth:`end_attempt` with ``committed=False`` when a reply was lost (the server rolls
    its own state back; the transport sees that the clients roll theirs back) and the
    round runs again without the lost clients. :meth:`reachable` drops the clients the
    transport knows cannot be reached, and :meth:`rejoining` names the clients that came
    back having lost their state (the run resyncs them, ``HyFDCARun.rejoin``).
    ``start_round`` tells the transport a round (or, with None, an exchange outside the
    rounds) begins.
    """

    may_lose = False

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

    def start_round(self, round_=None):
        """A new round ``round_`` (None: an exchange outside the rounds) begins."""

    def start_attempt(self, clients):
        """An attempt at the round with ``clients`` begins."""

    def end_attempt(self, committed):
        """The attempt was applied (``committed``) or is being rolled back."""

    def reachable(self, clients):
        """The ``clients`` (sorted ids) that can be reached this round."""
        return clients

    def rejoining(self, round_):
        """Clients back after losing their state, to be resynced before round ``round_``."""
        return []

    def rejoined(self, k, ok):
        """Client k's rejoin went through (``ok``) or not (it is still away)."""

    def away(self):
        """Clients whose rejoin is still owed (sorted ids): they lost their state."""
        return []

    def settings(self):
        """What a resumed run's transport must match (a checkpoint keeps it): whether it
        can lose messages, and how (every lossless transport delivers alike)."""
        return dict(may_lose=self.may_lose)

    def state(self):
        """What a checkpoint keeps of the transport between rounds (None: nothing)."""
        return None

    def load_state(self, state):
        """Continue from :meth:`state`."""

    def _open(self, phase):
        self.traffic.rtc += 1
        self.traffic.phases.append(phase)

    def _sent(self, phase, client_id, message):
        self.traffic.bytes_down += message_nbytes(message, self.evaluator)
        self.traffic.messages_down += 1
        if self.record:
            self.transcript.append(("down", phase, client_id, copy.deepcopy(message)))

    def _received(self, phase, client_id, reply):
        self.traffic.bytes_up += message_nbytes(reply, self.evaluator)
        self.traffic.messages_up += 1
        if self.record:
            kept = copy.deepcopy(reply)
            self.server_inbox.append((phase, client_id, kept))
            self.transcript.append(("up", phase, client_id, kept))

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


FAULTS = ("drop", "delay", "duplicate", "crash", "restart")


def _outside_rounds(phase):
    """The set-up, a rejoin and the certificate change no round's state: their messages
    are retransmitted, and a crash there is a lost message."""
    return phase.startswith(("set-up", "rejoin", "certificate"))


class MissingReplies(RuntimeError):
    """Clients whose reply did not arrive in a phase (after any retransmissions)."""

    def __init__(self, phase, clients):
        self.phase, self.clients = phase, sorted(int(k) for k in clients)
        super().__init__(f"phase {phase!r}: no reply from client(s) {self.clients}")


@dataclass
class FaultCounts:
    """What a :class:`FaultyTransport` did to the messages so far."""

    dropped: int = 0
    delayed: int = 0
    duplicated: int = 0
    crashed: int = 0
    restarted: int = 0
    retransmitted: int = 0
    stale_discarded: int = 0
    duplicates_ignored: int = 0


class FaultyTransport(InProcessTransport):
    """In-process delivery with injected faults, each message independently (one seeded
    stream: the same seed gives the same faults):

    * ``drop``: the message (down or up) is lost;
    * ``delay``: it arrives after the phase's deadline, when its phase is over (a reply
      that comes late is discarded by its message id, never applied);
    * ``duplicate``: it is delivered twice (the client answers a message id it has seen
      with its stored reply without handling it again; the server takes one reply per
      client and message id);
    * ``crash``: at a phase of a round, the client crashes and is unreachable for the
      rest of the round (it comes back next round with its state as of its last
      committed round; in the certificate, which changes no state, a crash is a lost
      message);
    * ``restart`` (scripted only): at a phase of a round, the client crashes and loses
      its state (``Client.restarted``); it is back at the next round's start and
      rejoins (:meth:`rejoining`).

    ``script``: faults at given places besides the random ones, as (round, phase, client,
    fault) tuples with fault one of ``FAULTS`` (each applies once, to the first sending
    there; a scripted drop or delay hits the reply, after the client handled the
    message).

    A message lost or late is sent again up to ``retries`` times; a client whose reply
    still does not arrive is reported by :class:`MissingReplies`, and the run treats it as
    absent for the round (``HyFDCARun.step`` rolls the round back and runs it without that
    client). The set-up and the certificate need every client: their phases retry up to
    ``certificate_retries`` times. ``phases``: the phase names faults apply to (default
    all).
    """

    may_lose = True

    def __init__(self, clients, evaluator, record=False, *, drop=0.0, delay=0.0,
                 duplicate=0.0, crash=0.0, retries=0, certificate_retries=50, phases=None,
                 script=(), seed=0):
        super().__init__(clients, evaluator, record)
        for name, p in (("drop", drop), ("delay", delay), ("duplicate", duplicate),
                        ("crash", crash)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
        if int(retries) < 0 or int(certificate_retries) < 0:
            raise ValueError("retries and certificate_retries must be >= 0")
        self.drop, self.delay, self.duplicate, self.crash = drop, delay, duplicate, crash
        self.retries, self.certificate_retries = int(retries), int(certificate_retries)
        self.phases = None if phases is None else frozenset(phases)
        self.rng = np.random.default_rng([int(seed), 0xFA17])
        self.script = {(int(r), str(ph), int(k), str(f)) for r, ph, k, f in script}
        unknown = {f for *_, f in self.script} - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown fault(s) {sorted(unknown)} in script; known: {FAULTS}")
        self.round = None
        self.faults = FaultCounts()
        self.crashed = set()
        self.returning = set()  # restarted: back next round, without their state
        self._saved = {}        # the attempt's clients' states, to roll them back
        self._next_id = 0
        self._seen = {}   # client -> (message id, reply): a client endpoint's last answer
        self._late = {}   # client -> a late reply, still travelling

    def start_round(self, round_=None):
        """A new round (``round_``: its index, for the script; None for a certificate):
        crashed clients are back (with their committed state)."""
        self.crashed.clear()
        self.round = round_

    def start_attempt(self, clients):
        self._saved = {int(k): copy.deepcopy(self.clients[k].state()) for k in clients}

    def end_attempt(self, committed):
        """A rolled-back attempt restores its clients' states (a restarted client keeps
        its new, empty one)."""
        if not committed:
            for k, state in self._saved.items():
                if k not in self.returning:
                    self.clients[k].load_state(state)
        self._saved = {}

    def reachable(self, clients):
        return np.setdiff1d(clients, sorted(self.returning))

    def rejoining(self, round_):
        back, self.returning = sorted(self.returning), set()
        return back

    def rejoined(self, k, ok):
        if not ok:
            self.returning.add(int(k))

    def away(self):
        return sorted(self.returning)

    def settings(self):
        return dict(may_lose=self.may_lose, drop=self.drop, delay=self.delay,
                    duplicate=self.duplicate, crash=self.crash, retries=self.retries,
                    certificate_retries=self.certificate_retries,
                    phases=None if self.phases is None else sorted(self.phases))

    def state(self):
        """The fault draws' stream, the faults so far, the message counter, the scripted
        faults still to come and the replies still travelling (a resumed run meets the
        faults the uninterrupted one would) and the clients back from a restart, to
        rejoin before the next round."""
        return dict(rng=self.rng.bit_generator.state, faults=vars(self.faults).copy(),
                    next_id=self._next_id, script=sorted(self.script),
                    late=copy.deepcopy(self._late), returning=sorted(self.returning))

    def load_state(self, state):
        self.rng.bit_generator.state = state["rng"]
        self.faults = FaultCounts(**state["faults"])
        self._next_id = state["next_id"]
        self.script = set(state["script"])
        self._late = state["late"]
        self.returning = set(state["returning"])

    def _faulty(self, fault, phase, k, scripted=True):
        place = (self.round, phase, int(k), fault)
        if scripted and place in self.script:
            self.script.discard(place)
            return True
        p = getattr(self, fault, 0.0)
        applies = self.phases is None or phase in self.phases
        return applies and p > 0.0 and self.rng.random() < p

    def exchange(self, phase, clients, build, receive):
        self._open(phase)
        budget = self.certificate_retries if _outside_rounds(phase) else self.retries
        missing = []
        for k in clients:
            if self._late.pop(k, None) is not None:
                self.faults.stale_discarded += 1  # an earlier phase's reply: not applied
            message, message_id = build(k), self._new_id()
            reply = self._round_trip(phase, k, message, message_id)
            for _ in range(budget):
                if reply is not None:
                    break
                self.faults.retransmitted += 1
                reply = self._round_trip(phase, k, message, message_id)
            if reply is None:
                missing.append(k)
                continue
            receive(k, reply)
        if missing:
            raise MissingReplies(phase, missing)

    def _new_id(self):
        self._next_id += 1
        return self._next_id

    def _round_trip(self, phase, k, message, message_id):
        """The reply to one sending of ``message``, or None if it is lost or late."""
        if not _outside_rounds(phase) and k not in self.crashed:
            if self._faulty("restart", phase, k):
                self.clients[k] = self.clients[k].restarted()
                self.returning.add(k)
                self.crashed.add(k)
                self.faults.restarted += 1
            elif self._faulty("crash", phase, k):
                self.crashed.add(k)
                self.faults.crashed += 1
        if k in self.crashed or k in self.returning:  # (restarted: away until it rejoins)
            return None
        self._sent(phase, k, message)
        if self._faulty("drop", phase, k, scripted=False):  # (a scripted drop loses the reply)
            self.faults.dropped += 1
            return None
        reply = self._endpoint(k, message, message_id)
        if self._faulty("duplicate", phase, k):  # the message arrives twice: handled once
            self.faults.duplicated += 1
            self._endpoint(k, message, message_id)
        if self._faulty("drop", phase, k):
            self.faults.dropped += 1
            return None
        if self._faulty("delay", phase, k):
            self.faults.delayed += 1
            self._late[k] = reply
            return None
        self._received(phase, k, reply)
        if self._faulty("duplicate", phase, k):  # the reply arrives twice: taken once
            self.faults.duplicated += 1
            self.faults.duplicates_ignored += 1
        return reply

    def _endpoint(self, k, message, message_id):
        """Client k's side: a message id seen before gets the stored reply (a
        retransmission or a duplicate is never handled twice)."""
        seen = self._seen.get(k)
        if seen is not None and seen[0] == message_id:
            self.faults.duplicates_ignored += 1
            return seen[1]
        reply = self.clients[k].handle(message)
        self._seen[k] = (message_id, reply)
        return reply
