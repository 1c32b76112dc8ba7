"""The HyFDCA server: plaintext w; alpha only encrypted.

State (docs/algorithm.md section 2): w = sum_k v_k, kept as the sum of the changes of v_k
the clients report (so stale contributions of absent clients stay in it), and each v_k as
that sum per client (what a client that lost its state replaces when it rejoins: the
server saw every change anyway); Enc(q) of the shared samples (for a rejoin's set-up);
Enc(alpha) at
scale 2^(f + step bits); each client's stored Enc(x_i^k . w) parts (stale for absent
ones); which alpha entries changed since each client last synced. Encrypted vectors are
vectors of blocks (``hyfdca._packing``): every operation adds, scales or moves whole
ciphertexts. The certified point w_c (plaintext, as w). It holds an Evaluator, never a
private key, and no data or labels.
"""

import secrets

import numpy as np

from hyfdca import _messages as msg
from hyfdca._certificate import choose_dual_point, choose_triangle_point, kept_iterates
from hyfdca._holdings import HoldingsError, check_holdings, check_reply, holdings_digest
from hyfdca._packing import BlockLayout, draw_units
from hyfdca._round import (choose_step, conjugate_gain, initial_kappa, moves_prox_centre,
                           new_step_record, next_prox_centre, participants_are_synced,
                           stalls, starts_outer_loop, step_bits, weakened_outer_loop)


