"""The batched plaintext HyFDCA engine: every client of a round in one Numba call per phase.

:class:`BatchedHyFDCA` runs the same protocol as the message engine (``HyFDCARun``) with
``crypto="plain"`` (same phases, same participation and index draws, the plain backend's
fixed-point integers for alpha, dalpha and the inner-product parts, the masked sums'
fixed-point shares) and gives the same bits: alpha, w and every round's step. What it
drops is the per-message machinery: no transport, no message objects, no per-client
Python loop, no traffic accounting. The round record's ``rtc`` is counted from the
phases (``_round.plan_round``) and the plain backend's operation counts (encrypt,
decrypt, add, multiply: the values each phase encrypts, decrypts and adds) from the
union, the synced rows and the draws, equal to the message protocol's (tested); bytes
are reported as 0. ``compute_seconds`` estimates the slowest client's LocalDualMethod
time: the batched kernel's CPU time (wall time x Numba threads) apportioned to clients
by the size of their steps (non-zeros of the drawn rows + 1 per step). ``updates``
counts the round's coordinate updates.

Every algorithmic decision (phases, eligible samples, rho, aggregation weights, the
line-search terms and the step) comes from ``hyfdca._round``, as in the message engine;
index draws from ``hyfdca._draws`` (counter-based, keyed by (stream, round)), shared
with the message protocol's clients; participation from ``feddata.participation``.

All client blocks are stored once as one concatenated CSR (local feature coordinates)
with per-client row and feature offsets; the state is per holding (client, sample) or per
feature holding (client, feature), never dense N x d, d x K or N x K.

Not supported (ValueError): the logistic loss with the line search (its grid search sums
NumPy logarithms client by client; use the message protocol).
"""

import io
import json
import time

import numba
import numpy as np

from crypto import FixedPoint, unmasked_total
from feddata import Participation
from hyfdca import _batched_kernels as kern
from hyfdca._batched_layout import (Blocks, Draws, Duals, Params, RoundArrays, Scratch,
                                    UnionHoldings, structure_arrays)
from hyfdca._certificate import (Certificate, RunningMean, certified_problem,
                                  checked_certificate, choose_dual_point,
                                  choose_triangle_point, kept_iterates, larger_l1,
                                  line_point, next_point_values, offered_points,
                                  prox_iterate, sums_layout, with_offered_point,
                                  with_point)
from hyfdca._checkpoint import CheckpointError, reading
from hyfdca._draws import sample_units, stream_key
from hyfdca._encoding_range import check_encoding_range
from hyfdca._packing import draw_units
from hyfdca._round import (aggregation_weights, choose_step, conjugate_gain,
                           correction_factors, draws_all_samples, eligible_samples,
                           initial_kappa, line_search_term_count, margins_are_local,
                           moves_prox_centre, new_step_record, next_prox_centre,
                           participants_are_synced, plan_round, sampling_streams, stalls,
                           starts_outer_loop, step_bits, weakened_outer_loop)
from solvers import check_classification_labels

BACKENDS = ("numba", "cupy")


def runs_on_batched_engine(settings):
    """False for the logistic loss with the line search (its grid search sums NumPy
    logarithms client by client): only the message engine runs it."""
    return not (settings.line_search and settings.loss == "logistic")


# Global column ids cost 4 bytes per non-zero (a third of the CSR); by default they are kept
# only where every client's feature window is this small: many small clients, whose rounds
# they speed up most (each client's window of feature ids is cold at every round).
GLOBAL_COLUMNS_MAX_WINDOW = 4096


