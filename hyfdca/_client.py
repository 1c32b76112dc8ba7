"""A HyFDCA client: its block, its labels, the alpha of its samples, w on its features."""

import time
from types import SimpleNamespace

import numpy as np

from feddata import local_work
from hyfdca import _messages as msg
from hyfdca._certificate import (line_point, next_point_values, segment_objective_sums,
                                 sums_layout, with_point)
from hyfdca._draws import draw_positions, sample_units
from hyfdca._packing import ClientBlocks
from hyfdca._primal_change import rows_change
from hyfdca._encoding_range import check_encoding_range
from hyfdca._holdings import block_tag, entry_tags, label_tags
from hyfdca._round import (aggregation_weights, correction_factors, dual_update_range_bits,
                           initial_kappa, line_search_shares, local_dual_method, step_bits)
from solvers import check_classification_labels


class Client:
    """Client k of the protocol. Holds nothing of other clients' data; answers each
    message of the server with one reply (:meth:`handle`).

    Parameters
    ----------
    block : ClientBlock
        X^k (local CSR), I_k, J_k and the labels of its samples. |C_i| of its samples, its
        ciphertext blocks and the full squared row norms q_i come with the set-up exchange
        (:meth:`setup_request`, :meth:`setup_norms`).
    keys : crypto KeyHolder
        Encryption and decryption under the clients' shared key.
    masker : crypto SecureSum
        Pairwise masks for secure sums (key shared by the clients only).
    settings : HyFDCASettings
    stream : tuple of int
        Seed of this client's index draws; round t draws from the counter-based stream
        keyed by (stream, t) (``hyfdca._draws``), so holders with the same stream draw the
        same indices whatever their history.
    """

    # set at construction from its block, keys and settings; the rest is the run's state
    FIXED = frozenset(("id", "X", "y", "sample_ids", "feature_ids", "n_local", "keys", "masker",
                       "settings", "stream", "q", "partial", "rho", "update_weight",
                       "inv_holders", "_counts", "_n_clients", "_blocks", "_units",
                       "_prediction"))

    def __init__(self, client_id, block, keys, masker, settings, stream):
        self.id = client_id
        self.X = block.X
        self.y = block.y
        self.sample_ids = np.asarray(block.sample_ids)
        self.feature_ids = np.asarray(block.feature_ids)
        self.n_local = block.X.shape[0]
        self.keys = keys
        self.masker = masker
        self.settings = settings
        self.stream = tuple(stream)
        self.round = 0
        self.alpha = np.zeros(self.n_local)
        self.w = np.zeros(block.X.shape[1])
        self.partial = np.asarray(block.X.multiply(block.X).sum(axis=1)).ravel()
        # set up by the set-up exchange (``setup_request``, ``setup_norms``)
        self.q = self.rho = self.update_weight = self.inv_holders = None
        self._counts, self._n_clients, self._blocks = None, None, None
        self._units = None  # its draw units (hyfdca._draws), from the set-up
        self._prediction = None  # new samples to predict (``hold_for_prediction``)
        self.stalled = False  # the server said the line search stalled (RoundStart)
        # the kappa the rounds run (prox_warm_start; then as the server says: DualSync)
        self.prox_kappa = initial_kappa(settings)
        self.drawn = np.zeros(0, dtype=np.int64)
        # seconds of its last LocalDualMethod: a measurement for the simulation's time
        # model, never sent (how long the steps took would tell how many samples moved)
        self.compute_seconds = 0.0
        self.compute_ops = 0
        self._eval_alpha = self.alpha
        self._refresh = None
        # alpha is the copy the server's w accounts for; the last tentative step
        # (positions, dalpha) waits for its step g, and synced changes for their report
        self._pending = None
        self._synced = np.zeros(self.n_local)
        self._synced_mask = np.zeros(self.n_local, dtype=bool)
        # the inner-product parts the server stores for it, as last sent (the rest of a
        # block it sends again: ``inner_product_parts``)
        self._sent_parts = np.zeros(self.n_local)
        # the certified point's margins and the certified dual point's alpha over its
        # samples (hyfdca._certificate), which of the server's points they are, and the
        # last certificate's (z, zp, zc, alpha, ac, version) waiting for the steps a, c
        # and t the next certificate's request brings
        self._point_margins, self._point_version, self._point_trial = None, 0, None
        self._dual_point = None
        # the running mean of the margins of the points certificates offered
        # (_certificate.RunningMean; certify_running_mean)
        self._margin_mean = None

    def state(self):
        """The client's state between rounds (its keys are kept apart)."""
        return {name: value for name, value in vars(self).items() if name not in self.FIXED}

    def load_state(self, state):
        vars(self).update(state)
        if "_margin_mean" not in state:  # from before the running mean
            self._margin_mean = None
        if self._point_trial is not None and len(self._point_trial) < 5:
            # a state kept before the certified dual point: both points restart
            self._point_trial = None
        elif self._point_trial is not None and len(self._point_trial) == 5:
            # kept before the triangle (z, zc, alpha, ac, version): x_t's segment
            z = self._point_trial[0]
            self._point_trial = (z, z, *self._point_trial[1:])

    # what a process that holds the block, keys and settings must keep between messages
    _PROVIDED = frozenset(("X", "y", "sample_ids", "feature_ids", "keys", "masker", "settings",
                           "_prediction"))

    def session(self):
        """Everything but the block, keys and settings (a party in another process keeps
        this between messages: ``hyfdca.flower``)."""
        return {k: v for k, v in vars(self).items() if k not in self._PROVIDED}

    @classmethod
    def resume(cls, block, keys, masker, settings, session):
        """The client whose :meth:`session` was ``session``."""
        client = cls.__new__(cls)
        vars(client).update(session, X=block.X, y=block.y,
                            sample_ids=np.asarray(block.sample_ids),
                            feature_ids=np.asarray(block.feature_ids), keys=keys,
                            masker=masker, settings=settings, _prediction=None)
        return client

    @property
    def round_settings(self):
        """The settings the rounds run now (after_stall() once the server said so, the
        kappa prox_warm_start or prox_adapt left)."""
        return self.settings.for_round(self.stalled, self.prox_kappa)

    def handle(self, message):
        """The reply to one message of the server (the transport's entry point)."""
        handler = {msg.SetupRequest: self.setup_request,
                   msg.SharedNorms: self.setup_norms,
                   msg.RoundStart: self.start_round,
                   msg.Resync: self.resync,
                   msg.WeightsAndRequest: self.inner_product_parts,
                   msg.Margins: self.local_update,
                   msg.TentativeStep: self.primal_update,
                   msg.DualSync: self.eval_sync,   # the certificate's sync, not committed
                   msg.EvalRequest: self.eval_shares,
                   msg.PredictRequest: self.predict_shares,
                   msg.EntryTagRequest: self.prediction_entry_tags}.get(type(message))
        if handler is None:
            raise TypeError(f"client {self.id}: no handler for {type(message).__name__}")
        return handler(message)

    # --- step 1-2: dual sync and primal contribution ---------------------------------

    def settled_alpha(self, step):
        """Its alpha with the last tentative step settled at step g: alpha_i + g dalpha_i
        (what the server's w accounts for)."""
        alpha = self.alpha.copy()
        if self._pending is not None:
            positions, dalpha = self._pending
            alpha[positions] = alpha[positions] + step * dalpha
        return alpha

    def _settle(self, step):
        if self._pending is not None:
            self.alpha = self.settled_alpha(step)
            self._pending = None

    def _encrypt(self, positions, values, base=None, range_bits=None):
        """Enc of ``values`` at ``positions`` in the blocks that hold them (``base`` or 0
        in their other slots), declared below 2^range_bits (default: the codec's range)."""
        return self.keys.encrypt(self._blocks.pack(positions, values, base), range_bits)

    def _decrypt(self, positions, vector):
        """The values at ``positions`` of the blocks ``vector`` holds."""
        return self._blocks.read(positions, self.keys.decrypt(vector))

    def _apply_sync(self, sync):
        if sync.prox_kappa is not None:
            self.prox_kappa = float(sync.prox_kappa)
        self._settle(sync.step)
        pos = sync.positions
        if pos.size:
            if self.keys.wants_refresh(sync.alpha):
                values, fresh = self.keys.refresh(sync.alpha)
                values = self._blocks.read(pos, values)
                self._refresh = msg.DualRefresh(pos, fresh)
            else:
                values = self._decrypt(pos, sync.alpha)
            self._synced[pos] += values - self.alpha[pos]
            self._synced_mask[pos] = True
            self.alpha[pos] = values

    def _change(self, positions, dalpha):
        """(X^k)^T dalpha / (mu N) over J_k, dalpha given on ``positions`` (mu = lam
        without ``prox``: ``HyFDCASettings.round_lam``)."""
        out = np.zeros(self.X.shape[1])
        rows_change(self.X.data, self.X.indices, self.X.indptr, positions, dalpha,
                    self.round_settings.round_lam_n, out)
        return out

    def _report_synced(self):
        """The change of v_k by the syncs since the last report (None if there were none)."""
        positions = np.flatnonzero(self._synced_mask)
        if positions.size == 0:
            return None
        change = self._change(positions, self._synced[positions])
        self._synced[positions] = 0.0
        self._synced_mask[positions] = False
        return change

    def _take_refresh(self):
        """The DualRefresh made by the last dual sync, if the backend asked for one (it
        rides with the reply)."""
        refresh, self._refresh = self._refresh, None
        return refresh

    # --- prediction -------------------------------------------------------------------

    def hold_for_prediction(self, block):
        """The client's block of new samples: its training features J_k, the same ids in
        the same order (w_k's coordinates), of the new samples it holds (global ids)."""
        if not np.array_equal(np.asarray(block.feature_ids), self.feature_ids):
            raise ValueError(f"client {self.id}: the prediction block's feature ids differ "
                             f"from the training block's ({np.size(block.feature_ids)} "
                             f"against {self.feature_ids.size} ids"
                             f"{_first_difference(block.feature_ids, self.feature_ids)}): "
                             f"its columns must be the training block's features, in order")
        self._prediction = block

    def predict_shares(self, message):
        """Masked shares of x_i^k . w_k for the new samples it holds (0 for the rest):
        the server learns only their sum over the clients, the margin; with the ids it
        holds, so that the server can check every new sample has a holder."""
        block = self._prediction_block()
        n_samples = int(message.n_samples)
        ids = np.asarray(block.sample_ids)
        if ids.size and (ids.min() < 0 or ids.max() >= n_samples):
            raise ValueError(f"client {self.id}: the prediction block holds sample ids "
                             f"{ids.min()} to {ids.max()}, outside the {n_samples} new "
                             f"samples asked for (ids 0 to {n_samples - 1})")
        parts = np.zeros(n_samples)
        parts[ids] = block.X @ message.w
        return msg.PredictShares(self.masker.mask(parts, self.id, message.participants,
                                                  message.tag), ids)

    def _prediction_block(self):
        if self._prediction is None:
            raise ValueError(f"client {self.id} holds no prediction block")
        return self._prediction

    def prediction_entry_tags(self, message):
        """The keyed tags of its non-zero entries of the new samples and local columns
        asked for (``hyfdca._holdings``): where another holder of the same new sample
        holds the same feature, an entry could be added twice to a margin."""
        block = self._prediction_block()
        ids = np.asarray(block.sample_ids)
        samples = np.asarray(message.samples, dtype=np.int64)
        columns = np.asarray(message.columns, dtype=np.int64)
        if not np.isin(samples, ids).all() or (columns.size and (
                columns.min() < 0 or columns.max() >= self.feature_ids.size)):
            raise ValueError(f"client {self.id}: entry tags asked for new samples it does not "
                             f"hold or columns that are not its features")
        return msg.EntryTags(entry_tags(self.masker, f"prediction entries|{message.tag}",
                                        block.X, ids, self.feature_ids,
                                        np.searchsorted(ids, samples), columns))

    # --- set-up -------------------------------------------------------------------------

    def setup_request(self, message):
        """Check its labels, then send Enc(||x_i^k||^2) for its samples that others hold
        too (q_i of a sample it holds alone is its own ||x_i^k||^2), with the keyed tags
        of their labels, of its entries where other rectangles overlap its own and of its
        block (``hyfdca._holdings``)."""
        check_classification_labels(self.y, self.settings.loss)
        self._counts = np.asarray(message.holder_counts, dtype=np.int64)
        self._n_clients = int(message.n_clients)
        self._blocks = ClientBlocks(message.block_members)
        if self._blocks.slots != self.keys.slots or self._blocks.block_of.size != self.n_local:
            raise ValueError(
                f"client {self.id}: the set-up's blocks hold {self._blocks.block_of.size} "
                f"samples in {self._blocks.slots} slots each, its keys pack "
                f"{self.keys.slots} values per ciphertext and it holds {self.n_local} "
                f"samples (key or layout mismatch)")
        self._units = self._draw_units(message.draw_units)
        shared = np.flatnonzero(self._counts > 1)  # whole blocks: a block's holders agree
        try:
            parts = self._encrypt(shared, self.partial[shared])
        except OverflowError:  # q_i >= ||x_i^k||^2: the range check names the problem
            self._check_range(float(np.max(self.partial[shared])))
            raise
        empty = np.zeros(0, dtype=np.int64)
        rows, columns = (empty if a is None else np.asarray(a, dtype=np.int64)
                         for a in (message.overlap_rows, message.overlap_columns))
        for name, positions, size in (("rows", rows, self.n_local),
                                      ("columns", columns, self.feature_ids.size)):
            if positions.size and (positions.min() < 0 or positions.max() >= size):
                raise ValueError(f"client {self.id}: the set-up's overlap {name} are not "
                                 f"positions of its block (0 to {size - 1})")
        nonce = message.holding_nonce
        return msg.SharedNormParts(
            shared, parts,
            label_tags(self.masker, nonce, self.sample_ids[shared], self.y[shared]),
            entry_tags(self.masker, f"entries|{nonce}", self.X, self.sample_ids,
                       self.feature_ids, rows, columns),
            block_tag(self.masker, nonce, self.sample_ids, self.feature_ids, self.X, self.y))

    def setup_norms(self, message):
        """q_i from the decrypted sums; rho, the update weights; the largest q_i and |y_i|
        for the server's range check (docs/reliability.md section 2)."""
        q = self.partial.copy()
        q[message.positions] = self._decrypt(message.positions, message.totals)
        self.q = q
        self.rho = correction_factors(self.settings.rho, q, self.partial)
        self.update_weight = aggregation_weights(self.settings.holder_weights, self._counts,
                                                 q, self.partial, self.keys.codec.frac_bits)
        self.inv_holders = 1.0 / self._counts.astype(np.float64)
        return msg.SetupDone(float(np.max(q, initial=0.0)),
                             float(np.max(np.abs(self.y), initial=0.0)))

    def _check_range(self, max_sq_norm):
        check_encoding_range(self.settings, max_sq_norm,
                             float(np.max(np.abs(self.y), initial=0.0)),
                             self.keys.codec.frac_bits, self._n_clients,
                             step_bits(self.settings))

    # --- rounds ---------------------------------------------------------------------------

    def start_round(self, message):
        """Sync duals, draw this round's samples among the eligible ones, send the change
        of v_k."""
        self.round = message.round
        self.stalled |= bool(message.stalled)
        self._apply_sync(message.sync)
        self.drawn = self._draw(message.eligible, self.round)
        change = self._report_synced()
        if change is None:
            change = np.zeros(self.X.shape[1])
        return msg.PrimalContribution(change=change, drawn=self.drawn,
                                      refresh=self._take_refresh())

    def resync(self, message):
        """Rejoin after losing its state: alpha := the synced alpha of all its samples;
        send v_k = (X^k)^T alpha / (mu N) in full (it replaces the server's old v_k)."""
        self._pending = None  # nothing tentative: alpha becomes the server's alpha
        self._apply_sync(message.sync)
        self._synced[:] = 0.0  # v_k goes in full, not as the sync's change
        self._synced_mask[:] = False
        self._sent_parts[:] = 0.0  # the server's stored parts restart from 0 too
        v_k = self.X.T @ self.alpha / self.round_settings.round_lam_n
        return msg.PrimalContribution(change=v_k,
                                      drawn=np.zeros(0, dtype=np.int64),
                                      refresh=self._take_refresh())

    def restarted(self):
        """The same party after a restart that lost its state: its block, keys, settings
        and draw stream, nothing else (it rejoins through the set-up exchange and
        :meth:`resync`)."""
        block = SimpleNamespace(X=self.X, y=self.y, sample_ids=self.sample_ids,
                                feature_ids=self.feature_ids)
        return Client(self.id, block, self.keys, self.masker, self.settings, self.stream)

    def _draw_units(self, units):
        """Its draw units from the set-up (None: one per sample), checked against its
        samples and ``settings.draw_block``."""
        if units is None:
            units = sample_units(self.n_local)
        units = np.asarray(units, dtype=np.int64)
        held = units >= 0
        if (units.ndim != 2 or units.shape[1] != self.settings.draw_block
                or not np.array_equal(np.sort(units[held]), np.arange(self.n_local))
                or not np.all(held[:, 0]) or np.any(held[:, 1:] & ~held[:, :-1])):
            raise ValueError(
                f"client {self.id}: the set-up's draw units (shape {units.shape}) are not "
                f"blocks of draw_block={self.settings.draw_block} positions in their first "
                f"slots covering its {self.n_local} samples once each (layout mismatch)")
        return units

    def _draw(self, eligible, round_):
        """Positions drawn among its units whose samples are eligible (a unit's samples
        share their holders, so its first sample speaks for it)."""
        candidates = None if eligible.all() else np.flatnonzero(eligible[self._units[:, 0]])
        if candidates is not None and candidates.size == 0:
            return np.zeros(0, dtype=np.int64)
        H = self.round_settings.inner_steps(self.n_local)
        return draw_positions(self.stream, round_, self._units, candidates, H,
                              self.settings.draw == "permuted")

    # --- step 3: secure inner product -------------------------------------------------

    def inner_product_parts(self, message):
        """Receive w on J_k; send Enc(x_i^k . w) for the requested samples, and in the
        rest of their blocks the parts it sent last (what the server stores there)."""
        self.w = message.w
        if message.sync is not None:
            self._apply_sync(message.sync)
        requested = message.requested
        # requests are ascending and distinct: as many as its rows means all of them
        every_row = requested.size == self.n_local
        fresh = (self.X if every_row else self.X[requested]) @ self.w
        parts = self._encrypt(requested, fresh, self._sent_parts)
        if message.stored:
            self._sent_parts[requested] = fresh
        return msg.InnerProductParts(parts=parts, refresh=self._take_refresh())

    # --- step 4-5: local dual method and dual update ----------------------------------

    def local_update(self, message):
        """Decrypt the margins, run LocalDualMethod, send Enc(p_i^k dalpha_i) (the holder
        weights of ``_round.aggregation_weights``)."""
        z = np.zeros(self.n_local)
        if message.w is not None:  # sole holder of its samples: margins are local
            self.w = message.w
            self._apply_sync(message.sync)
            z[self.drawn] = self.X[self.drawn] @ self.w
        elif self.drawn.size:
            z[self.drawn] = self._decrypt(self.drawn, message.margins)
        s = self.round_settings
        start = time.perf_counter()
        dalpha, _ = local_dual_method(self.X.data, self.X.indices, self.X.indptr, self.y,
                                      self.alpha, z, self.q, self.rho, self.drawn,
                                      s.loss_code, s.round_lam_n, s.sigma_bound, s.smoothing,
                                      self.X.shape[1])
        self.compute_seconds = time.perf_counter() - start
        self.compute_ops = local_work(self.X.indptr, self.drawn)
        # every drawn sample, zeros included: which ones did not move would tell the
        # server about their margins (for hinge, alpha_i = 0 and no step means y_i z_i >= 1)
        drawn = np.unique(self.drawn)
        dalpha = self._encrypt(drawn, dalpha[drawn] * self.update_weight[drawn],
                               range_bits=dual_update_range_bits(s, self.keys.codec.frac_bits))
        return msg.DualUpdate(positions=drawn, dalpha=dalpha, refresh=self._take_refresh())

    # --- step 6: second primal aggregation, line-search shares -------------------------

    def primal_update(self, message):
        """Receive the aggregated dalpha of its samples (the tentative step, settled when g
        arrives with the next dual sync); send the changes of v_k, the masked line-search
        shares and, if asked (``predraw``), next round's draws."""
        self.round = message.round
        pos = message.positions
        d = self._decrypt(pos, message.delta) if pos.size else np.zeros(0)
        self._pending = (pos, d)
        shares = None
        s = self.round_settings
        if s.line_search:
            values = line_search_shares(s, self.y[pos], self.alpha[pos], d,
                                        message.present_holders, self.q[pos],
                                        self.partial[pos])
            shares = self.masker.mask(values, self.id, message.participants, message.tag)
        next_drawn = None
        if message.predraw:  # full participation: announce next round's draws now
            next_drawn = self.drawn = self._draw(np.ones(self.n_local, dtype=bool),
                                                 self.round + 1)
        return msg.PrimalUpdate(synced=self._report_synced(), tentative=self._change(pos, d),
                                shares=shares, next_drawn=next_drawn)

    # --- secure sums and the certificate ----------------------------------------------

    def eval_sync(self, message):
        """Certificate: v_k at the current alpha in full, on a copy (the round state is
        kept; a tentative step whose g has arrived is settled)."""
        self._settle(message.step)
        self._eval_alpha = self.alpha.copy()
        if message.positions.size:
            self._eval_alpha[message.positions] = self._decrypt(message.positions,
                                                                message.alpha)
        return msg.EvalContribution(v=self.X.T @ self._eval_alpha / self.settings.lam_n)

    def eval_shares(self, message):
        """Masked shares of the certificate sums (``segment_objective_sums``) weighted by
        1/(N |C_i|), and of whether it holds the certified points.

        First the points of the last certificate are settled: the point's margins are
        c (a z + (1 - a) zp) + (1 - c) zc and the dual point t alpha + (1 - t) ac, with
        that certificate's z, zp (x_{t-1}'s margins, z where it had none), zc, alpha and
        ac and the steps a, c and t the request brings (a certificate the server could
        not settle is settled by the next one). Without them (a client that lost its
        state) zc is taken as z and ac as alpha, and the 0 it sends makes the server take
        c = t = 1. z joins the running mean of the margins (``message.mean_epoch``); where
        the request names that mean in place of x_{t-1}, its value is zp, and a mean that
        does not hold the server's ``mean_size`` points (a certificate missed) is sent as
        z with a 0, which makes the server search x_t's segment alone.
        """
        everything = np.arange(self.n_local)
        z = self._decrypt(everything, message.margins)
        self._margin_mean = with_point(self._margin_mean, z, message.mean_epoch)
        searches_mean = message.mean_size > 0
        holds_mean = (searches_mean and self._margin_mean is not None
                      and self._margin_mean.size == message.mean_size)
        has_previous = message.previous_margins is not None or searches_mean
        if message.previous_margins is not None:
            z_previous = self._decrypt(everything, message.previous_margins)
        else:
            z_previous = self._margin_mean.value() if holds_mean else z
        trial = self._point_trial
        if trial is not None and trial[5] + 1 == message.point_version:
            line = line_point(message.point_line, trial[0], trial[1])
            self._point_margins = next_point_values(message.point_step, line, trial[2])
            self._dual_point = next_point_values(message.dual_point_step, trial[3], trial[4])
            self._point_version = message.point_version
        holding = (self._point_margins is not None and self._dual_point is not None
                   and self._point_version == message.point_version)
        z_point = self._point_margins if holding else z
        alpha_point = self._dual_point if holding else self._eval_alpha
        self._point_trial = (z, z_previous, z_point, self._eval_alpha, alpha_point,
                             message.point_version)
        s = self.settings
        layout = sums_layout(has_previous)
        sums = np.empty(layout.size + 1 + searches_mean)
        segment_objective_sums(s.loss_code, z, z_previous, has_previous, z_point, self.y,
                               self._eval_alpha, alpha_point, self.inv_holders / s.n_samples,
                               s.smoothing, sums[:layout.size])
        sums[layout.size] = 1.0 if holding else 0.0
        if searches_mean:
            sums[-1] = 1.0 if holds_mean else 0.0
        return msg.EvalShares(self.masker.mask(sums, self.id, message.participants,
                                               message.tag))


def _first_difference(ids, expected):
    """'' or ', first at position j: a against b' for two id arrays."""
    ids, expected = np.asarray(ids), np.asarray(expected)
    n = min(ids.size, expected.size)
    differ = np.flatnonzero(ids[:n] != expected[:n])
    if differ.size == 0:
        return ""
    j = int(differ[0])
    return f", first at position {j}: {ids[j]} against {expected[j]}"
