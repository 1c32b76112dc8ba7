"""Numba kernels of the batched HyFDCA engine: one call per protocol phase, all clients.

A kernel takes the engine's layout as the named structures of ``hyfdca._batched_layout``
(B: Blocks, P: Params, duals: Duals, D: Draws, R: RoundArrays, X: Scratch, prev/cur:
UnionHoldings of the previous and this round), unpacks the arrays it uses, and leaves the
inner helpers (``_row_dot``, ``_draw``, ...) to work on plain arrays. Every client block
lives in one concatenated CSR (``indptr`` over all holdings, column ``indices`` in each
client's LOCAL feature coordinates); a holding h is a (client, local sample) pair, rows
``row_off[k]:row_off[k+1]`` are client k's; a feature holding is a (client, local
feature) pair, ``feat_off[k]:feat_off[k+1]`` are client k's. What a round decides
(steps, weights, line-search terms) comes from ``hyfdca._round``. The kernels repeat the
plaintext protocol's arithmetic operation for operation (client-side floats, the
fixed-point integers of the plain crypto backend, NumPy's summation order where the protocol
sums with NumPy), so that both engines give the same bits.

Errors (a fixed-point overflow) cannot be raised inside a parallel loop: kernels set
``err[0] = 1`` and the caller raises. Per-client scratch (w on J_k, the local correction
u, dalpha, draw buffers, line-search terms) has one row per chunk of clients: the
parallel loops run over ``scratch.shape[0]`` chunks (client a goes to chunk a mod C), so
it is sized by the largest client and never grows with the number of clients. (Not
``numba.get_thread_id``: kernels using it crash when loaded from the cache.)
"""

import numpy as np
from numba import njit, prange

from hyfdca._certificate import segment_objective_sums
from hyfdca._draws import draw_units_into
from hyfdca._pairwise_sum import pairwise_sum
from hyfdca._primal_change import add_row
from hyfdca._round import line_search_terms, local_step

_LIMIT = 2.0 ** 62  # the plain backend's codec: |encoded| < 2^max_bits


@njit(cache=True, inline="always")
def _encode(x, scale, err):
    """round(x 2^f) as int64 (half to even, as np.round), or err on overflow."""
    r = np.rint(x * scale)
    if not (abs(r) < _LIMIT):  # also catches NaN
        err[0] = 1
        return np.int64(0)
    return np.int64(r)


@njit(cache=True, inline="always")
def _add_checked(total, addend, err):
    """total + addend, or err where the sum leaves the codec's range: checked after every
    addition, as the plain backend checks each ciphertext addition, so the int64 sum of two
    values below 2^62 never wraps and both engines refuse the same sums."""
    total += addend
    if not (abs(np.float64(total)) < _LIMIT):   # as FixedPoint.check compares
        err[0] = 1
    return total


@njit(cache=True, inline="always")
def _row_dot(data, indices, indptr, h, wk):
    """x_h^k . w_k with w_k = w on client k's features in local order (scipy's
    csr_matvec order)."""
    s = 0.0
    for e in range(indptr[h], indptr[h + 1]):
        s += data[e] * wk[indices[e]]
    return s


@njit(cache=True, inline="always")
def _gather_w(k, feat_off, hold_feat, w, wk):
    """wk[:|J_k|] = w on J_k (what the server sends client k)."""
    f0 = feat_off[k]
    for c in range(f0, feat_off[k + 1]):
        wk[c - f0] = w[hold_feat[c]]


@njit(cache=True, inline="always")
def _primal(k, data, indices, indptr, row_off, feat_off, alpha, lam_n, out, base):
    """out[base:base + |J_k|] = (X^k)^T alpha_k / (lam N) (scipy's csc_matvec order);
    ``base`` = feat_off[k] (client k's slots of a per-feature-holding array) or 0."""
    m = feat_off[k + 1] - feat_off[k]
    for c in range(base, base + m):
        out[c] = 0.0
    for h in range(row_off[k], row_off[k + 1]):
        a = alpha[h]
        for e in range(indptr[h], indptr[h + 1]):
            out[base + indices[e]] += data[e] * a
    for c in range(base, base + m):
        out[c] = out[c] / lam_n


