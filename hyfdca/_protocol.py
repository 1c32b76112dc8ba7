"""The message engine: one HyFDCA run as a server and clients exchanging messages.

Set-up, the outer iterations (docs/algorithm.md section 3) and the certificate.

Per round, with available clients K_t, the phases (each one round trip) are:

  A  dual sync + primal aggregation: clients sync Enc(alpha), draw their samples, send
     the change of v_k the sync made; the server adds it to w. Skipped under full
     participation after round 0 (nothing is stale; the draws came with the previous
     round's phase D, the sync rides with B and its change with D).
  B  secure inner product: clients send Enc(x_i^k . w) for the drawn samples; the server
     adds them (stale parts of absent holders included). Skipped when every sample has a
     single holder (horizontal FL): margins are then computed locally.
  C  local dual method: clients decrypt their margins, run H steps, send Enc(p dalpha)
     (p: the holder weights, 1/|C_i| or the norm share).
  D  primal aggregation: clients receive the aggregated Enc(dalpha), send the changes of
     v_k (synced entries; the tentative dalpha) and masked line-search sums; the server
     picks g and applies alpha += g dalpha, w += g dw. A client settles its copy
     alpha += g dalpha when g comes with its next dual sync.
  E  (optional) second secure inner product: fresh stored parts for the next round.

So a round costs 2 RTC (horizontal, full participation), 3 (hybrid, full; or horizontal,
partial) or 4-5 (hybrid, partial participation), as in the paper.

v_k = (X^k)^T alpha_k / (lam N) is never recomputed inside a round: clients report its
changes (``hyfdca._primal_change``), O(nnz of the changed rows) per client.

Which phases run, who may draw what and how the step is chosen come from
``hyfdca._round``; the messages travel through a ``Transport`` (``hyfdca._transport``).
"""

import copy
import secrets
from contextlib import contextmanager

import numpy as np

from crypto import DealtKeys, deal_keys, masked_total
from feddata import Participation
from feddata.federated import id_listing
from hyfdca import _messages as msg
from hyfdca._certificate import (Certificate, certified_problem, checked_certificate,
                                  larger_l1, offered_points, prox_iterate, sums_layout,
                                  with_offered_point)
from hyfdca._checkpoint import CheckpointError, pickled, unpickled
from hyfdca._encoding_range import (LANE_BITS, check_encoding_range, check_slot_capacity,
                                    packing_options)
from hyfdca._client import Client
from hyfdca._holdings import check_entry_tags, doubled_entry_candidates, entry_problems
from hyfdca._round import (draws_all_samples, eligible_samples, margins_are_local, plan_round,
                           sampling_streams, step_bits)
from hyfdca._server import Server
from hyfdca._transport import InProcessTransport, MissingReplies
from solvers import sign_labels

CRYPTO_FIELDS = ("encrypt", "decrypt", "add", "multiply")


class PredictionError(ValueError):
    """A prediction whose new samples the parties' blocks do not cover: the margins of
    those samples would read 0."""