class BatchedHyFDCA:
    """Plaintext HyFDCA over all clients at once (the engine behind ``engine="batched"``).

    Parameters
    ----------
    dataset : FederatedDataset
    settings : HyFDCASettings
    frac_bits : int
        Fixed-point fractional bits of the plain backend (as in the message protocol).
    seed : int
    backend : {"numba", "cupy"}
        Where the kernels run; "cupy" imports CuPy (a GPU) only when asked for.
    share_storage : bool
        Opt-in (False by default: the caller's dataset is never modified). Hold the block
        data once: after copying a block's CSR values, column indices and feature ids
        into the concatenated arrays, re-point the block's ``X.data``, ``X.indices`` and
        ``feature_ids`` to views of them (same values; the dataset stays valid), so that
        they are not held twice (about half the memory, for runs at the scale of
        ``benchmarks/scale.py``). The engine then shares its arrays with the dataset.
    global_columns : bool or None
        Keep each non-zero's global column id (int32, 4 bytes per non-zero) for the inner
        products, which then read w directly instead of through the client's feature ids
        (same bits). None: only where every client's feature window has at most
        GLOBAL_COLUMNS_MAX_WINDOW features, where those ids cost a round a few cache
        lines per client (many small clients); wide windows keep the memory.
    """

    def __init__(self, dataset, settings, *, frac_bits=32, seed=0, backend="numba",
                 share_storage=False, global_columns=None):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.dataset = dataset
        self.settings = s = settings.bind(dataset)
        if not runs_on_batched_engine(s):
            raise ValueError("the batched engine does not run the logistic loss with the line "
                             "search (a grid search over client-side NumPy logarithms); use "
                             "engine='protocol'")
        if not 0 < int(frac_bits) < 62:
            raise ValueError(f"need 0 < frac_bits < 62, got {frac_bits}")
        check_classification_labels(dataset.labels, s.loss)
        self.max_sq_norm = float(np.max(dataset.sq_row_norms, initial=0.0))
        check_encoding_range(s, self.max_sq_norm,
                             float(np.max(np.abs(dataset.labels), initial=0.0)),
                             int(frac_bits), dataset.n_clients, step_bits(s))
        self.seed = int(seed)
        self.frac_bits = int(frac_bits)
        self.backend = backend
        self._build(dataset, share_storage, global_columns)
        self.participation = Participation(s.participation, s.fraction, self.n_clients,
                                           self.seed)
        self.round = 0
        self.certificate_costs = []  # per certificate, as HyFDCARun.certificate_costs
        self._gpu = None
        if backend == "cupy":
            from hyfdca._cupy_kernels import CupyKernels
            self._gpu = CupyKernels(self)

    # --- set-up ---------------------------------------------------------------------------

    def _build(self, dataset, share_storage, global_columns):
        s = self.settings
        blocks = dataset.blocks
        K, N, d = dataset.n_clients, dataset.n_samples, dataset.n_features
        self.n_clients, self.n_samples, self.n_features = K, N, d
        n_rows = np.array([b.X.shape[0] for b in blocks], dtype=np.int64)
        n_cols = np.array([b.X.shape[1] for b in blocks], dtype=np.int64)
        nnz = np.array([b.X.nnz for b in blocks], dtype=np.int64)
        row_off, feat_off, nnz_off = _offsets(n_rows), _offsets(n_cols), _offsets(nnz)
        if global_columns is None:
            global_columns = int(n_cols.max(initial=0)) <= GLOBAL_COLUMNS_MAX_WINDOW
        n_hold, n_fh = int(row_off[-1]), int(feat_off[-1])
        # one concatenated CSR, filled block by block (no temporary lists of copies)
        data = np.empty(int(nnz_off[-1]), dtype=np.float64)
        indices = np.empty(int(nnz_off[-1]), dtype=np.int32)
        gcol = np.empty(int(nnz_off[-1]) if global_columns else 0, dtype=np.int32)
        indptr = np.empty(n_hold + 1, dtype=np.int64)
        indptr[-1] = nnz_off[-1]
        hold_sample = np.empty(n_hold, dtype=np.int64)
        hold_client = np.empty(n_hold, dtype=np.int32)
        hold_feat = np.empty(n_fh, dtype=np.int64)
        y = np.empty(n_hold, dtype=np.float64)
        partial = np.empty(n_hold, dtype=np.float64)
        for k, b in enumerate(blocks):
            r0, r1, e0, e1 = row_off[k], row_off[k + 1], nnz_off[k], nnz_off[k + 1]
            data[e0:e1] = b.X.data
            indices[e0:e1] = b.X.indices
            if global_columns:
                gcol[e0:e1] = b.feature_ids[b.X.indices]
            if share_storage and b.X.data.dtype == np.float64 and b.X.indices.dtype == np.int32:
                b.X.data, b.X.indices = data[e0:e1], indices[e0:e1]
            indptr[r0:r1] = b.X.indptr[:-1] + e0
            hold_sample[r0:r1] = b.sample_ids
            hold_client[r0:r1] = k
            J = hold_feat[feat_off[k]:feat_off[k + 1]]
            J[:] = b.feature_ids
            if share_storage and b.feature_ids.dtype == np.int64:
                object.__setattr__(b, "feature_ids", J)  # same ids, held once
            y[r0:r1] = b.y
            partial[r0:r1] = np.asarray(b.X.multiply(b.X).sum(axis=1)).ravel()
        counts = dataset.holder_counts
        self.holder_counts = counts
        q = setup_row_norms(partial, hold_sample, counts, self.frac_bits)
        self.blocks = Blocks(
            data=data, indices=indices, gcol=gcol, indptr=indptr, row_off=row_off,
            feat_off=feat_off, hold_feat=hold_feat, hold_sample=hold_sample,
            hold_client=hold_client,
            samp_ptr=_offsets(np.bincount(hold_sample, minlength=N)),  # holders of each
            samp_hold=np.argsort(hold_sample, kind="stable").astype(np.int64),  # sample
            y=y, q=q, partial_sq=partial, rho=correction_factors(s.rho, q, partial),
            update_weight=aggregation_weights(s.holder_weights, counts[hold_sample], q,
                                              partial, self.frac_bits))
        self.local_margins = margins_are_local(counts)
        self.step_bits = step_bits(s)
        self.params = Params(alpha_scale=2.0 ** -(self.frac_bits + self.step_bits),
                             frac_scale=2.0 ** self.frac_bits,
                             inv_frac_scale=2.0 ** -self.frac_bits,
                             lam_n=s.for_round(False, initial_kappa(s)).round_lam_n,
                             n_samples=N, loss_code=s.loss_code, sigma=s.sigma_bound,
                             smoothing=s.smoothing)
        # per-chunk scratch, one row per Numba thread, sized by the largest client
        T = numba.config.NUMBA_NUM_THREADS
        max_rows, max_cols = int(n_rows.max()), int(n_cols.max())
        streams = sampling_streams([b.sample_ids for b in dataset.blocks], s.sampling, self.seed)
        H, draw_off, drawn, picks = self._draw_sizes(s)
        units = draw_units([b.sample_ids for b in dataset.blocks], N, s.draw_block)
        if units is None:
            units = [sample_units(int(n)) for n in n_rows]
        self.draws = Draws(
            stream_keys=np.array([stream_key(t) for t in streams], dtype=np.uint64), H=H,
            draw_off=draw_off, drawn=drawn,
            drawn_cnt=np.zeros(K, dtype=np.int64), eligible=np.ones(N, dtype=bool),
            units=np.concatenate(units), unit_off=_offsets([u.shape[0] for u in units]),
            cand=np.zeros((T, max_rows), dtype=np.int64), picks=picks,
            perm=np.tile(np.arange(max_rows, dtype=np.int64), (T, 1)))  # the identity
        self.duals = Duals(enc_alpha=np.zeros(N, dtype=np.int64),
                           changed_at=np.zeros(N, dtype=np.int64),
                           synced_at=np.zeros(K, dtype=np.int64), alpha_loc=np.zeros(n_hold),
                           unreported=np.zeros(n_hold),
                           unreported_at=np.zeros(n_hold, dtype=np.int64))
        self.version = 0
        self.arrays = RoundArrays(
            union=np.zeros(N, dtype=np.int64), mark=np.zeros(N, dtype=np.int64),
            touched=np.zeros(N, dtype=np.int64), margin=np.zeros(N, dtype=np.int64),
            enc_delta=np.zeros(N, dtype=np.int64), present=np.zeros(N, dtype=np.int64),
            parts=np.zeros(n_hold, dtype=np.int64), upd=np.zeros(n_hold, dtype=np.int64),
            hold_mark=np.zeros(n_hold, dtype=np.int64), work=np.zeros(K, dtype=np.int64),
            err=np.zeros(1, dtype=np.int64))
        self.scratch = Scratch(
            wk=np.zeros((T, max_cols)), u=np.zeros((T, max_cols)),
            dalpha=np.zeros((T, max_rows)),
            buf=np.zeros((line_search_term_count(s), max_rows if s.line_search else 0)),
            change_row=np.zeros(max_cols), feat_mark=np.zeros(max_cols, dtype=np.int64),
            feat_list=np.zeros(max_cols, dtype=np.int64))
        self.token = 0
        # each available client's holdings of the round's union, and the previous round's
        self.lists = [UnionHoldings.empty(n_hold, K), UnionHoldings.empty(n_hold, K)]
        self.w = np.zeros(d)
        self.dw = np.zeros(d)
        # the certified point (hyfdca._certificate): its w_c and its margins per holding,
        # as each client keeps them for its samples; none before the first certificate
        self.point_w = np.zeros(d)
        self.point_z = np.zeros(n_hold)
        self.have_point = False
        # the certified dual point: alpha_c per holding, as each client keeps it for its
        # samples, and w(alpha_c) = X^T alpha_c / (lam N), which the server keeps
        self.dual_point_alpha = np.zeros(n_hold)
        self.dual_point_w = np.zeros(d)
        self.have_dual_point = False
        # whether the line search has stalled (the rounds then run s.after_stall()), and
        # its record of zero steps (hyfdca._round.stalls)
        self.stalled, self.zero_steps = False, new_step_record()
        # the proximal centre c and the server's w at its last move (settings.prox > 0)
        self.prox_centre, self.prox_last_w = np.zeros(d), np.zeros(d)
        # the kappa the rounds run (None: the settings'; prox_warm_start, prox_adapt) and
        # the dual's conjugate term C(alpha) summed from the steps (_round.tracked_dual)
        self.prox_kappa, self.conjugate_total = initial_kappa(s), 0.0
        # the proximal problem (kappa, c) the last round solved, before a move at its end:
        # a certificate may certify its iterate (_certificate.certified_problem)
        self.solved_problem = self.rounds_problem()
        # (x_{t-1}, x_t): the last two rounds' iterates, whose triangle with the certified
        # point a certificate may search (_certificate.kept_iterates)
        self.kept_iterates = (None, None)
        # the running means (_certificate.RunningMean) of the points certificates offered
        # (the server's) and of their margins on every holding (the clients')
        self.point_mean = self.margin_mean = None
        # per-round buffers kept between rounds (a fresh allocation costs page faults)
        self.avail_mask = np.zeros(K, dtype=bool)
        self.shares = np.zeros((line_search_term_count(s), K))

    # --- checkpoints ----------------------------------------------------------------------

    _STRUCTURES = ("draws", "duals", "arrays", "scratch")
    _PER_THREAD = frozenset({"draws.cand", "draws.picks", "draws.perm", "scratch.wk",
                             "scratch.u", "scratch.dalpha"})
    _ARRAYS = ("w", "dw", "avail_mask", "shares", "point_w", "point_z", "zero_steps",
               "prox_centre", "prox_last_w", "dual_point_alpha", "dual_point_w")

    def checkpoint_files(self):
        """File name -> bytes (``hyfdca._checkpoint``): every array of the run's state and
        its counters, in one .npz (the batched engine simulates all parties in one
        process, in plaintext)."""
        if self._gpu is not None:
            raise ValueError("checkpoints are written from host arrays: run with "
                             "backend='numba' to checkpoint (the cupy backend keeps its "
                             "state on the GPU)")
        arrays = self._state_by_name()
        counters = dict(version=self.version, token=self.token, round=self.round,
                        have_point=self.have_point, have_dual_point=self.have_dual_point,
                        stalled=self.stalled, prox_kappa=self.prox_kappa,
                        conjugate_total=self.conjugate_total,
                        solved_kappa=self.solved_problem[0],
                        participation=self.participation.rng.bit_generator.state,
                        certificate_costs=self.certificate_costs)
        arrays = dict(arrays, solved_centre=self.solved_problem[1],
                      counters=np.array(json.dumps(counters)))
        arrays.update({f"kept_iterate{i}": x for i, x in enumerate(self.kept_iterates)
                       if x is not None})
        for name in ("point_mean", "margin_mean"):
            arrays.update(mean_arrays(name, getattr(self, name)))
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return {"engine.npz": buffer.getvalue()}

    def _state_by_name(self):
        """The arrays of the run's state by a name per structure and field; not the
        per-thread scratch, whose rows follow the machine's Numba threads and which holds
        nothing between rounds (zeros and the identity), so a checkpoint resumes under
        another thread count."""
        arrays = {f"{name}.{field}": value for name in self._STRUCTURES
                  for field, value in getattr(self, name)._asdict().items()
                  if f"{name}.{field}" not in self._PER_THREAD}
        arrays.update({f"lists{i}.{field}": value for i, holdings in enumerate(self.lists)
                       for field, value in holdings._asdict().items()})
        arrays.update({name: getattr(self, name) for name in self._ARRAYS})
        return arrays

    @classmethod
    def from_checkpoint(cls, folder, dataset, settings, **options):
        """The run saved in checkpoint ``folder``, ready for its next round."""
        run = cls(dataset, settings, **options)
        path = folder / "engine.npz"
        with reading(path), np.load(path, allow_pickle=False) as saved:
            missing = sorted((set(run._state_by_name()) | {"counters", "solved_centre"})
                             - set(saved.files))
            if missing:
                raise CheckpointError(f"{path} lacks the arrays {missing}")
            counters = json.loads(str(saved["counters"]))
            if counters["stalled"]:
                run._fall_back()  # the draws' sizes of after_stall()
            for key, target in run._state_by_name().items():
                if saved[key].shape != target.shape:
                    raise CheckpointError(f"{path}: {key} has shape {saved[key].shape}, "
                                          f"this run's {target.shape}")
                target[...] = saved[key]
            solved_centre = np.array(saved["solved_centre"])
            run.kept_iterates = tuple(  # (None: not kept)
                np.array(saved[f"kept_iterate{i}"]) if f"kept_iterate{i}" in saved.files
                else None for i in range(2))
            run.point_mean, run.margin_mean = (mean_from_arrays(name, saved)
                                               for name in ("point_mean", "margin_mean"))
        run.version, run.token, run.round = (counters["version"], counters["token"],
                                             counters["round"])
        run.have_point = counters["have_point"]
        run.have_dual_point = counters["have_dual_point"]
        run._run_kappa(counters["prox_kappa"])
        run.conjugate_total = counters["conjugate_total"]
        run.solved_problem = (counters["solved_kappa"], solved_centre)
        run.participation.rng.bit_generator.state = counters["participation"]
        run.certificate_costs = counters["certificate_costs"]
        return run

    def state_arrays(self):
        """Every array the engine holds, in its structures or as attributes (for memory
        accounting)."""
        return structure_arrays(vars(self).values())

    # --- views matching the message protocol ---------------------------------------------

    @property
    def alpha(self):
        """alpha as the server holds it (decrypted), over all N samples."""
        return self.duals.enc_alpha * self.params.alpha_scale

    def client_alpha(self, k):
        """Client k's copy of alpha over its samples."""
        row_off = self.blocks.row_off
        return self.duals.alpha_loc[row_off[k]:row_off[k + 1]]

    def available(self):
        return self.participation.available(self.round)

    @property
    def round_settings(self):
        """The settings the rounds run now (after_stall() once the line search stalled,
        the kappa prox_warm_start or prox_adapt left)."""
        return self.settings.for_round(self.stalled, self.prox_kappa)

    def rounds_problem(self):
        """(kappa, c) of the proximal problem the rounds solve now."""
        return self.round_settings.kappa, self.prox_centre

    def _run_kappa(self, kappa):
        """The rounds run ``kappa`` from now on (None: the settings'): the kernels' mu N."""
        self.prox_kappa = kappa
        self.params = self.params._replace(lam_n=self.round_settings.round_lam_n)

    def _draw_sizes(self, settings):
        """(H_k per client, the offsets of their draws, room for the draws, room for each
        thread's drawn units: none where a unit is a sample)."""
        n_rows = np.diff(self.blocks.row_off)
        H = np.array([settings.inner_steps(int(n)) for n in n_rows], dtype=np.int64)
        draw_off = _offsets(H)
        room = int(H.max(initial=0)) if settings.draw_block > 1 else 0
        picks = np.zeros((numba.config.NUMBA_NUM_THREADS, room), dtype=np.int64)
        return H, draw_off, np.zeros(int(draw_off[-1]), dtype=np.int64), picks

    def _fall_back(self):
        """The line search stalled: the next rounds run settings.after_stall(), with its
        number of draws (drawn anew in the next round's phase A)."""
        self.stalled = True
        H, draw_off, drawn, picks = self._draw_sizes(self.round_settings)
        self.draws = self.draws._replace(H=H, draw_off=draw_off, drawn=drawn, picks=picks)

    def _check(self, what):
        err = self.arrays.err
        if err[0]:
            err[0] = 0
            raise OverflowError(f"fixed-point overflow: {what} needs more than 62 bits")

    # --- one round ------------------------------------------------------------------------

    def step(self):
        """Run one outer iteration; return its record (as HyFDCARun.step)."""
        s, gpu = self.round_settings, self._gpu
        B, P, duals, D, R, X = (self.blocks, self.params, self.duals, self.draws,
                                self.arrays, self.scratch)
        avail = np.asarray(self.available(), dtype=np.int64)
        avail_mask = self.avail_mask
        avail_mask[:] = False
        avail_mask[avail] = True
        plan = plan_round(s, self.round, self.local_margins)
        stamp = self.round + 1
        permuted = s.draw == "permuted"
        start = time.perf_counter()
        prev, cur = self.lists = self.lists[::-1]
        synced = 0
        if plan.dual_sync_phase:
            every_sample = draws_all_samples(s.aggregation)
            if not every_sample:  # (phase C recounts the union's entries alike)
                kern.present_holders(avail_mask, B, R.present)
                eligible_samples(s.aggregation, R.present, self.holder_counts, out=D.eligible)
            self.token, synced = kern.sync_and_report(avail, stamp, self.version, B, P, duals,
                                                      prev, D.cand[0], X, self.token, self.w)
            kern.draw_clients(avail, self.round, B, D, not every_sample, permuted)
        n_union, updates = kern.drawn_union(avail, B, D, R, stamp)
        n_requested = kern.union_holdings(avail, avail_mask, B, R, n_union, stamp, cur)
        sync_rides = not plan.dual_sync_phase  # with phase B (or C: local margins)
        if sync_rides and (not plan.inner_products or gpu is not None):
            synced = kern.sync_clients(avail, stamp, self.version, B, P, duals, prev, D.cand)
        if plan.inner_products:
            if gpu is not None:
                gpu.inner_products(self, cur.lst[:n_requested])
            elif sync_rides:
                synced = kern.sync_and_inner_products(avail, stamp, self.version, B, P, duals,
                                                      R, prev, cur, D.cand, self.w, X.wk)
            else:
                kern.inner_products(avail, B, P, R, cur, False, self.w, X.wk)
            kern.sum_parts(B, R, n_union)
            self._check("an inner product")
        compute_start = time.perf_counter()
        if gpu is None:
            kern.local_dual(avail, self.local_margins, stamp, B, P, duals, D, R, X, self.w)
        else:
            gpu.local_dual(self, avail, stamp)
        compute = time.perf_counter() - compute_start
        self._check("a dual update")
        received, union_holdings = kern.dual_aggregation(avail_mask, B, R, n_union, stamp)
        self._check("an aggregated dual update")
        shares = self.shares[:, :avail.size]  # a column per client (written if line search)
        dw = self.dw
        dw[:] = 0.0
        self.token = kern.primal_updates(avail, self.round, stamp, B, P, duals, D, R, prev,
                                         cur, X, s.line_search, shares, plan.predraw,
                                         permuted, self.token, self.w, dw)
        revealed = unmasked_total(shares, self.frac_bits) if s.line_search else None
        m, g = choose_step(s, revealed, self.w, dw)
        if s.prox_adapt:
            self.conjugate_total += conjugate_gain(s, revealed, g)
        falls_back = not self.stalled and stalls(s, self.zero_steps, m)
        n_touched = kern.apply_step(R, n_union, stamp, duals, m, self.step_bits > 0,
                                    self.version + 1)
        self._check("alpha")
        if n_touched:
            self.version += 1
        kern.settle(avail, B, P, duals, R, cur, g,
                    participants_are_synced(m, s, self.frac_bits), self.version)
        dw *= g  # w + g dw, as the protocol's server computes it, without temporaries
        self.w += dw
        self.solved_problem = self.rounds_problem()
        iterate = self.w.copy() if s.certify_two_iterates else None  # x_t
        if s.prox_adapt and moves_prox_centre(s, stamp):  # as the message engine
            weakened = weakened_outer_loop(s, self.conjugate_total, self.w, self.prox_centre)
            if weakened is not None:
                kappa, self.w[:], _ = weakened
                self._run_kappa(kappa)
                self.prox_last_w = self.w.copy()
                s = self.round_settings
        if moves_prox_centre(s, stamp):  # at the round's end, as the message engine
            self.prox_centre, shift, self.prox_last_w = next_prox_centre(
                s, self.w, self.prox_centre, self.prox_last_w)
            self.w += shift
        if starts_outer_loop(self.settings, stamp):  # w stays; c = w
            self._run_kappa(self.settings.kappa)
            self.prox_centre, self.prox_last_w = self.w.copy(), self.w.copy()
        self.kept_iterates = kept_iterates(s, self.kept_iterates, iterate,
                                           self.solved_problem, self.rounds_problem())
        if plan.second_inner_product:  # at the w the next round starts from
            kern.inner_products(avail, B, P, R, cur, True, self.w, X.wk)
            self._check("an inner product")
        self.round += 1
        if falls_back:
            self._fall_back()
        # the plain backend's counts, phase by phase as the message protocol performs them
        margins = int(plan.inner_products)
        encrypt = margins * n_requested + received
        if plan.second_inner_product:
            encrypt += int(B.row_off[avail + 1].sum() - B.row_off[avail].sum())
        stepped = n_touched if m != 0 else 0
        work = R.work[:avail.size]
        total_work = int(work.sum())
        if total_work:
            compute *= numba.get_num_threads() * int(work.max()) / total_work
        return dict(round=self.round, available=int(avail.size), step=g,
                    rtc=plan.round_trips, bytes_up=0, bytes_down=0, compute_seconds=compute,
                    compute_ops=int(work.max(initial=0)), updates=updates,
                    engine_seconds=time.perf_counter() - start,
                    encrypt=encrypt, decrypt=int(synced) + margins * received + n_requested,
                    add=margins * union_holdings + received + stepped,
                    multiply=stepped if self.step_bits > 0 else 0)

    # --- certificate ----------------------------------------------------------------------

    def certificate(self):
        """A :class:`Certificate` (the certified point and D(alpha)), as
        HyFDCARun.certificate."""
        s, B, P = self.settings, self.blocks, self.params
        n_hold = B.hold_sample.size
        eval_alpha = np.empty(n_hold)
        v = np.empty(B.hold_feat.size)
        kern.certificate_primal(B, P._replace(lam_n=s.lam_n), self.duals, eval_alpha, v)
        w_alpha = np.empty(self.n_features)
        kern.aggregate_features(v, B.hold_feat, w_alpha)
        del v
        kappa, centre = certified_problem(s, self.solved_problem, self.rounds_problem())
        x, x_previous, kept = offered_points(s, prox_iterate(s.lam, kappa, w_alpha, centre),
                                             self.kept_iterates)
        epoch, point_mean, x_mean = with_offered_point(s, self.point_mean, x, self.round,
                                                       x_previous is not None)
        self._record_certificate_cost(with_previous=x_previous is not None)
        margin_parts = (np.empty(n_hold, dtype=np.int64),
                        np.empty(self.n_samples, dtype=np.int64))
        z = np.empty(n_hold)
        kern.certificate_margins(B, P, x, self.scratch.wk, *margin_parts, z, self.arrays.err)
        margin_mean = with_point(self.margin_mean, z, epoch)
        z_previous = z
        if x_previous is not None:
            z_previous = np.empty(n_hold)
            kern.certificate_margins(B, P, x_previous, self.scratch.wk, *margin_parts,
                                     z_previous, self.arrays.err)
        elif x_mean is not None:  # the clients' means of their margins: no inner product
            x_previous, z_previous = x_mean, margin_mean.value()
        self._check("a margin")
        # the means take the point once the clients hold its margins, as in the message
        # protocol, whether or not the certificate completes
        self.point_mean, self.margin_mean = point_mean, margin_mean
        layout = sums_layout(x_previous is not None)
        sums = np.empty((layout.size, self.n_clients))
        kern.certificate_sums(B, P, eval_alpha, z, z_previous, x_previous is not None,
                              np.empty(n_hold), self.point_z, self.have_point,
                              self.dual_point_alpha, self.have_dual_point, sums)
        totals = unmasked_total(sums, self.frac_bits)
        line, step, primal, point_w, iterate = choose_triangle_point(
            s.lam, x, x_previous, self.point_w if self.have_point else None,
            totals[layout.primal])
        dual_step, dual, dual_point_w, iterate_dual = choose_dual_point(
            s.lam, w_alpha, self.dual_point_w if self.have_dual_point else None,
            totals[layout.dual])
        checked_certificate(min(primal, iterate), dual,
                            larger_l1(x, x_previous, w_alpha, point_w, dual_point_w),
                            lam=s.lam, frac_bits=self.frac_bits, n_clients=self.n_clients,
                            max_sq_norm=self.max_sq_norm, round_=self.round)
        self.kept_iterates = kept
        self.point_z[:] = next_point_values(step, line_point(line, z, z_previous),
                                            self.point_z)
        self.point_w[:] = point_w
        self.dual_point_alpha[:] = next_point_values(dual_step, eval_alpha,
                                                      self.dual_point_alpha)
        self.dual_point_w[:] = dual_point_w
        self.have_point = self.have_dual_point = True
        return Certificate(primal, dual, self.point_w.copy(), iterate, iterate_dual)

    def _record_certificate_cost(self, with_previous):
        """The message protocol's counts of a certificate (``HyFDCARun.certificate_costs``;
        bytes reported as 0): 3 round trips and 3K messages each way, and one more of
        each for x_{t-1}'s margins where the certificate searches its line
        (``with_previous``); every client encrypts its part of each margin it holds (the
        server adds them) and decrypts its margins, per point, and its alpha_i changed
        since its last sync (not committed)."""
        B, D, K = self.blocks, self.duals, self.n_clients
        held = int(B.hold_sample.size)
        synced_at = np.repeat(np.asarray(D.synced_at), np.diff(B.row_off))
        due = int(np.count_nonzero(np.asarray(D.changed_at)[B.hold_sample] > synced_at))
        points = 2 if with_previous else 1
        self.certificate_costs.append(dict(
            round=self.round, completed=True, available=K, rtc=2 + points,
            messages_down=(2 + points) * K, messages_up=(2 + points) * K, bytes_down=0,
            bytes_up=0, encrypt=points * held, decrypt=points * held + due,
            add=points * held, multiply=0))


