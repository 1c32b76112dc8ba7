"""The transport seam over Flower: each protocol phase is one round trip on the ServerApp's
grid; a party that does not answer in time is absent, and a party that comes back
rejoins (docs/deployment.md, "Faults").

Rolling a round back across processes: every message carries the attempt it belongs to
(0 outside the rounds) and the last attempt the server committed for its client. A
ClientApp keeps a snapshot of its state from before its current attempt and restores it
when a later message shows that attempt was not committed (``hyfdca.flower._client_app``):
the parties that did answer an attempt that failed restore their state with the first
message of the next one. (The party that did not answer is lost; it comes back through
``configure``, with a fresh session.)
"""

import time
from logging import INFO, WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.common.logger import log

from hyfdca._transport import MissingReplies, Transport
from hyfdca._checkpoint import bytes_array
from hyfdca.flower._wire import (CONFIGURE, DESCRIBE, NO_SESSION, PHASE_ACTIONS, RECORD, pack,
                                 unpack)

POLL_SECONDS = 0.02
"""How often the server asks the SuperLink for replies (Flower's own send_and_receive
sleeps 3 s between asks in a deployment)."""

# errors that mean "this party is not there", not "this party failed on its input"
ABSENCE_ERRORS = frozenset((ErrorCode.NODE_UNAVAILABLE, ErrorCode.MESSAGE_UNAVAILABLE,
                            ErrorCode.REPLY_MESSAGE_UNAVAILABLE, ErrorCode.CLIENT_APP_CRASHED))


class ClientError(RuntimeError):
    """A client answered a phase with an error (its message names the cause)."""


def send_all(grid, outgoing, names, timeout=None):
    """One Flower round trip: the reply to each outgoing message, in order; None where no
    reply came within ``timeout`` seconds, where Flower reports the party absent (its node
    unavailable, its ClientApp crashed) and where the party holds no session (a node
    restarted under the same node id). A reply carrying the ClientApp's own error raises
    :class:`ClientError` naming the sender as ``names[i]``."""
    waiting = {mid: i for i, mid in enumerate(grid.push_messages(outgoing))}
    answers = [None] * len(outgoing)
    deadline = None if timeout is None else time.monotonic() + timeout
    while waiting:
        for reply in grid.pull_messages(list(waiting)):
            i = waiting.pop(reply.metadata.reply_to_message_id, None)
            if i is None:
                continue
            if reply.has_error():
                if reply.error.code in ABSENCE_ERRORS:
                    continue
                raise ClientError(f"{names[i]}: {reply.error.reason}")
            if NO_SESSION not in reply.content[RECORD]:
                answers[i] = reply
        if not waiting or (deadline is not None and time.monotonic() >= deadline):
            break
        time.sleep(POLL_SECONDS)
    return answers


def ask(grid, nodes, action, contents, timeout=None):
    """One Flower round trip outside the protocol (``describe``, ``configure``): the
    replies' records in node order; TimeoutError naming the nodes that did not answer."""
    out = [Message(RecordDict({RECORD: ConfigRecord(c)}), dst_node_id=n,
                   message_type=f"query.{action}") for n, c in zip(nodes, contents)]
    answers = send_all(grid, out, [f"node {n}, {action}" for n in nodes], timeout)
    missing = [n for n, a in zip(nodes, answers) if a is None]
    if missing:
        raise TimeoutError(f"{action}: no reply from nodes {missing}")
    return [a.content[RECORD] for a in answers]