@njit(cache=True, inline="always")
def _draw(k, round_, row_off, hold_sample, eligible, use_eligible, stream_keys, H, permuted,
          draw_off, drawn, drawn_cnt, units, unit_off, cand, picks, scratch):
    """Client k's draws of round ``round_`` among its units whose samples are eligible
    (local positions; a unit's samples share their holders, its first speaks for it)."""
    r0 = row_off[k]
    d0 = draw_off[k]
    mine = units[unit_off[k]:unit_off[k + 1]]
    out = drawn[d0:d0 + H[k]]
    n = mine.shape[0]
    if use_eligible:
        n = 0
        for u in range(mine.shape[0]):
            if eligible[hold_sample[r0 + mine[u, 0]]]:
                cand[n] = u
                n += 1
        if n == 0:
            drawn_cnt[k] = 0
            return
    draw_units_into(stream_keys[k], round_, mine, cand, n, not use_eligible, H[k], permuted,
                    out, picks, scratch)
    drawn_cnt[k] = H[k]


@njit(cache=True, parallel=True)
def present_holders(avail_mask, B, out):
    """out[i] = how many holders of sample i are available."""
    samp_ptr, samp_hold, hold_client = B.samp_ptr, B.samp_hold, B.hold_client
    for i in prange(samp_ptr.shape[0] - 1):
        count = 0
        for e in range(samp_ptr[i], samp_ptr[i + 1]):
            if avail_mask[hold_client[samp_hold[e]]]:
                count += 1
        out[i] = count


@njit(cache=True)
def union_holdings(avail, avail_mask, B, R, n_union, stamp, cur):
    """Each available client's holdings of the round's union samples, ascending, as
    ``lst[seg[k, 0]:seg[k, 1]]`` (valid where ``seg_stamp[k] == stamp``): the rows whose
    parts it sends, whose dalpha it receives and settles; in ``avail`` order, so
    ``lst[:n]`` (n returned) are all of them. O(holdings of the union)."""
    union, samp_ptr, samp_hold, hold_client, row_off = (R.union, B.samp_ptr, B.samp_hold,
                                                         B.hold_client, B.row_off)
    lst, seg, seg_stamp = cur
    for a in range(avail.shape[0]):
        seg[avail[a], 1] = 0
    for x in range(n_union):
        i = union[x]
        for e in range(samp_ptr[i], samp_ptr[i + 1]):
            k = hold_client[samp_hold[e]]
            if avail_mask[k]:
                seg[k, 1] += 1
    n = 0
    for a in range(avail.shape[0]):
        k = avail[a]
        count = seg[k, 1]
        seg[k, 0] = n
        seg_stamp[k] = stamp
        if count == row_off[k + 1] - row_off[k]:  # all its rows (a full local pass)
            for t in range(count):
                lst[n + t] = row_off[k] + t
            seg[k, 1] = -(n + count)  # complete: skipped below
        else:
            seg[k, 1] = n
        n += count
    for x in range(n_union):
        i = union[x]
        for e in range(samp_ptr[i], samp_ptr[i + 1]):
            h = samp_hold[e]
            k = hold_client[h]
            if avail_mask[k] and seg[k, 1] >= 0:
                lst[seg[k, 1]] = h
                seg[k, 1] += 1
    for a in range(avail.shape[0]):
        k = avail[a]
        if seg[k, 1] < 0:
            seg[k, 1] = -seg[k, 1]
        else:
            _sort_small(lst, seg[k, 0], seg[k, 1])
    return n


@njit(cache=True, inline="always")
def _sort_small(a, lo, hi):
    """Sort a[lo:hi] in place: insertion sort for a few entries (a client's holdings of a
    round's union are often one or two; a library sort call costs more than that), else
    NumPy's sort."""
    if hi - lo > 16:
        a[lo:hi].sort()
        return
    for t in range(lo + 1, hi):
        x = a[t]
        j = t - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True, inline="always")
def _candidate_rows(k, stamp, row_off, pseg, pseg_stamp):
    """(from the previous round's list?, lo, hi): where client k's rows changed since its
    last sync can be. A client that took part in the previous round synced then, and only
    that round's commit (on its union) came after: ``plst[lo:hi]``; otherwise all its
    rows ``lo:hi``."""
    if pseg_stamp[k] == stamp - 1:
        return True, pseg[k, 0], pseg[k, 1]
    return False, row_off[k], row_off[k + 1]