def mean_arrays(name, mean):
    """A :class:`~hyfdca._certificate.RunningMean` as checkpoint arrays (none for None)."""
    if mean is None:
        return {}
    arrays = {f"{name}.counts": np.array([mean.epoch, mean.previous_count, mean.count]),
              f"{name}.sum": mean.sum}
    if mean.previous_sum is not None:
        arrays[f"{name}.previous_sum"] = mean.previous_sum
    return arrays


def mean_from_arrays(name, saved):
    """The running mean :func:`mean_arrays` saved (None: none)."""
    if f"{name}.counts" not in saved.files:
        return None
    epoch, previous_count, count = (int(v) for v in saved[f"{name}.counts"])
    previous = (np.array(saved[f"{name}.previous_sum"])
                if f"{name}.previous_sum" in saved.files else None)
    return RunningMean(epoch, previous_count, previous, count, np.array(saved[f"{name}.sum"]))


def setup_row_norms(partial, hold_sample, counts, frac_bits):
    """q_i per holding as the message engine's set-up exchange computes it: the holder's
    own ||x_i^k||^2 for a sample it holds alone; for a shared sample the fixed-point sum
    of the holders' encoded parts, decoded (``Client.setup_norms``)."""
    codec = FixedPoint(frac_bits)
    total = np.zeros(counts.size, dtype=np.int64)
    np.add.at(total, hold_sample, codec.encode(partial))
    return np.where(counts[hold_sample] > 1, codec.decode(total)[hold_sample], partial)


def _offsets(sizes):
    out = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out

