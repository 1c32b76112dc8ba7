"""One HyFDCA run: set-up, the outer iterations (design section 3) and the certificate.

Per round, with available clients K_t, the phases (each one round trip) are:

  A  dual sync + primal aggregation: clients sync Enc(alpha), draw their samples, send
     the change of v_k the sync made; the server adds it to w. Skipped under full
     participation after round 0 (nothing is stale; the draws came with the previous
     round's phase D, the sync rides with B and its change with D).
  B  secure inner product: clients send Enc(x_i^k . w) for the drawn samples; the server
     adds them (stale parts of absent holders included). Skipped when every sample has a
     single holder (horizontal FL): margins are then computed locally.
  C  local dual method: clients decrypt their margins, run H steps, send Enc(dalpha/|C_i|).
  D  primal aggregation: clients receive the aggregated Enc(dalpha), send the changes of
     v_k (synced entries; the tentative dalpha) and masked line-search sums; the server
     picks g and applies alpha += g dalpha, w += g dw. A client settles its copy
     alpha += g dalpha when g comes with its next dual sync.
  E  (optional) second secure inner product: fresh stored parts for the next round.

So a round costs 2 RTC (horizontal, full participation), 3 (hybrid, full; or horizontal,
partial) or 4-5 (hybrid, partial participation), as in the paper.

v_k = (X^k)^T alpha_k / (lam N) is never recomputed inside a round: clients report its
changes (``hyfdca._primal_change``), O(nnz of the changed rows) per client.
"""

import time

import numpy as np

from crypto import deal_keys, masked_total
from hyfdca import _messages as msg
from hyfdca._channel import Channel
from hyfdca._client import Client
from hyfdca._history import History
from hyfdca._server import Server
from hyfdca.participation import Participation

CRYPTO_FIELDS = ("encrypt", "decrypt", "add", "multiply")