@njit(cache=True, inline="always")
def _due_rows(k, stamp, row_off, hold_sample, changed_at, synced_at, plst, pseg, pseg_stamp,
              out):
    """Client k's holdings whose alpha changed since its last sync, ascending, into
    ``out``; returns how many."""
    n = 0
    since = synced_at[k]
    recent, lo, hi = _candidate_rows(k, stamp, row_off, pseg, pseg_stamp)
    for t in range(lo, hi):
        h = plst[t] if recent else t
        if changed_at[hold_sample[h]] > since:
            out[n] = h
            n += 1
    return n


@njit(cache=True, inline="always")
def _add_row_marked(data, indices, start, end, change, lam_n, out, mark, token, touched, n):
    """add_row, and list the local features it touched (``mark[f] == token``); returns
    the new length of ``touched``."""
    add_row(data, indices, start, end, change, lam_n, out)
    for p in range(start, end):
        f = indices[p]
        if mark[f] != token:
            mark[f] = token
            touched[n] = f
            n += 1
    return n


@njit(cache=True, inline="always")
def _scatter(k, feat_off, hold_feat, row, touched, n, out):
    """out[J_k] += row on the listed local features (the server adding a client's dense
    change: the other entries are +0.0, whose addition changes no bit), row reset to 0."""
    f0 = feat_off[k]
    for t in range(n):
        f = touched[t]
        out[hold_feat[f0 + f]] += row[f]
        row[f] = 0.0


@njit(cache=True)
def sync_and_report(avail, stamp, version, B, P, duals, prev, due, X, token, w):
    """Phase A, client after client (the order in which the server adds the changes):
    dual sync, and w += (X^k)^T (alpha_new - alpha_old) / (lam N) over the synced rows.
    ``due``: scratch over the largest I_k; ``row``, ``mark``, ``touched``: over the largest
    J_k (row kept at 0). Returns (last scratch token, rows synced)."""
    data, indices, indptr, row_off = B.data, B.indices, B.indptr, B.row_off
    feat_off, hold_feat, hold_sample = B.feat_off, B.hold_feat, B.hold_sample
    changed_at, synced_at, enc_alpha, alpha_loc = (duals.changed_at, duals.synced_at,
                                                   duals.enc_alpha, duals.alpha_loc)
    alpha_scale, lam_n = P.alpha_scale, P.lam_n
    plst, pseg, pseg_stamp = prev
    row, mark, touched = X.change_row, X.feat_mark, X.feat_list
    synced = 0
    for a in range(avail.shape[0]):
        k = avail[a]
        token += 1
        n = 0
        n_due = _due_rows(k, stamp, row_off, hold_sample, changed_at, synced_at, plst, pseg,
                          pseg_stamp, due)
        synced += n_due
        for t in range(n_due):
            h = due[t]
            new = np.float64(enc_alpha[hold_sample[h]]) * alpha_scale
            change = 0.0 + (new - alpha_loc[h])  # the client's report buffer starts at 0
            alpha_loc[h] = new
            if change != 0.0:
                n = _add_row_marked(data, indices, indptr[h], indptr[h + 1], change, lam_n,
                                    row, mark, token, touched, n)
        synced_at[k] = version
        _scatter(k, feat_off, hold_feat, row, touched, n, w)
    return token, synced


@njit(cache=True, parallel=True)
def draw_clients(avail, round_, B, D, use_eligible, permuted):
    """Phase A: every available client's draws of the round."""
    row_off, hold_sample = B.row_off, B.hold_sample
    eligible, stream_keys, H, draw_off = D.eligible, D.stream_keys, D.H, D.draw_off
    drawn, drawn_cnt, units, unit_off = D.drawn, D.drawn_cnt, D.units, D.unit_off
    cand, picks, scratch = D.cand, D.picks, D.perm
    chunks = cand.shape[0]
    for tid in prange(chunks):
        for a in range(tid, avail.shape[0], chunks):
            _draw(avail[a], round_, row_off, hold_sample, eligible, use_eligible, stream_keys,
                  H, permuted, draw_off, drawn, drawn_cnt, units, unit_off, cand[tid],
                  picks[tid], scratch[tid])