class Server:
    # set at construction from the data and settings; everything else is the run's state
    FIXED = frozenset(("settings", "evaluator", "n_samples", "n_features", "sample_ids",
                       "feature_ids", "holder_counts", "frac_bits", "step_bits",
                       "alpha_scale", "blocks", "draw_units", "overlaps"))

    def __init__(self, layout, evaluator, settings, frac_bits, holding_nonce=None):
        self.settings = settings
        self.evaluator = evaluator
        self.n_samples, self.n_features = layout.n_samples, layout.n_features
        self.sample_ids = list(layout.sample_ids)
        self.feature_ids = list(layout.feature_ids)
        self.holder_counts = layout.holder_counts
        self.frac_bits = frac_bits
        self.step_bits = step_bits(settings)
        self.alpha_scale = frac_bits + self.step_bits
        self.blocks = BlockLayout(self.sample_ids, self.n_samples, evaluator.slots)
        self.draw_units = draw_units(self.sample_ids, self.n_samples, settings.draw_block,
                                     self.blocks)
        self.overlaps = layout.overlaps()
        # the nonce that keys this run's holding tags and the SHA-256 of each client's
        # tags from the set-up, against which a client that rejoins is checked
        # (hyfdca._holdings; a checkpoint keeps both)
        self.holding_nonce = holding_nonce or secrets.token_hex(16)
        self.holding_digests = {}
        self.w = np.zeros(self.n_features)
        self.contribution = [np.zeros(J.size) for J in self.feature_ids]  # v_k in w
        self.client_step = np.ones(len(self.sample_ids))  # g of each client's last round
        self.enc_alpha = evaluator.zeros(self.blocks.n_blocks, self.alpha_scale)
        self.parts = [evaluator.zeros(b.size, frac_bits) for b in self.blocks.client_blocks]
        self.version = 0
        self.changed_at = np.zeros(self.n_samples, dtype=np.int64)
        self.synced_at = np.zeros(len(self.sample_ids), dtype=np.int64)
        self.drawn = [np.zeros(0, dtype=np.int64) for _ in self.sample_ids]
        # the certified point w_c (hyfdca._certificate; None before the first
        # certificate), how many steps of it were chosen, and the last steps a and c,
        # which the next certificate's request brings to the clients (they keep its
        # margins)
        self.point_w, self.point_version, self.point_line, self.point_step = None, 0, 1.0, 1.0
        # the certified dual point's w(alpha_c) (None before the first certificate) and
        # its last step t, which travels with c (the clients keep alpha_c)
        self.dual_point_w, self.dual_point_step = None, 1.0
        # whether the line search has stalled (hyfdca._round.stalls; then every round
        # runs settings.after_stall() and the dual syncs tell the clients), and its record
        self.stalled, self.zero_steps = False, new_step_record()
        # the proximal centre c and w at its last move (settings.prox > 0)
        self.prox_centre = np.zeros(self.n_features)
        self.prox_last_w = np.zeros(self.n_features)
        # the kappa the rounds run (None: the settings'; prox_warm_start, prox_adapt) and
        # the dual's conjugate term C(alpha) summed from the steps (_round.tracked_dual)
        self.prox_kappa, self.conjugate_total = initial_kappa(settings), 0.0
        # the proximal problem (kappa, c) the last round solved, before a move at its end:
        # a certificate may certify its iterate (_certificate.certified_problem)
        self.solved_problem = self.rounds_problem()
        # (x_{t-1}, x_t): the last two rounds' iterates, whose triangle with the certified
        # point a certificate may search (_certificate.kept_iterates)
        self.kept_iterates = (None, None)
        # the running mean of the points certificates offered (_certificate.RunningMean)
        self.point_mean = None

    def rounds_problem(self):
        """(kappa, c) of the proximal problem the rounds solve now."""
        return self.round_settings.kappa, self.prox_centre

    @property
    def round_settings(self):
        """The settings the rounds run now (after_stall() once the line search stalled,
        the kappa prox_warm_start or prox_adapt left)."""
        return self.settings.for_round(self.stalled, self.prox_kappa)

    # --- set-up ---------------------------------------------------------------------------

    def setup_message(self, k):
        return msg.SetupRequest(self.holder_counts[self.sample_ids[k]], len(self.sample_ids),
                                self.blocks.members[k],
                                None if self.draw_units is None else self.draw_units[k],
                                *self.overlaps[k], self.holding_nonce)

    def _take(self, vector, k, positions):
        """The ciphertexts of a vector of blocks that hold client k's ``positions``."""
        return self.evaluator.take(vector, self.blocks.global_blocks(k, positions))

    def start_setup(self):
        self.enc_norms = self.evaluator.zeros(self.blocks.n_blocks, self.frac_bits)
        self.norm_positions = {}
        self._holding_tags = {}

    def receive_norm_parts(self, k, reply):
        """Add client k's Enc(||x_i^k||^2) of its shared samples into Enc(q); keep its
        holding tags for :meth:`check_holdings`."""
        check_reply(k, len(reply.positions), reply.label_tags, reply.entry_tags,
                    reply.block_tag)
        self.evaluator.add_at(self.enc_norms, self.blocks.global_blocks(k, reply.positions),
                              reply.parts)
        self.norm_positions[k] = reply.positions
        self._holding_tags[k] = (reply.label_tags, reply.entry_tags, reply.block_tag)

    def check_holdings(self):
        """HoldingsError where the set-up's tags show holders that disagree on a label
        or an entry held twice (``hyfdca._holdings``); then keep only their digests."""
        tags, clients = self._holding_tags, sorted(self._holding_tags)
        check_holdings(self.n_samples,
                       [self.sample_ids[k][self.norm_positions[k]] for k in clients],
                       [tags[k][0] for k in clients], [tags[k][1] for k in clients])
        self.holding_digests = {int(k): holdings_digest(*tags[k]) for k in tags}
        del self._holding_tags

    def check_rejoin(self, k, reply):
        """HoldingsError unless client k, rejoining, sends the holding tags it sent at
        set-up (its block's tag among them): a party restarted with another file would
        solve another problem."""
        check_reply(k, len(reply.positions), reply.label_tags, reply.entry_tags,
                    reply.block_tag)
        digest = holdings_digest(reply.label_tags, reply.entry_tags, reply.block_tag)
        if digest != self.holding_digests[k]:
            raise HoldingsError(f"client {k} rejoins with another block than it set up "
                                f"with (ids, entries or labels differ)")

    def norms_message(self, k):
        positions = self.norm_positions[k]
        return msg.SharedNorms(positions, self._take(self.enc_norms, k, positions))

    def state(self):
        """The server's state between rounds (ciphertexts stay ciphertexts; no key)."""
        return {name: value for name, value in vars(self).items() if name not in self.FIXED}

    def load_state(self, state):
        vars(self).update(state)
        if "solved_problem" not in state:  # from before the solved problem was kept
            self.solved_problem = self.rounds_problem()
        if "kept_iterates" not in state:  # from before the iterates were kept
            self.kept_iterates = (None, None)
        if "point_line" not in state:  # from before the triangle: x_t's segment
            self.point_line = 1.0
        if "point_mean" not in state:  # from before the running mean
            self.point_mean = None

    # --- dual sync ---------------------------------------------------------------------

    def dual_sync(self, k, commit=True):
        """Enc(alpha_i) for client k's samples that changed since it last synced; with
        ``commit=False`` (the certificate) the client's sync state is left as it was."""
        I = self.sample_ids[k]
        due = self.changed_at[I] > self.synced_at[k]
        if commit:  # and stored ciphertexts the backend wants refreshed (public metadata)
            stale = self.evaluator.stale(self.enc_alpha, self.blocks.client_blocks[k])
            due |= stale[self.blocks.local_block_of[k]]
            self.synced_at[k] = self.version
        positions = np.flatnonzero(due)
        return msg.DualSync(positions, self._take(self.enc_alpha, k, positions),
                            float(self.client_step[k]), self.prox_kappa)

    def _receive_refresh(self, k, reply):
        """Store the fresh Enc(alpha_i) a reply carries (if its backend asked for them) in
        place of the ciphertexts the client just synced (same phase: alpha has not
        changed since)."""
        if reply.refresh is not None:
            self.evaluator.put(self.enc_alpha,
                               self.blocks.global_blocks(k, reply.refresh.positions),
                               reply.refresh.alpha)

    def round_start(self, k, eligible, round_):
        return msg.RoundStart(round_, self.dual_sync(k), eligible, self.stalled)

    def receive_primal(self, k, reply):
        """w += the change of v_k (client after client, in the order of the replies)."""
        self.w[self.feature_ids[k]] += reply.change
        self.contribution[k] += reply.change
        self.drawn[k] = reply.drawn
        self._receive_refresh(k, reply)

    def aggregate_primal(self, v):
        """sum_k v_k scattered onto the global features (the certificate's w)."""
        w = np.zeros(self.n_features)
        for J, vk in zip(self.feature_ids, v):
            w[J] += vk
        return w

    # --- secure inner product -----------------------------------------------------------

    def start_inner_products(self, available):
        """Union of the drawn samples and its blocks, and each client's requested
        positions (its samples in the union)."""
        drawn = [self.sample_ids[k][self.drawn[k]] for k in available]
        self.union = np.unique(np.concatenate(drawn)) if drawn else np.zeros(0, np.int64)
        self.union_blocks = self.blocks.blocks_of_samples(self.union)
        self.requests = {}
        for k in range(len(self.sample_ids)):
            I = self.sample_ids[k]
            pos = np.searchsorted(I, self.union)
            hit = pos < I.size
            hit[hit] = I[pos[hit]] == self.union[hit]
            self.requests[k] = pos[hit]
        return self.union

    def weights_message(self, k, with_sync):
        sync = self.dual_sync(k) if with_sync else None
        return msg.WeightsAndRequest(self.w[self.feature_ids[k]], self.requests[k], sync)

    def receive_parts(self, k, reply):
        self.evaluator.put(self.parts[k], self.blocks.local_blocks(k, self.requests[k]),
                           reply.parts)
        self._receive_refresh(k, reply)

    def sum_parts(self):
        """Enc(x_i . w) for the union's blocks: each holder's latest parts (stale if
        absent)."""
        ev = self.evaluator
        total = ev.zeros(self.union_blocks.size, self.frac_bits)
        for k, positions in self.requests.items():
            if positions.size:
                local = self.blocks.local_blocks(k, positions)
                where = np.searchsorted(self.union_blocks, self.blocks.client_blocks[k][local])
                ev.add_at(total, where, ev.take(self.parts[k], local))
        self.margin_total = total

    def margins_message(self, k, with_weights):
        """Enc(x_i . w) for the blocks of client k's draws; or, if it is the sole holder
        of its samples (``with_weights``), w on J_k and the dual sync so that it computes
        them itself."""
        if with_weights:
            return msg.Margins(None, self.w[self.feature_ids[k]], self.dual_sync(k))
        where = np.searchsorted(self.union_blocks,
                                self.blocks.global_blocks(k, self.drawn[k]))
        return msg.Margins(self.evaluator.take(self.margin_total, where))

    # --- dual aggregation, second primal aggregation, line search -----------------------

    def start_dual_aggregation(self, available):
        self.enc_delta = self.evaluator.zeros(self.blocks.n_blocks, self.frac_bits)
        self.touched = np.zeros(self.n_samples, dtype=bool)
        self.present_holders = np.zeros(self.n_samples, dtype=np.int64)
        for k in available:
            self.present_holders[self.sample_ids[k]] += 1

    def receive_dual_update(self, k, reply):
        self.evaluator.add_at(self.enc_delta, self.blocks.global_blocks(k, reply.positions),
                              reply.dalpha)
        self.touched[self.sample_ids[k][reply.positions]] = True
        self._receive_refresh(k, reply)

    def delta_message(self, k, participants, tag, round_, predraw):
        """Enc(aggregated dalpha_i) for client k's touched samples (the tentative step)."""
        I = self.sample_ids[k]
        positions = np.flatnonzero(self.touched[I])
        return msg.TentativeStep(positions, self._take(self.enc_delta, k, positions),
                                 self.present_holders[I[positions]], participants, tag,
                                 round_, predraw)

    def finish_round(self, updates, revealed_shares, next_draws):
        """Add the synced changes of v_k to w; choose the step g for dw = sum_k of the
        tentative changes; apply alpha += g dalpha (homomorphically) and w += g dw.
        ``updates``: each available client's PrimalUpdate, in client order. A stalled
        line search switches the next rounds to settings.after_stall()."""
        s = self.round_settings
        dw = np.zeros(self.n_features)
        for k, update in updates.items():
            if update.synced is not None:
                self.w[self.feature_ids[k]] += update.synced
                self.contribution[k] += update.synced
            dw[self.feature_ids[k]] += update.tentative
        m, g = choose_step(s, revealed_shares, self.w, dw)
        if s.prox_adapt:
            self.conjugate_total += conjugate_gain(s, revealed_shares, g)
        if not self.stalled:
            self.stalled = stalls(s, self.zero_steps, m)
        ids = np.flatnonzero(self.touched)
        if ids.size:
            if m != 0:  # enc_delta is 0 in the untouched slots of these blocks
                blocks = self.blocks.blocks_of_samples(ids)
                step = self.evaluator.take(self.enc_delta, blocks)
                if self.step_bits:
                    step = self.evaluator.multiply(step, m, self.step_bits)
                self.evaluator.add_at(self.enc_alpha, blocks, step)
            # the entries changed for every holder that did not take part
            self.version += 1
            self.changed_at[ids] = self.version
        synced = participants_are_synced(m, s, self.frac_bits)
        for k, update in updates.items():
            self.contribution[k] += g * update.tentative
            self.client_step[k] = g
            if synced:  # its settled alpha + g dalpha is the server's alpha
                self.synced_at[k] = self.version
            if next_draws is not None:
                self.drawn[k] = next_draws[k]
        self.w = self.w + g * dw
        return g

    def end_round(self, round_):
        """After round ``round_`` (from 1), whatever took part: move the proximal centre
        where it is due (``_round.next_prox_centre``; w takes the offset's change), after
        prox_adapt's rule (``_round.weakened_outer_loop``: a weaker kappa rescales w and
        each v_k, and the momentum restarts); start the warm-started outer loop where due
        (``_round.starts_outer_loop``). The round's problem (kappa, c) is kept first, for
        a certificate, and so is its iterate, whose line to the next round's a certificate
        may search (``_certificate.kept_iterates``)."""
        s = self.round_settings
        self.solved_problem = self.rounds_problem()
        iterate = self.w.copy() if self.settings.certify_two_iterates else None  # x_t
        if s.prox_adapt and moves_prox_centre(s, round_):
            weakened = weakened_outer_loop(s, self.conjugate_total, self.w, self.prox_centre)
            if weakened is not None:
                kappa, self.w, scale = weakened
                self._run_kappa(kappa, scale)
                self.prox_last_w = self.w.copy()
                s = self.round_settings
        if moves_prox_centre(s, round_):
            self.prox_centre, shift, self.prox_last_w = next_prox_centre(
                s, self.w, self.prox_centre, self.prox_last_w)
            self.w = self.w + shift
        if starts_outer_loop(self.settings, round_):  # w stays; c = w
            self._run_kappa(self.settings.kappa, self.settings.lam / self.settings.round_lam)
            self.prox_centre, self.prox_last_w = self.w.copy(), self.w.copy()
        self.kept_iterates = kept_iterates(self.settings, self.kept_iterates, iterate,
                                           self.solved_problem, self.rounds_problem())

    def _run_kappa(self, kappa, scale):
        """The rounds run ``kappa`` from now on, alpha kept: each v_k = (X^k)^T alpha /
        (mu N) takes the factor ``scale`` = mu / mu'; the clients learn kappa with their
        next dual sync."""
        self.prox_kappa = kappa
        self.contribution = [scale * v for v in self.contribution]

    # --- a client that lost its state rejoins -----------------------------------------

    def resync_message(self, k):
        """Enc(alpha_i) for every sample of client k: the whole dual sync."""
        return msg.Resync(msg.DualSync(np.arange(self.sample_ids[k].size), self.evaluator.take(
            self.enc_alpha, self.blocks.client_blocks[k]), prox_kappa=self.prox_kappa))

    def receive_resync(self, k, reply):
        """Client k's v_k at the synced alpha replaces its old one in w:
        w += v_k(new) - v_k(old); it holds alpha as of now, nothing tentative, and no
        record of the inner-product parts it sent: its stored parts restart from 0 (the
        client fills the rest of a block from that record, ``Client.inner_product_parts``)."""
        J = self.feature_ids[k]
        self.w[J] += reply.change - self.contribution[k]
        self.contribution[k] = reply.change.copy()
        self.synced_at[k] = self.version
        self.client_step[k] = 1.0
        self.drawn[k] = np.zeros(0, dtype=np.int64)
        self.parts[k] = self.evaluator.zeros(self.blocks.client_blocks[k].size, self.frac_bits)
        self._receive_refresh(k, reply)

    def store_all_parts(self, k, reply):
        self.parts[k] = reply.parts

    # --- certificate --------------------------------------------------------------------

    def full_margins(self, parts):
        """Enc(x_i . w) for every sample from every client's parts over all its samples."""
        ev = self.evaluator
        total = ev.zeros(self.blocks.n_blocks, self.frac_bits)
        for k, p in parts.items():
            ev.add_at(total, self.blocks.client_blocks[k], p)
        return total

    def eval_message(self, k, margins, previous_margins, participants, tag, mean_epoch=-1,
                     mean_size=0):
        take = self.evaluator.take
        blocks = self.blocks.client_blocks[k]
        return msg.EvalRequest(take(margins, blocks),
                               None if previous_margins is None else take(previous_margins,
                                                                          blocks),
                               participants, tag, self.point_line, self.point_step,
                               self.dual_point_step, self.point_version, mean_epoch,
                               mean_size)

    def point_choice(self, x, x_previous, loss_sums, holding, holding_mean=None):
        """(a, c, P(w_c), w_c, P(x)) for the certified point (x = x_t the offered point,
        x_previous = x_{t-1}, the running mean or None) from the revealed triangle loss
        sums (``choose_triangle_point``; c = 1 unless all clients, ``holding`` of them,
        kept the last points; x_t's segment alone where x_previous is the running mean and
        not all clients, ``holding_mean`` of them, hold its margins). Nothing changes
        before ``commit_point``."""
        last = self.point_w if self._all_hold(holding) else None
        if holding_mean is not None and not self._all_hold(holding_mean):
            x_previous = None
        return choose_triangle_point(self.settings.lam, x, x_previous, last, loss_sums)

    def dual_point_choice(self, w_alpha, conj_sums, holding):
        """(t, D(alpha_c), w(alpha_c), D(alpha)) for the certified dual point from the
        revealed segment conjugate sums (``choose_dual_point``; t = 1 unless all clients
        kept the last points)."""
        last = self.dual_point_w if self._all_hold(holding) else None
        return choose_dual_point(self.settings.lam, w_alpha, last, conj_sums)

    def _all_hold(self, holding):
        return int(round(holding)) == len(self.sample_ids)

    def commit_point(self, line, step, point_w, dual_step, dual_point_w):
        self.point_w, self.point_line, self.point_step = point_w, line, step
        self.dual_point_w, self.dual_point_step = dual_point_w, dual_step
        self.point_version += 1