class HyFDCARun:
    """Clients, server and channel of one run, built from a FederatedDataset.

    Parameters
    ----------
    dataset : FederatedDataset
    settings : HyFDCASettings
    crypto : str
        Backend name ("plain", "paillier", "fast-paillier", "mask"); fast-paillier
        runs with one value per ciphertext (the server's per-index operations).
    crypto_options : dict
        Passed to the backend factory (e.g. ``n_length``, ``insecure``).
    frac_bits : int
        Fixed-point fractional bits f of every encrypted value.
    seed : int
        The one seed behind participation and index draws.
    record : bool
        Keep every message the server receives (``channel.server_inbox``), for audits.
    """

    def __init__(self, dataset, settings, *, crypto="plain", crypto_options=None,
                 frac_bits=32, seed=0, record=False):
        self.dataset = dataset
        self.settings = settings.bind(dataset)
        self.seed = int(seed)
        # key dealing at set-up: the clients get keys and masker, the server the evaluator
        keys, evaluator, masker = deal_keys(crypto, frac_bits=frac_bits,
                                            **(crypto_options or {}))
        self.counts = evaluator.counts
        self.frac_bits = frac_bits
        self.channel = Channel(evaluator, record=record)
        self.server = Server(dataset, evaluator, self.settings, frac_bits)
        counts, q = dataset.holder_counts, dataset.sq_row_norms
        streams = _sampling_streams(dataset, self.settings.sampling, self.seed)
        self.clients = [Client(k, b, q[b.sample_ids], counts[b.sample_ids], keys, masker,
                               self.settings, streams[k])
                        for k, b in enumerate(dataset.blocks)]
        self.local_margins = bool(np.all(counts == 1))
        self.participation = Participation(self.settings.participation, self.settings.fraction,
                                           len(self.clients), self.seed)
        self.round = 0

    # --- participation ------------------------------------------------------------------

    def available(self):
        """Sorted ids of this round's clients (call once per round: it draws)."""
        return self.participation.available(self.round)

    def _eligible(self, available):
        """Per client, which samples may be drawn: all, or (consistent aggregation) those
        whose holders are all present."""
        if self.settings.aggregation == "mean":
            return {k: np.ones(self.clients[k].n_local, bool) for k in available}
        present = np.zeros(self.dataset.n_samples, dtype=np.int64)
        for k in available:
            present[self.dataset.blocks[k].sample_ids] += 1
        complete = present == self.dataset.holder_counts
        return {k: complete[self.dataset.blocks[k].sample_ids] for k in available}

    # --- one round ----------------------------------------------------------------------

    def step(self):
        """Run one outer iteration; return its record (traffic, crypto counts, timing)."""
        ch, server, clients = self.channel, self.server, self.clients
        avail = self.available()
        full = self.settings.participation == "full"
        before = self.counts.as_dict()
        for k in avail:
            clients[k].round = self.round

        phase_a = not (full and self.round > 0)
        if phase_a:
            ch.round_trip("dual sync + primal aggregation")
            eligible = self._eligible(avail)
            for k in avail:
                m = ch.down(k, server.round_start(k, eligible[k]))
                server.receive_primal(k, ch.up(k, clients[k].start_round(m)))
                self._refresh(k)

        server.start_inner_products(avail)
        if not self.local_margins:
            ch.round_trip("secure inner product")
            for k in avail:
                m = ch.down(k, server.weights_message(k, with_sync=not phase_a))
                server.receive_parts(k, ch.up(k, clients[k].inner_product_parts(m)))
                self._refresh(k)
            server.sum_parts()

        ch.round_trip("local dual method")
        server.start_dual_aggregation(avail)
        compute = 0.0
        for k in avail:
            m = ch.down(k, server.margins_message(k, with_weights=self.local_margins))
            server.receive_dual_update(k, ch.up(k, clients[k].local_update(m)))
            self._refresh(k)
            compute = max(compute, clients[k].compute_seconds)

        ch.round_trip("primal aggregation")
        updates, shares, draws = {}, [], {}
        tag = f"round-{self.round}"
        for k in avail:
            m = ch.down(k, server.delta_message(k, avail, tag))
            updates[k] = reply = ch.up(k, clients[k].primal_update(m, predraw=full))
            draws[k] = reply.next_drawn
            shares.append(reply.shares)
        revealed = masked_total(shares, self.frac_bits) if self.settings.line_search else None
        g = server.finish_round(updates, revealed, draws if full else None)

        if self.settings.second_inner_product:
            ch.round_trip("second secure inner product")
            for k in avail:
                m = ch.down(k, msg.WeightsAndRequest(server.w[server.feature_ids[k]],
                                                     np.arange(clients[k].n_local)))
                server.store_all_parts(k, ch.up(k, clients[k].all_parts(m)))

        traffic = ch.take_traffic()
        after = self.counts.as_dict()
        self.round += 1
        return dict(round=self.round, available=len(avail), step=g, rtc=traffic.rtc,
                    bytes_up=traffic.bytes_up, bytes_down=traffic.bytes_down,
                    compute_seconds=compute,
                    **{f: after[f] - before[f] for f in CRYPTO_FIELDS})

    def _refresh(self, k):
        """Carry a client's refreshed Enc(alpha) (if its backend asked for one) up with
        its reply: same round trip, counted bytes."""
        refresh = self.clients[k].take_refresh()
        if refresh is not None:
            self.server.receive_refresh(k, self.channel.up(k, refresh))

    # --- certificate --------------------------------------------------------------------

    def certificate(self):
        """(primal at w(alpha), dual at alpha) by secure sums over every client.

        A separate exchange with all clients (its traffic is not charged to a round): they
        sync alpha and send v_k, so w = X^T alpha/(lam N) exactly; then every margin is
        a secure inner product and the loss and conjugate sums are masked secure sums.
        The server's training state is left as it was.
        """
        ch, server, clients, s = self.channel, self.server, self.clients, self.settings
        everyone = np.arange(len(clients))
        saved = ch.take_traffic()
        ch.round_trip("certificate: dual sync + primal aggregation")
        v = [ch.up(k, clients[k].eval_sync(ch.down(k, server.dual_sync(k, commit=False)))).v
             for k in everyone]
        w = server.aggregate_primal(v)
        ch.round_trip("certificate: inner products")
        parts = {}
        for k in everyone:
            m = ch.down(k, msg.WeightsAndRequest(w[server.feature_ids[k]],
                                                 np.arange(clients[k].n_local)))
            parts[k] = ch.up(k, clients[k].all_parts(m)).parts
        margins = server.full_margins(parts)
        ch.round_trip("certificate: loss and conjugate sums")
        tag = f"certificate-{self.round}"
        shares = []
        for k in everyone:
            m = ch.down(k, server.eval_message(k, margins, everyone, tag))
            shares.append(ch.up(k, clients[k].eval_shares(m)).shares)
        loss_sum, conj_sum = masked_total(shares, self.frac_bits)
        self.certificate_traffic = ch.take_traffic()
        ch.traffic = saved
        reg = 0.5 * s.lam * float(w @ w)
        return reg + loss_sum, -reg + conj_sum, w