@njit(cache=True, inline="always")
def _sync_client(k, stamp, row_off, hold_sample, changed_at, synced_at, enc_alpha, alpha_scale,
                 alpha_loc, version, unreported, unreported_at, plst, pseg, pseg_stamp, due):
    """Client k's dual sync riding with phase B or C: the changes wait for phase D's report
    (``unreported[h]``, valid where ``unreported_at[h] == stamp``). Returns the rows
    synced."""
    n_due = _due_rows(k, stamp, row_off, hold_sample, changed_at, synced_at, plst, pseg,
                      pseg_stamp, due)
    for t in range(n_due):
        h = due[t]
        new = np.float64(enc_alpha[hold_sample[h]]) * alpha_scale
        base = unreported[h] if unreported_at[h] == stamp else 0.0
        unreported[h] = base + (new - alpha_loc[h])
        unreported_at[h] = stamp
        alpha_loc[h] = new
    synced_at[k] = version
    return n_due


@njit(cache=True, parallel=True)
def sync_clients(avail, stamp, version, B, P, duals, prev, due):
    """Every available client's dual sync riding with phase C (local margins), or with
    phase B when the inner products run on the GPU. Returns the rows synced."""
    row_off, hold_sample, alpha_scale = B.row_off, B.hold_sample, P.alpha_scale
    changed_at, synced_at, enc_alpha, alpha_loc = (duals.changed_at, duals.synced_at,
                                                   duals.enc_alpha, duals.alpha_loc)
    unreported, unreported_at = duals.unreported, duals.unreported_at
    plst, pseg, pseg_stamp = prev
    chunks = due.shape[0]
    synced = 0
    for tid in prange(chunks):
        for a in range(tid, avail.shape[0], chunks):
            synced += _sync_client(avail[a], stamp, row_off, hold_sample, changed_at,
                                   synced_at, enc_alpha, alpha_scale, alpha_loc, version,
                                   unreported, unreported_at, plst, pseg, pseg_stamp,
                                   due[tid])
    return synced


@njit(cache=True)
def aggregate_features(v, hold_feat, out):
    """out = sum_k v_k scattered onto the global features, client after client (the
    server's w = sum_k v_k, same order of additions)."""
    out[:] = 0.0
    for c in range(hold_feat.shape[0]):
        out[hold_feat[c]] += v[c]


@njit(cache=True)
def drawn_union(avail, B, D, R, stamp):
    """The distinct samples drawn by the available clients (stamped ``mark[i] = stamp``);
    returns (how many were written to ``union``, the draws of all of them). ``work[a]``:
    the local steps' size for the a-th available client, sum over its draws of (non-zeros
    of the row + 1)."""
    row_off, hold_sample, indptr = B.row_off, B.hold_sample, B.indptr
    draw_off, drawn, drawn_cnt = D.draw_off, D.drawn, D.drawn_cnt
    mark, union, work = R.mark, R.union, R.work
    n = 0
    draws = 0
    for a in range(avail.shape[0]):
        k = avail[a]
        d0 = draw_off[k]
        size = 0
        for t in range(drawn_cnt[k]):
            h = row_off[k] + drawn[d0 + t]
            size += indptr[h + 1] - indptr[h] + 1
            i = hold_sample[h]
            if mark[i] != stamp:
                mark[i] = stamp
                union[n] = i
                n += 1
        work[a] = size
        draws += drawn_cnt[k]
    return n, draws


@njit(cache=True, inline="always")
def _row_dot_global(data, indices, indptr, h, f0, hold_feat, w):
    """_row_dot reading w through the feature ids (same products, same order: same bits)
    without gathering w on J_k first."""
    s = 0.0
    for e in range(indptr[h], indptr[h + 1]):
        s += data[e] * w[hold_feat[f0 + indices[e]]]
    return s


@njit(cache=True, inline="always")
def _row_dot_gcol(data, gcol, indptr, h, w):
    """_row_dot reading w at each non-zero's global column id (same bits)."""
    s = 0.0
    for e in range(indptr[h], indptr[h + 1]):
        s += data[e] * w[gcol[e]]
    return s