class HyFDCARun:
    """Clients, server and transport of one run, built from a FederatedDataset (or, with
    :meth:`remote`, the server's side only, for clients in other processes).

    Parameters
    ----------
    dataset : FederatedDataset
    settings : HyFDCASettings
    crypto : str
        Backend name (``crypto.BACKENDS``); a packing backend's vectors are laid out in
        blocks of samples with the same holders (``hyfdca._packing``).
    crypto_options : dict
        Passed to the backend factory (e.g. ``n_length``, ``insecure``).
    frac_bits : int
        Fixed-point fractional bits f of every encrypted value.
    seed : int
        The one seed behind participation and index draws.
    record : bool
        Keep every message the server receives (``transport.server_inbox``), for audits.
    transport : callable or None
        ``transport(clients, evaluator, record) -> Transport``: how the messages travel
        (default :class:`InProcessTransport`).
    dealt : crypto DealtKeys or None
        Keys made before (a resumed run's, :meth:`from_checkpoint`); default: dealt here.
    holding_nonce : str or None
        The nonce that keys the set-up's holding tags (a resumed run's, so that its
        parties' tags compare with the saved ones; ``hyfdca._holdings``); default: fresh.
    """

    # the run's records outside the rounds (a checkpoint keeps them)
    _RECORDS = ("rejoin_costs", "certificate_costs", "skipped_certificates")

    def __init__(self, dataset, settings, *, crypto="plain", crypto_options=None,
                 frac_bits=32, seed=0, record=False, transport=None, dealt=None,
                 holding_nonce=None):
        # key dealing at set-up: the clients get keys and masker, the server the evaluator
        if dealt is None:
            options = dict(crypto_options or {})
            options = {**packing_options(crypto, settings, frac_bits,
                                         options.get("max_bits", LANE_BITS)), **options}
            dealt = deal_keys(crypto, frac_bits=frac_bits, **options)
        keys, evaluator, masker = dealt
        layout = dataset.layout()
        bound = settings.bind(layout)
        streams = sampling_streams(layout.sample_ids, bound.sampling, int(seed))
        self.clients = [Client(k, b, keys, masker, bound, streams[k])
                        for k, b in enumerate(dataset.blocks)]
        self._start(layout, bound, evaluator,
                    (transport or InProcessTransport)(self.clients, evaluator, record),
                    frac_bits, seed, holding_nonce)

    @classmethod
    def remote(cls, layout, settings, evaluator, transport, *, frac_bits=32, seed=0):
        """The server's side of a run whose clients live elsewhere (``hyfdca.flower``):
        the public ``layout``, the server's ``evaluator`` (public keys only) and a
        ``Transport`` to the clients, which must already hold their blocks, keys, the
        bound settings and their draw streams (``client_streams``). ``clients`` is None:
        the round loop, the set-up exchange and the certificate are the same code."""
        run = cls.__new__(cls)
        run.clients = None
        run._start(layout, settings.bind(layout), evaluator, transport, frac_bits, seed)
        return run

    @property
    def n_clients(self):
        return self.layout.n_clients

    @staticmethod
    def client_streams(layout, settings, seed):
        """The draw stream of each client (``hyfdca._round.sampling_streams``)."""
        return sampling_streams(layout.sample_ids, settings.sampling, int(seed))

    def _start(self, layout, settings, evaluator, transport, frac_bits, seed,
               holding_nonce=None):
        self.layout, self.settings, self.seed = layout, settings, int(seed)
        self.counts = evaluator.counts
        self.frac_bits = frac_bits
        check_slot_capacity(evaluator, settings, frac_bits)
        self.server = Server(layout, evaluator, settings, frac_bits, holding_nonce)
        self.transport = transport
        if transport.may_lose and settings.participation == "full":
            raise ValueError("a transport that can lose messages makes clients absent: run "
                             "with participation='fraction' (fraction=1.0 is allowed) or "
                             "'cyclic', whose protocol handles absent clients")
        self.local_margins = margins_are_local(layout.holder_counts)
        self.participation = Participation(settings.participation, settings.fraction,
                                           layout.n_clients, self.seed)
        self.round = 0
        self.rejoin_costs = []  # per rejoin: round, client, traffic and encryption counts
        self.certificate_costs = []  # per certificate: round, traffic and encryption counts
        self.skipped_certificates = []  # rounds whose certificate could not reach everyone
        self.max_sq_norm = self._setup()

    def _setup(self):
        """The set-up exchange: each client checks its labels; each holder of a shared
        sample sends Enc(||x_i^k||^2) and the keyed tags with which the server checks
        that the blocks fit together (``hyfdca._holdings``: holders agree on labels, no
        entry is held twice); the server adds the parts and returns Enc(q_i) to the
        holders, who decrypt it (the server learns no q_i). The clients report their
        largest q_i and |y_i|, and the server checks the fixed-point range of the run
        (docs/reliability.md section 2). Returns max q_i (for the certificate's rounding
        allowance); the exchange's traffic is kept in ``setup_traffic``."""
        server, everyone = self.server, np.arange(self.layout.n_clients)
        done = {}
        with self._apart_from_rounds("setup_traffic"):
            server.start_setup()
            self._exchange("set-up: shared row norms", everyone, server.setup_message,
                           server.receive_norm_parts)
            server.check_holdings()
            self._exchange("set-up: row norms", everyone, server.norms_message,
                           done.__setitem__)
        max_q = max((d.max_sq_norm for d in done.values()), default=0.0)
        check_encoding_range(self.settings, max_q,
                             max((d.max_abs_label for d in done.values()), default=0.0),
                             self.frac_bits, self.layout.n_clients, step_bits(self.settings))
        return max_q

    # --- checkpoints ----------------------------------------------------------------------

    def checkpoint_files(self):
        """File name -> bytes (``hyfdca._checkpoint``): the server's state, its public
        evaluator, the participation draws, the transport's settings and state (restored
        into a transport of the same settings; another starts afresh: ``run_hyfdca``
        refuses it) and the run's records outside the rounds in one file, never a
        private or PRF key; each
        client's state with its own keys in another. Saving changes nothing: clients
        back from a restart, or whose rejoin failed, are saved as away (their saved
        state is the blank one of their restart) and rejoin when the run is resumed,
        before its next round, where the uninterrupted run rejoins them."""
        files = {"server.pkl": pickled(dict(
            state=self.server.state(), evaluator=self.server.evaluator, round=self.round,
            participation=self.participation.rng.bit_generator.state,
            away=self.transport.away(), transport=self.transport.settings(),
            transport_state=self.transport.state(), records={
                name: getattr(self, name) for name in self._RECORDS}))}
        for client in self.clients:
            files[f"client-{client.id}.pkl"] = pickled(dict(
                state=client.state(), keys=client.keys, masker=client.masker))
        return files

    @classmethod
    def from_checkpoint(cls, folder, dataset, settings, **options):
        """The run saved in checkpoint ``folder``, ready for its next round."""
        server = unpickled(folder / "server.pkl")
        parties = [unpickled(folder / f"client-{k}.pkl") for k in range(dataset.n_clients)]
        evaluator = server["evaluator"]
        for k, party in enumerate(parties):
            if party["keys"].key_id != evaluator.key_id:
                raise CheckpointError(
                    f"key mismatch: client {k}'s keys are for key {party['keys'].key_id}, "
                    f"the server's ciphertexts for key {evaluator.key_id}")
            party["keys"].evaluator, party["keys"].counts = evaluator, evaluator.counts
        first, saved = parties[0], server["state"]
        run = cls(dataset, settings, dealt=DealtKeys(first["keys"], evaluator,
                                                     first["masker"]),
                  holding_nonce=saved.get("holding_nonce"), **options)
        changed = sorted(int(k) for k, digest in saved.get("holding_digests", {}).items()
                         if run.server.holding_digests[k] != digest)
        if changed:   # every party restarts at a resume: the same check as a rejoin's
            raise CheckpointError(f"clients {changed} hold other data than the saved run's "
                                  f"(ids, entries or labels differ)")
        run.server.load_state(saved)
        for client, party in zip(run.clients, parties):
            client.keys, client.masker = party["keys"], party["masker"]
            client.load_state(party["state"])
        run.participation.rng.bit_generator.state = server["participation"]
        run.round = server["round"]
        for name, records in server["records"].items():
            setattr(run, name, records)
        if server["transport"] == run.transport.settings():
            # the clients away rejoin before the next round, as in the uninterrupted run
            run.transport.load_state(server["transport_state"])
        else:   # another transport starts afresh: rejoin them now, never into a round
            for k in server["away"]:   # with the blank state they saved
                run.transport.rejoined(k, run.rejoin(k))
        return run

    # --- participation ------------------------------------------------------------------

    def available(self):
        """Sorted ids of this round's clients (call once per round: it draws)."""
        return self.participation.available(self.round)

    def _eligible(self, available):
        """Per available client, which of its samples may be drawn (``_round``)."""
        layout, aggregation = self.layout, self.settings.aggregation
        if draws_all_samples(aggregation):
            return {k: np.ones(layout.sample_ids[k].size, dtype=bool) for k in available}
        present = np.zeros(layout.n_samples, dtype=np.int64)
        for k in available:
            present[layout.sample_ids[k]] += 1
        eligible = eligible_samples(aggregation, present, layout.holder_counts)
        return {k: eligible[layout.sample_ids[k]] for k in available}

    # --- one round ----------------------------------------------------------------------

    def step(self):
        """Run one outer iteration; return its record (traffic, crypto counts, timing).

        Over a transport that can lose messages (``may_lose``), a round applies whole or
        not at all: if a client's reply does not arrive (``MissingReplies``), the server
        restores its state, the transport has the attempt's clients restore theirs
        (``Transport.end_attempt``), and the round runs again without that client, which
        is then absent for the round. Clients the transport reports back after losing
        their state rejoin first (:meth:`rejoin`). The record counts the traffic and
        encryption work of every attempt.
        """
        self._rejoin_returning()
        avail = self.transport.reachable(self.available())
        before = self.counts.as_dict()
        lossy = self.transport.may_lose
        self.transport.start_round(self.round)
        while True:
            if avail.size == 0:  # every invited client was lost: nothing moves this round
                self.server.end_round(self.round + 1)  # (but the proximal centre)
                return self._finish_round(avail, before, 0.0)
            saved = copy.deepcopy(self.server.state()) if lossy else None
            self.transport.start_attempt(avail)
            try:
                record = self._step(avail, before)
            except MissingReplies as lost:
                if saved is None:
                    raise
                self.transport.end_attempt(committed=False)
                self.server.load_state(saved)
                avail = np.setdiff1d(avail, lost.clients)
                continue
            self.transport.end_attempt(committed=True)
            return record

    def _rejoin_returning(self):
        """Rejoin every client the transport reports back, before a round (a checkpoint
        saves them as away, and the resumed run rejoins them before its next round)."""
        for k in self.transport.rejoining(self.round):
            self.transport.rejoined(k, self.rejoin(k))

    def rejoin(self, k):
        """Client k, back after losing its state, rejoins between rounds: the set-up
        exchange for it alone (its labels; its holding tags, which must be those it sent
        at set-up, else HoldingsError; Enc(q_i) of its shared samples from the server's
        Enc(q)), then the whole dual sync, and its v_k at the synced alpha
        replaces its old v_k in w (``Server.receive_resync``; nothing changes if a reply
        is lost: the client stays away until the transport reports it back again).
        Returns whether it went through; its traffic and encryption counts are appended
        to ``rejoin_costs`` (as ``certificate_costs``: outside the rounds' records)."""
        server, only = self.server, np.array([int(k)])
        before = self.counts.as_dict()
        try:
            with self._apart_from_rounds("_last_rejoin"):
                self._exchange("set-up: shared row norms", only, server.setup_message,
                               server.check_rejoin)
                self._exchange("set-up: row norms", only, server.norms_message,
                               lambda k, reply: None)
                self._exchange("rejoin: dual sync + primal contribution", only,
                               server.resync_message, server.receive_resync)
        except MissingReplies:
            return False
        finally:
            traffic, after = self._last_rejoin, self.counts.as_dict()
            self.rejoin_costs.append(dict(
                round=self.round, client=int(k), rtc=traffic.rtc,
                messages_down=traffic.messages_down, messages_up=traffic.messages_up,
                bytes_down=traffic.bytes_down, bytes_up=traffic.bytes_up,
                **{f: after[f] - before[f] for f in CRYPTO_FIELDS}))
        return True

    @contextmanager
    def _apart_from_rounds(self, name):
        """Exchanges outside the rounds (set-up, certificate, prediction): the transport
        starts them as a round of its own, and their traffic is kept in attribute
        ``name`` instead of being charged to the next round's record."""
        saved = self.transport.take_traffic()
        self.transport.start_round()
        try:
            yield
        finally:
            setattr(self, name, self.transport.take_traffic())
            self.transport.traffic = saved

    def _sum_tag(self, kind):
        """The label of one secure sum: fresh for every sum (a nonce beside the round), so
        that no client ever masks two share vectors alike. A retried round, a second
        prediction or certificate in one round would otherwise reuse the masks, and the
        difference of two shares would be the difference of the client's values."""
        return f"{kind}-{self.round}-{secrets.token_hex(16)}"

    def _exchange(self, phase, clients, build, receive):
        """One round trip through the transport, holding it to its contract: one reply per
        client (a second one from the same client is ignored: a duplicate applies once),
        and MissingReplies when a client's reply did not arrive."""
        replied = set()

        def once(k, reply):
            if k not in replied:
                replied.add(k)
                receive(k, reply)
        self.transport.exchange(phase, clients, build, once)
        missing = set(int(k) for k in clients) - replied
        if missing:
            raise MissingReplies(phase, missing)

    def _measured_compute(self, avail):
        """The simulation's time model: the slowest present client's LocalDualMethod,
        measured by the clients in this process (never part of a message; 0 when the
        clients are remote)."""
        if self.clients is None:
            return 0.0, 0
        return (max((self.clients[k].compute_seconds for k in avail), default=0.0),
                max((self.clients[k].compute_ops for k in avail), default=0))

    def _step(self, avail, before):
        server = self.server
        plan = plan_round(self.settings, self.round, self.local_margins)

        if plan.dual_sync_phase:
            eligible = self._eligible(avail)
            self._exchange("dual sync + primal aggregation", avail,
                           lambda k: server.round_start(k, eligible[k], self.round),
                           server.receive_primal)

        server.start_inner_products(avail)
        if plan.inner_products:
            self._exchange("secure inner product", avail,
                           lambda k: server.weights_message(
                               k, with_sync=not plan.dual_sync_phase),
                           server.receive_parts)
            server.sum_parts()

        server.start_dual_aggregation(avail)
        self._exchange("local dual method", avail,
                       lambda k: server.margins_message(k, with_weights=self.local_margins),
                       server.receive_dual_update)
        compute, compute_ops = self._measured_compute(avail)

        tag = self._sum_tag("round")
        updates = {}
        self._exchange("primal aggregation", avail,
                           lambda k: server.delta_message(k, avail, tag, self.round,
                                                      plan.predraw),
                           updates.__setitem__)
        revealed = None
        if server.round_settings.line_search:
            revealed = masked_total(((k, u.shares) for k, u in updates.items()), avail,
                                    self.frac_bits, tag=f"line-search sums, {tag}")
        draws = {k: u.next_drawn for k, u in updates.items()} if plan.predraw else None
        g = server.finish_round(updates, revealed, draws)
        server.end_round(self.round + 1)

        if plan.second_inner_product:  # at the w the next round starts from
            self._exchange("second secure inner product", avail,
                           lambda k: msg.WeightsAndRequest(
                               server.w[server.feature_ids[k]],
                               np.arange(server.sample_ids[k].size)),
                           server.store_all_parts)

        return self._finish_round(avail, before, g, compute, compute_ops)

    def _finish_round(self, avail, before, g, compute=0.0, compute_ops=0):
        """The round's record (the proximal centre has moved where it was due)."""
        traffic = self.transport.take_traffic()
        after = self.counts.as_dict()
        self.round += 1
        return dict(round=self.round, available=len(avail), step=g, rtc=traffic.rtc,
                    bytes_up=traffic.bytes_up, bytes_down=traffic.bytes_down,
                    compute_seconds=compute, compute_ops=compute_ops,
                    **{f: after[f] - before[f] for f in CRYPTO_FIELDS})

    def _certificate_margins(self, everyone, point):
        """Enc(x_i . point) for every sample: a secure inner product over every client."""
        server, parts = self.server, {}
        self._exchange("certificate: inner products", everyone,
                       lambda k: msg.WeightsAndRequest(
                           point[server.feature_ids[k]],
                           np.arange(server.sample_ids[k].size), stored=False),
                       lambda k, reply: parts.__setitem__(k, reply.parts))
        return server.full_margins(parts)

    def _certificate_sums(self, everyone):
        """The certificate's exchanges: (revealed sums, x_t, x_{t-1} or the running mean
        or None, the mean or None, the iterates to keep, w(alpha))."""
        server = self.server
        v, shares = {}, {}
        tag = self._sum_tag("certificate")
        with self._apart_from_rounds("certificate_traffic"):
            self._exchange("certificate: dual sync + primal aggregation", everyone,
                           lambda k: server.dual_sync(k, commit=False),
                           lambda k, reply: v.__setitem__(k, reply.v))
            w_alpha = server.aggregate_primal([v[k] for k in everyone])
            kappa, centre = certified_problem(self.settings, server.solved_problem,
                                              server.rounds_problem())
            x, x_previous, kept = offered_points(
                self.settings, prox_iterate(self.settings.lam, kappa, w_alpha, centre),
                server.kept_iterates)
            epoch, point_mean, x_mean = with_offered_point(
                self.settings, server.point_mean, x, self.round, x_previous is not None)
            mean_size = 0 if x_mean is None else point_mean.size
            margins = self._certificate_margins(everyone, x)
            previous_margins = (None if x_previous is None
                                else self._certificate_margins(everyone, x_previous))
            self._exchange("certificate: loss and conjugate sums", everyone,
                           lambda k: server.eval_message(k, margins, previous_margins,
                                                         everyone, tag, epoch, mean_size),
                           lambda k, reply: shares.__setitem__(k, reply.shares))
            # the clients' means took z: the server's takes x_t whether or not the
            # certificate completes (a client that missed it holds fewer points and says so)
            server.point_mean = point_mean
            if x_mean is not None:  # the clients' means of their margins: no inner product
                x_previous = x_mean
        totals = masked_total(shares.items(), everyone, self.frac_bits,
                              tag=f"certificate sums, {tag}")
        return totals, x, x_previous, x_mean, kept, w_alpha

    def _record_certificate_cost(self, before, completed):
        traffic, after = self.certificate_traffic, self.counts.as_dict()
        self.certificate_costs.append(dict(
            round=self.round, completed=completed, available=self.layout.n_clients,
            rtc=traffic.rtc,
            messages_down=traffic.messages_down,
            messages_up=traffic.messages_up, bytes_down=traffic.bytes_down,
            bytes_up=traffic.bytes_up, **{f: after[f] - before[f] for f in CRYPTO_FIELDS}))

    # --- prediction ---------------------------------------------------------------------

    def predict(self, n_samples, w=None, blocks=None):
        """Labels (+-1, a score of 0 is -1) of ``n_samples`` new samples whose features are
        split across the clients like the training data, with the model ``w`` (default
        ``run.model``): each client sends masked shares of x_i^k . w_k for the new samples
        it holds, and the server reveals only their sum, the margins (returned too).
        PredictionError where a new sample has no holder or an entry two (the server
        sees the ids each party holds, and keyed entry tags where two holders of a new
        sample share a feature: ``hyfdca._holdings``).
        In process, ``blocks[k]`` is client k's block of new samples; remote clients load
        their own."""
        if w is None:
            w = getattr(self, "model", None)
            if w is None:
                raise ValueError("no model to predict with: train the run first "
                                 "(run_hyfdca or hyfdca.train) or pass w")
        if blocks is not None:
            for client, block in zip(self.clients, blocks):
                client.hold_for_prediction(block)
        everyone = np.arange(self.layout.n_clients)
        tag = self._sum_tag("prediction")
        shares, held_by, held = {}, {}, np.zeros(int(n_samples), dtype=bool)

        def receive(k, reply):
            ids = np.asarray(reply.held)
            if ids.dtype.kind not in "iu" or (ids.size and (ids.min() < 0
                                                             or ids.max() >= held.size)):
                raise PredictionError(f"client {k} reports new-sample ids outside 0 to "
                                      f"{held.size - 1} (or not whole numbers)")
            shares[k], held_by[k] = reply.shares, ids
            held[ids] = True

        with self._apart_from_rounds("prediction_traffic"):
            self._exchange("prediction", everyone,
                           lambda k: msg.PredictRequest(w[self.server.feature_ids[k]],
                                                        int(n_samples), everyone, tag),
                           receive)
            if not held.all():
                missing = np.flatnonzero(~held)
                raise PredictionError(
                    f"new samples {id_listing(missing)} ({missing.size} of "
                    f"{int(n_samples)}) are held by no party (their prediction blocks, or "
                    f"predict-files, leave them out): their margins would read 0")
            self._check_prediction_entries([held_by[k] for k in everyone], tag)
        margins = masked_total(shares.items(), everyone, self.frac_bits,
                               tag=f"prediction sums, {tag}")
        return sign_labels(margins), margins

    def _check_prediction_entries(self, held, tag):
        """PredictionError where two parties hold the same entry of a new sample (its
        part of the margin would be added twice): tags are asked for only where two
        holders of a new sample share a feature (``hyfdca._holdings``), in one more
        round trip then, with those parties alone."""
        asked = doubled_entry_candidates(held, self.layout.feature_ids)
        if not asked:
            return
        tags = {}
        self._exchange("prediction: entry tags", np.array(sorted(asked)),
                       lambda k: msg.EntryTagRequest(*asked[k], tag),
                       lambda k, reply: tags.__setitem__(
                           k, check_entry_tags(k, reply.tags, PredictionError)))
        twice = entry_problems([tags.get(k, np.zeros((0, 2), np.uint64))
                                for k in range(self.layout.n_clients)],
                               what="entries (new sample, feature)")
        if twice:
            raise PredictionError(f"{twice[0]}: their parts of the margin would be added "
                                  f"twice (a predict-file with another party's features of "
                                  f"a sample?)")

    # --- certificate --------------------------------------------------------------------

    def certificate(self):
        """A :class:`Certificate` by secure sums over every client: the certified point
        w_c, the best point of the segment between the last one and the offered point x_t
        (w(alpha) or its proximal iterate), or of the triangle with the round before's
        x_{t-1} as well (``offered_points``), and the certified dual point alpha_c, the
        best of the segment between the last one and alpha (``hyfdca._certificate``),
        with P(w_c), D(alpha_c), P(x_t) and D(alpha).

        A separate exchange with all clients (its traffic is not charged to a round): they
        sync alpha and send v_k, so w = X^T alpha/(lam N) exactly; then every margin is
        a secure inner product (one exchange per point), and the loss sums and the
        conjugate sums are masked secure sums (``sums_layout``). The server's training
        state is left as it was. What it cost (round trips, messages and bytes each way,
        encryption operations) is appended to ``certificate_costs``, with ``completed``
        False for a certificate that failed (what it spent until then).
        """
        server = self.server
        everyone = np.arange(self.layout.n_clients)
        before, completed = self.counts.as_dict(), False
        try:
            totals, x, x_previous, x_mean, kept, w_alpha = self._certificate_sums(everyone)
            completed = True
        finally:   # a certificate that fails (a client lost) spent what it spent
            self._record_certificate_cost(before, completed)
        layout = sums_layout(x_previous is not None)
        lam, holding = self.settings.lam, totals[layout.size]
        line, step, primal, point_w, iterate = server.point_choice(
            x, x_previous, totals[layout.primal], holding,
            totals[layout.size + 1] if x_mean is not None else None)
        dual_step, dual, dual_point_w, iterate_dual = server.dual_point_choice(
            w_alpha, totals[layout.dual], holding)
        checked_certificate(min(primal, iterate), dual,
                            larger_l1(x, x_previous, w_alpha, point_w, dual_point_w),
                            lam=lam, frac_bits=self.frac_bits,
                            n_clients=self.layout.n_clients, max_sq_norm=self.max_sq_norm,
                            round_=self.round)
        server.kept_iterates = kept
        server.commit_point(line, step, point_w, dual_step, dual_point_w)
        return Certificate(primal, dual, point_w.copy(), iterate, iterate_dual)