def _sampling_streams(dataset, sampling, seed):
    """Seed tuples of each client's draws: holders of the same sample set share one when
    sampling is shared; otherwise every client has its own."""
    if sampling == "independent":
        return [(seed, 2, k) for k in range(dataset.n_clients)]
    groups = {}
    return [(seed, 1, groups.setdefault(b.sample_ids.tobytes(), len(groups)))
            for b in dataset.blocks]


ENGINES = ("protocol", "batched")


def run_hyfdca(dataset, settings, *, max_rounds=100, tol=None, eval_every=1, p_star=None,
               validation=None, crypto="plain", crypto_options=None, frac_bits=32, seed=0,
               record=False, progress=False, callback=None, engine="protocol",
               backend="numba"):
    """Run HyFDCA on a FederatedDataset and return (HyFDCARun, History).

    ``engine="batched"`` (``crypto="plain"`` only, no ``record``) runs
    :class:`hyfdca._batched.BatchedHyFDCA` instead: the same iterates bit for bit, every
    client of a round in one Numba call per phase (``backend="cupy"``: on a GPU), without
    the message-level accounting (bytes are 0; the plain backend's operation counts are
    reported, equal to the message protocol's).

    Stops after ``max_rounds``, when the certificate's gap is at most ``tol``, or when the
    gap is no longer finite (divergence). ``validation`` = (X_val, y_val) adds the
    validation accuracy of w(alpha) to the history. ``run.model`` is the w(alpha) of the
    last certificate: the model whose gap was certified (under partial participation the
    server's running w also holds stale parts of absent clients).
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine == "batched":
        if crypto != "plain" or record:
            raise ValueError(f"engine='batched' runs the plaintext protocol without message "
                             f"records (crypto='plain', record=False); got crypto={crypto!r}, "
                             f"record={record}")
        from hyfdca._batched import BatchedHyFDCA
        run = BatchedHyFDCA(dataset, settings, frac_bits=frac_bits, seed=seed,
                            backend=backend)
    else:
        run = HyFDCARun(dataset, settings, crypto=crypto, crypto_options=crypto_options,
                        frac_bits=frac_bits, seed=seed, record=record)
    history = History(p_star=p_star)

    def evaluate():
        primal, dual, run.model = _guarded(run, run.certificate)
        history.add_evaluation(run.round, primal, dual, _accuracy(run.model, validation))
        return primal - dual

    evaluate()
    rounds = range(max_rounds)
    if progress:
        from tqdm import tqdm
        rounds = tqdm(rounds, desc="HyFDCA", unit="round")
    for _ in rounds:
        start = time.perf_counter()
        record_ = _guarded(run, run.step)
        record_["protocol_seconds"] = time.perf_counter() - start
        history.add_round(record_)
        if run.round % eval_every == 0 or run.round == max_rounds:
            gap = evaluate()
            if progress:
                rounds.set_postfix(gap=f"{gap:.2e}")
            if (tol is not None and gap <= tol) or not np.isfinite(gap):
                break
        if callback is not None:
            callback(run)
    return run, history


def _guarded(run, operation):
    """Run a protocol operation; turn a fixed-point overflow into an error that says what
    it means for the run."""
    try:
        return operation()
    except OverflowError as err:
        raise OverflowError(
            f"round {run.round}: {err}. The iterates left the range the fixed-point "
            f"encoding can hold: the run diverged (try a safer variant such as "
            f"'sigma-safe' or a smaller H) or the data or targets need scaling"
        ) from err


def _accuracy(w, validation):
    if validation is None:
        return None
    X, y = validation
    return float(np.mean(np.where(X @ w[:X.shape[1]] >= 0, 1.0, -1.0) == y))