@njit(cache=True, inline="always")
def _client_parts(k, data, indices, gcol, indptr, row_off, feat_off, hold_feat, lst, seg, every,
                  w, wk, frac_scale, parts, err):
    """SecureInnerProduct, client k's side: it encodes x_i^k . w for its holdings of the
    round's union (``lst[seg[k, 0]:seg[k, 1]]``), or for all its rows (``every``: the
    second SecureInnerProduct). With global column ids (``gcol``, one per non-zero; empty
    when the engine keeps none) w is read at them; otherwise w is gathered onto J_k when
    those rows have more non-zeros than |J_k|, else read through the feature ids."""
    f0 = feat_off[k]
    lo, hi = (row_off[k], row_off[k + 1]) if every else (seg[k, 0], seg[k, 1])
    by_gcol = gcol.size > 0
    gather = False
    if not by_gcol:
        work = 0
        for t in range(lo, hi):
            h = t if every else lst[t]
            work += indptr[h + 1] - indptr[h]
        gather = work > feat_off[k + 1] - f0
        if gather:
            _gather_w(k, feat_off, hold_feat, w, wk)
    for t in range(lo, hi):
        h = t if every else lst[t]
        if by_gcol:
            z = _row_dot_gcol(data, gcol, indptr, h, w)
        elif gather:
            z = _row_dot(data, indices, indptr, h, wk)
        else:
            z = _row_dot_global(data, indices, indptr, h, f0, hold_feat, w)
        parts[h] = _encode(z, frac_scale, err)


@njit(cache=True, parallel=True)
def inner_products(avail, B, P, R, cur, every, w, wk):
    """Every available client's parts (``_client_parts``)."""
    data, indices, gcol, indptr = B.data, B.indices, B.gcol, B.indptr
    row_off, feat_off, hold_feat = B.row_off, B.feat_off, B.hold_feat
    lst, seg = cur.lst, cur.seg
    frac_scale, parts, err = P.frac_scale, R.parts, R.err
    chunks = wk.shape[0]
    for tid in prange(chunks):
        for a in range(tid, avail.shape[0], chunks):
            _client_parts(avail[a], data, indices, gcol, indptr, row_off, feat_off, hold_feat,
                          lst, seg, every, w, wk[tid], frac_scale, parts, err)


@njit(cache=True, parallel=True)
def sync_and_inner_products(avail, stamp, version, B, P, duals, R, prev, cur, due, w, wk):
    """Phase B with the dual sync riding on it, client by client: ``_sync_client`` then
    ``_client_parts`` (one visit of each client). Returns the rows synced."""
    data, indices, gcol, indptr = B.data, B.indices, B.gcol, B.indptr
    row_off, feat_off, hold_feat, hold_sample = B.row_off, B.feat_off, B.hold_feat, B.hold_sample
    changed_at, synced_at, enc_alpha, alpha_loc = (duals.changed_at, duals.synced_at,
                                                   duals.enc_alpha, duals.alpha_loc)
    unreported, unreported_at = duals.unreported, duals.unreported_at
    plst, pseg, pseg_stamp = prev
    lst, seg = cur.lst, cur.seg
    alpha_scale, frac_scale, parts, err = P.alpha_scale, P.frac_scale, R.parts, R.err
    chunks = wk.shape[0]
    synced = 0
    for tid in prange(chunks):
        for a in range(tid, avail.shape[0], chunks):
            k = avail[a]
            synced += _sync_client(k, stamp, row_off, hold_sample, changed_at, synced_at,
                                   enc_alpha, alpha_scale, alpha_loc, version, unreported,
                                   unreported_at, plst, pseg, pseg_stamp, due[tid])
            _client_parts(k, data, indices, gcol, indptr, row_off, feat_off, hold_feat, lst,
                          seg, False, w, wk[tid], frac_scale, parts, err)
    return synced


@njit(cache=True, inline="always")
def _sum_holder_parts(i, samp_ptr, samp_hold, parts, err):
    """Enc(x_i . w): the sum of every holder's latest part of sample i (err on overflow)."""
    total = np.int64(0)
    for e in range(samp_ptr[i], samp_ptr[i + 1]):
        total = _add_checked(total, parts[samp_hold[e]], err)
    return total


@njit(cache=True, parallel=True)
def sum_parts(B, R, n_union):
    """SecureInnerProduct, server side, over the union (stale parts of absent holders
    included)."""
    union, samp_ptr, samp_hold = R.union, B.samp_ptr, B.samp_hold
    parts, margin, err = R.parts, R.margin, R.err
    for u in prange(n_union):
        i = union[u]
        margin[i] = _sum_holder_parts(i, samp_ptr, samp_hold, parts, err)