class FlowerTransport(Transport):
    """Messages of one phase go to the clients' SuperNodes at once (every message is
    built first, as docs/architecture.md allows: the same iterates).

    With a ``timeout`` (seconds per phase) the transport may lose replies: a client
    whose reply does not come in time, or whose node Flower reports unavailable, is
    lost (``MissingReplies``: the round runs again without it) and stays away from the
    rounds (:meth:`reachable`). At each round start while a client is lost, nodes that
    are online but not in use are asked who they are, without waiting (``describe``);
    one that answers as a lost client with its sample and feature ids is configured
    afresh (``configure(k)`` gives the configuration) and rejoins (:meth:`rejoining`).
    Without a timeout a phase waits for every reply and a lost one is an error.

    ``events``: ("lost", round, client, phase) and ("rejoined", round, client, node), with
    the index of the round being run (or about to be; for an exchange outside the rounds,
    a certificate or a rejoin, the round last run).
    """

    def __init__(self, grid, nodes, evaluator, timeout=None, record=False, layout=None,
                 configure=None):
        super().__init__(evaluator, record)
        self.grid, self.nodes, self.timeout = grid, list(nodes), timeout
        self.may_lose = timeout is not None
        self.layout, self.configure = layout, configure
        self.round = None
        self.attempt, self.in_attempt, self.attempt_clients = 0, False, ()
        self.committed = [0] * len(self.nodes)
        self.lost = set()
        self._round_of_rejoin = None
        self.probes = {}        # message id -> node asked who it is
        self.described = {}     # node -> the client it said it is, with matching ids
        self.strangers = set()  # nodes whose ids match no client: never asked again
        self.events = []

    # --- rounds and attempts ------------------------------------------------------------

    def start_round(self, round_=None):
        """Round ``round_`` begins; an exchange outside the rounds (None: a certificate,
        a rejoin) keeps the round last run, under which its events are listed."""
        if round_ is not None:
            self.round = round_

    def start_attempt(self, clients):
        self.attempt += 1
        self.in_attempt, self.attempt_clients = True, [int(k) for k in clients]

    def end_attempt(self, committed):
        if committed:
            for k in self.attempt_clients:
                self.committed[k] = self.attempt
        self.in_attempt = False

    def reachable(self, clients):
        return np.setdiff1d(clients, sorted(self.lost))

    # --- one phase ----------------------------------------------------------------------

    def exchange(self, phase, clients, build, receive):
        self._open(phase)
        lost = sorted(set(int(k) for k in clients) & self.lost)
        if lost:  # known unreachable (only exchanges outside the rounds include them)
            raise MissingReplies(phase, lost)
        # attempts matter only where replies can be lost (then clients keep snapshots)
        attempt = self.attempt if self.in_attempt and self.may_lose else 0
        outgoing = []
        for k in clients:
            message = build(k)
            self._sent(phase, k, message)
            outgoing.append(Message(pack(message, attempt, self.committed[k]),
                                    dst_node_id=self.nodes[k],
                                    message_type=f"query.{PHASE_ACTIONS[phase]}"))
        answers = send_all(self.grid, outgoing, [f"client {k}, phase {phase!r}"
                                                 for k in clients], self.timeout)
        missing = []
        for k, answer in zip(clients, answers):
            if answer is None:
                missing.append(int(k))
                continue
            reply = unpack(answer.content)
            self._received(phase, k, reply)
            receive(k, reply)
        for k in missing:
            self.lost.add(k)
            self.events.append(("lost", self.round, k, phase))
            log(WARNING, "HyFDCA: client %d lost (round %s, phase %r): absent until it "
                "rejoins", k, self.round, phase)
        if missing:
            raise MissingReplies(phase, missing)

    # --- coming back --------------------------------------------------------------------

    def rejoining(self, round_):
        if not self.lost or self.configure is None:
            return []
        for node, described in self._probe():
            k = int(described["client"])
            if 0 <= k < len(self.nodes) and self._matches(k, described):
                self.described[node] = k
            else:
                self.strangers.add(node)
        in_use = {self.nodes[k] for k in range(len(self.nodes)) if k not in self.lost}
        back = []
        for node, k in sorted(self.described.items()):
            if k not in self.lost or node in in_use or k in back:
                continue
            del self.described[node]  # (asked again if configuring it fails)
            try:
                ask(self.grid, [node], CONFIGURE, [self.configure(k)], self.timeout)
            except TimeoutError:
                continue
            self.nodes[k] = node
            self.lost.discard(k)
            self._round_of_rejoin = round_
            back.append(k)
        return sorted(back)

    def rejoined(self, k, ok):
        """A rejoin that went through is an event; one that did not left k lost (its
        exchange marked it)."""
        if ok:
            self.events.append(("rejoined", self._round_of_rejoin, k, int(self.nodes[k])))
            log(INFO, "HyFDCA: client %d rejoins from node %d", k, self.nodes[k])

    def _matches(self, k, described):
        return (np.array_equal(bytes_array(described["sample_ids"]),
                               self.layout.sample_ids[k])
                and np.array_equal(bytes_array(described["feature_ids"]),
                                   self.layout.feature_ids[k]))

    def _probe(self):
        """Ask online nodes not in use who they are (without waiting for the answer);
        return the (node, description) pairs that have answered since."""
        in_use = {self.nodes[k] for k in range(len(self.nodes)) if k not in self.lost}
        asked = set(self.probes.values()) | set(self.described)
        new = sorted(set(self.grid.get_node_ids()) - in_use - asked - self.strangers)
        if new:
            out = [Message(RecordDict({RECORD: ConfigRecord({})}), dst_node_id=n,
                           message_type=f"query.{DESCRIBE}") for n in new]
            self.probes.update(zip(self.grid.push_messages(out), new))
        answered = []
        if self.probes:
            for reply in self.grid.pull_messages(list(self.probes)):
                node = self.probes.pop(reply.metadata.reply_to_message_id, None)
                if node is not None and not reply.has_error():
                    answered.append((node, reply.content[RECORD]))
        return answered