@njit(cache=True, parallel=True)
def local_dual(avail, local_margins, stamp, B, P, duals, D, R, X, w):
    """LocalDualMethod of every available client, then its Enc(dalpha_i x update weight)
    (``_round.aggregation_weights``)."""
    data, indices, indptr, row_off = B.data, B.indices, B.indptr, B.row_off
    feat_off, hold_feat, hold_sample, y = B.feat_off, B.hold_feat, B.hold_sample, B.y
    q, rho, update_weight = B.q, B.rho, B.update_weight
    alpha_loc = duals.alpha_loc
    margin, upd, hold_mark, err = R.margin, R.upd, R.hold_mark, R.err
    draw_off, drawn, drawn_cnt = D.draw_off, D.drawn, D.drawn_cnt
    wk, u, dalpha = X.wk, X.u, X.dalpha
    inv_frac_scale, frac_scale, lam_n = P.inv_frac_scale, P.frac_scale, P.lam_n
    code, sigma, smoothing = P.loss_code, P.sigma, P.smoothing
    chunks = wk.shape[0]
    for tid in prange(chunks):
        for a in range(tid, avail.shape[0], chunks):
            k = avail[a]
            wt = wk[tid]
            ut = u[tid]
            dt = dalpha[tid]
            r0 = row_off[k]
            d0 = draw_off[k]
            if local_margins:
                _gather_w(k, feat_off, hold_feat, w, wt)
            for t in range(drawn_cnt[k]):
                p = drawn[d0 + t]
                h = r0 + p
                if local_margins:
                    z = _row_dot(data, indices, indptr, h, wt)
                else:
                    z = np.float64(margin[hold_sample[h]]) * inv_frac_scale
                dt[p] += local_step(data, indices, indptr[h], indptr[h + 1], ut, z, rho[h],
                                    sigma, q[h], lam_n, code, alpha_loc[h] + dt[p], y[h],
                                    smoothing)
            for t in range(drawn_cnt[k]):
                p = drawn[d0 + t]
                h = r0 + p
                if hold_mark[h] != stamp:
                    hold_mark[h] = stamp
                    upd[h] = _encode(dt[p] * update_weight[h], frac_scale, err)
                for e in range(indptr[h], indptr[h + 1]):
                    ut[indices[e]] = 0.0
            for t in range(drawn_cnt[k]):
                dt[drawn[d0 + t]] = 0.0


@njit(cache=True, parallel=True)
def dual_aggregation(avail_mask, B, R, n_union, stamp):
    """enc_delta_i = sum of the holders' encoded updates; touched_i; present holders.
    Returns (encoded updates received, holdings of the union samples)."""
    samp_ptr, samp_hold, hold_client = B.samp_ptr, B.samp_hold, B.hold_client
    union, hold_mark, upd, enc_delta = R.union, R.hold_mark, R.upd, R.enc_delta
    touched, present, err = R.touched, R.present, R.err
    received = 0
    holdings = 0
    for x in prange(n_union):
        i = union[x]
        total = np.int64(0)
        hit = False
        count = 0
        holdings += samp_ptr[i + 1] - samp_ptr[i]
        for e in range(samp_ptr[i], samp_ptr[i + 1]):
            h = samp_hold[e]
            if avail_mask[hold_client[h]]:
                count += 1
            if hold_mark[h] == stamp:
                total = _add_checked(total, upd[h], err)
                hit = True
                received += 1
        enc_delta[i] = total
        present[i] = count
        touched[i] = stamp if hit else touched[i]
    return received, holdings


@njit(cache=True)
def primal_updates(avail, round_, stamp, B, P, duals, D, R, prev, cur, X, line_search, shares,
                   predraw, permuted, token, w, dw):
    """Phase D, client after client (the order in which the server adds the changes): each
    available client's PrimalUpdate in one pass over its rows.

    w += its synced change (X^k)^T unreported / (lam N) (rows synced this round: within
    its previous round's union holdings if it took part then, else anywhere); dw += its
    tentative change (X^k)^T d / (lam N) over its union holdings; its line-search shares
    (1/N) sum_i (y_i d_i, alpha_i d_i, d_i^2) / present holders; (full participation)
    next round's draws. Returns the last scratch token."""
    data, indices, indptr, row_off = B.data, B.indices, B.indptr, B.row_off
    feat_off, hold_feat, hold_sample, y = B.feat_off, B.hold_feat, B.hold_sample, B.y
    alpha_loc, unreported, unreported_at = duals.alpha_loc, duals.unreported, duals.unreported_at
    q, partial_sq = B.q, B.partial_sq
    enc_delta, present = R.enc_delta, R.present
    inv_frac_scale, lam_n, n_samples = P.inv_frac_scale, P.lam_n, P.n_samples
    lst, seg = cur.lst, cur.seg
    plst, pseg, pseg_stamp = prev
    row, mark, touched_feats, buf = X.change_row, X.feat_mark, X.feat_list, X.buf
    scaled = buf.shape[0] == 5  # S4, S5 of the curvature scaling
    eligible, stream_keys, H, draw_off = D.eligible, D.stream_keys, D.H, D.draw_off
    drawn, drawn_cnt, units, unit_off = D.drawn, D.drawn_cnt, D.units, D.unit_off
    cand, picks, scratch = D.cand[0], D.picks[0], D.perm[0]
    for a in range(avail.shape[0]):
        k = avail[a]
        token += 1
        n = 0
        recent, lo, hi = _candidate_rows(k, stamp, row_off, pseg, pseg_stamp)
        for t in range(lo, hi):
            h = plst[t] if recent else t
            if unreported_at[h] == stamp and unreported[h] != 0.0:
                n = _add_row_marked(data, indices, indptr[h], indptr[h + 1], unreported[h],
                                    lam_n, row, mark, token, touched_feats, n)
        _scatter(k, feat_off, hold_feat, row, touched_feats, n, w)
        token += 1
        n = 0
        terms = 0
        for t in range(seg[k, 0], seg[k, 1]):
            h = lst[t]
            i = hold_sample[h]
            d = np.float64(enc_delta[i]) * inv_frac_scale
            if line_search:
                s1, s2, s3, s4, s5 = line_search_terms(y[h], alpha_loc[h], d, present[i],
                                                       n_samples, q[h], partial_sq[h])
                buf[0, terms], buf[1, terms], buf[2, terms] = s1, s2, s3
                if scaled:  # unrolled stores: no tuple indexed by a loop variable
                    buf[3, terms], buf[4, terms] = s4, s5
                terms += 1
            if d != 0.0:
                n = _add_row_marked(data, indices, indptr[h], indptr[h + 1], d, lam_n, row,
                                    mark, token, touched_feats, n)
        _scatter(k, feat_off, hold_feat, row, touched_feats, n, dw)
        if line_search:
            for j in range(buf.shape[0]):
                shares[j, a] = pairwise_sum(buf[j], 0, terms)
        if predraw:
            _draw(k, round_ + 1, row_off, hold_sample, eligible, False, stream_keys, H,
                  permuted, draw_off, drawn, drawn_cnt, units, unit_off, cand, picks, scratch)
    return token


@njit(cache=True)
def apply_step(R, n_union, stamp, duals, m, multiply, version):
    """Enc(alpha_i) += m Enc(dalpha_i) (or + Enc(dalpha_i)) on touched samples; mark them
    changed at ``version``. Returns how many samples were touched."""
    union, touched, enc_delta, err = R.union, R.touched, R.enc_delta, R.err
    enc_alpha, changed_at = duals.enc_alpha, duals.changed_at
    n_touched = 0
    for x in range(n_union):
        i = union[x]
        if touched[i] != stamp:
            continue
        n_touched += 1
        if m != 0:
            step = enc_delta[i]
            if multiply:
                if not (abs(np.float64(step) * np.float64(m)) < _LIMIT):
                    err[0] = 1
                step = step * m
            enc_alpha[i] = _add_checked(enc_alpha[i], step, err)
        changed_at[i] = version
    return n_touched


@njit(cache=True, parallel=True)
def settle(avail, B, P, duals, R, cur, g, synced, version):
    """Every available client settles its tentative step on its union holdings:
    alpha_i += g d_i; where ``synced`` (``_round.participants_are_synced``) its copy then
    equals the server's (no sync needed)."""
    hold_sample, alpha_loc, synced_at = B.hold_sample, duals.alpha_loc, duals.synced_at
    enc_delta, inv_frac_scale = R.enc_delta, P.inv_frac_scale
    lst, seg = cur.lst, cur.seg
    for a in prange(avail.shape[0]):
        k = avail[a]
        for t in range(seg[k, 0], seg[k, 1]):
            h = lst[t]
            alpha_loc[h] = alpha_loc[h] + g * (np.float64(enc_delta[hold_sample[h]])
                                               * inv_frac_scale)
        if synced:
            synced_at[k] = version


@njit(cache=True, parallel=True)
def certificate_primal(B, P, duals, eval_alpha, v):
    """Every client: alpha at the server's values (not committed), v_k."""
    data, indices, indptr, row_off = B.data, B.indices, B.indptr, B.row_off
    feat_off, hold_sample = B.feat_off, B.hold_sample
    changed_at, synced_at, enc_alpha, alpha_loc = (duals.changed_at, duals.synced_at,
                                                   duals.enc_alpha, duals.alpha_loc)
    alpha_scale, lam_n = P.alpha_scale, P.lam_n
    for k in prange(row_off.shape[0] - 1):
        for h in range(row_off[k], row_off[k + 1]):
            i = hold_sample[h]
            if changed_at[i] > synced_at[k]:
                eval_alpha[h] = np.float64(enc_alpha[i]) * alpha_scale
            else:
                eval_alpha[h] = alpha_loc[h]
        _primal(k, data, indices, indptr, row_off, feat_off, eval_alpha, lam_n, v,
                feat_off[k])


@njit(parallel=True, cache=True)
def certificate_margins(B, P, w, wk, parts, margin, z, err):
    """Every margin x_i . w by secure inner product, per holding (``z``): each holder's
    encoded part, summed over the holders of the sample."""
    data, indices, indptr, row_off = B.data, B.indices, B.indptr, B.row_off
    feat_off, hold_feat, hold_sample = B.feat_off, B.hold_feat, B.hold_sample
    samp_ptr, samp_hold = B.samp_ptr, B.samp_hold
    frac_scale, inv_frac_scale = P.frac_scale, P.inv_frac_scale
    K = row_off.shape[0] - 1
    chunks = wk.shape[0]
    for tid in prange(chunks):
        for k in range(tid, K, chunks):
            wt = wk[tid]
            _gather_w(k, feat_off, hold_feat, w, wt)
            for h in range(row_off[k], row_off[k + 1]):
                parts[h] = _encode(_row_dot(data, indices, indptr, h, wt), frac_scale, err)
    for i in prange(samp_ptr.shape[0] - 1):
        margin[i] = _sum_holder_parts(i, samp_ptr, samp_hold, parts, err)
    for h in prange(hold_sample.shape[0]):
        z[h] = np.float64(margin[hold_sample[h]]) * inv_frac_scale


@njit(parallel=True, cache=True)
def certificate_sums(B, P, eval_alpha, z, z_previous, has_previous, weight, point_z,
                     have_point, dual_point, have_dual_point, out):
    """Each client's certificate sums (``out[:, k]``,
    ``hyfdca._certificate.segment_objective_sums``) over the triangle of x_t (margins
    ``z``), x_{t-1} (``z_previous``, where ``has_previous``) and the certified point,
    whose margins are ``point_z`` (``z`` itself when ``have_point`` is False), and over
    the segment between alpha and the certified dual point ``dual_point`` (alpha itself
    when ``have_dual_point`` is False)."""
    row_off, hold_sample, samp_ptr, y = B.row_off, B.hold_sample, B.samp_ptr, B.y
    n_samples, code, smoothing = P.n_samples, P.loss_code, P.smoothing
    K = row_off.shape[0] - 1
    for k in prange(K):
        r0 = row_off[k]
        r1 = row_off[k + 1]
        for h in range(r0, r1):
            i = hold_sample[h]  # the certificate's split of sample i: 1/|C_i| per holder
            weight[h] = 1.0 / np.float64(samp_ptr[i + 1] - samp_ptr[i]) / n_samples
        sums = np.empty(out.shape[0])
        segment_objective_sums(code, z[r0:r1], z_previous[r0:r1], has_previous,
                               point_z[r0:r1] if have_point else z[r0:r1],
                               y[r0:r1], eval_alpha[r0:r1],
                               dual_point[r0:r1] if have_dual_point else eval_alpha[r0:r1],
                               weight[r0:r1], smoothing, sums)
        out[:, k] = sums
