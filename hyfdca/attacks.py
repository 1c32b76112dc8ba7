"""Least-squares reconstruction attacks on what the server saw (docs/threat-model.md).

Why HyFDCA encrypts the dual variables and the inner products: a curious server that read
them in the clear could solve for the clients' data.

* Dual attack. Client k sends the changes dv_k = (X^k)^T da_k / (lam N) of its primal
  contribution in the clear (over J_k), where da_k is a change of the alpha of I_k as the
  client holds it. A server that also knows the da_k gets, over T >= |I_k| exchanges,
  A X^k = lam N V (rows da_k^T and dv_k^T), hence X^k by least squares.
* Margin attack. Client k sends the parts x_i^k . w for the requested samples i, after the
  server sent it w on J_k; |J_k| exchanges with independent w give x_i^k.

Both attacks read only ``run.transport.transcript`` (a run with ``record=True``): the
messages the server sent and received, in order. An ``EncryptedVector`` is read as if it
were the plaintext fixed-point encoding (per slot, 64 bits of the payload, signed, times
2^-scale_bits): exact for the plaintext backend, the best a server without the keys can do
with a real one. Values are placed by the client's ciphertext blocks, which the server
sent it at set-up (``hyfdca._packing``).
"""

import numpy as np

from crypto import BFVCiphertext
from hyfdca import _messages as msg
from hyfdca._packing import ClientBlocks

_MASK64 = (1 << 64) - 1


def read_as_plaintext(vector):
    """The values an EncryptedVector would carry if its payload were plaintext fixed
    point: per ciphertext, ``slots`` signed words of 64 bits (the low bits of equal-width
    chunks of a ciphertext integer; the last words of a serialised lattice ciphertext,
    its polynomial data)."""
    payload = getattr(vector.payload, "value", vector.payload)   # masking: the value lane
    words = [_signed_words(c, vector.slots) for c in payload]
    signed = np.concatenate(words)[:len(vector)] if words else np.zeros(0)
    return np.ldexp(signed, -vector.scale_bits)


def _signed_words(ciphertext, slots):
    if ciphertext is None:
        return np.zeros(slots)
    if isinstance(ciphertext, BFVCiphertext):
        blob = ciphertext.blobs()[0][-8 * slots:].rjust(8 * slots, b"\0")
        return np.frombuffer(blob, dtype="<i8").astype(np.float64)
    c = int(ciphertext)
    width = max(64, -(-c.bit_length() // slots))
    low = [(c >> (width * j)) & _MASK64 for j in range(slots)]
    return np.array([v - (1 << 64) if v >= 1 << 63 else v for v in low], dtype=np.float64)


def client_blocks(transcript, client_id):
    """Client k's ciphertext blocks, from the set-up request the server sent it."""
    for direction, _, k, message in transcript:
        if k == client_id and direction == "down" and isinstance(message, msg.SetupRequest):
            return ClientBlocks(message.block_members)
    raise ValueError(f"client {client_id}: no set-up request in the transcript (was the "
                     f"run recorded from the start?)")


def _syncs(message):
    """The DualSync messages carried by a server-to-client message."""
    if isinstance(message, msg.DualSync):
        return [message]
    nested = getattr(message, "sync", None)
    return [nested] if nested is not None else []


def dual_attack(transcript, client_id, n_local, lam_n, read=read_as_plaintext):
    """X^k (dense, |I_k| x |J_k|) solved from the pairs (dalpha_k, dv_k) the server saw.

    ``read`` turns an EncryptedVector into values (``read_as_plaintext``; a random reader
    gives the chance level of the attack).

    The server tracks the client's alpha as the client does: a dual sync first settles the
    last tentative step (alpha += g dalpha, g sent with the sync), then sets alpha at its
    positions; each reported change of v_k pairs with the change of alpha it came from
    (the syncs since the last report; the tentative dalpha); a certificate's full v_k
    pairs with the alpha it was computed at.
    """
    blocks = client_blocks(transcript, client_id)

    def at(positions, vector):
        return blocks.read(positions, read(vector))

    alpha = np.zeros(n_local)
    synced = np.zeros(n_local)
    pending, evaluated = None, None
    rows_a, rows_v = [], []

    def pair(a, v):
        rows_a.append(a.copy())
        rows_v.append(np.asarray(v, dtype=np.float64))

    for direction, phase, k, message in transcript:
        if k != client_id:
            continue
        certificate = str(phase).startswith("certificate")
        if direction == "down":
            for sync in _syncs(message):
                if pending is not None:
                    alpha += sync.step * pending
                    pending = None
                if certificate:
                    evaluated = alpha.copy()
                    evaluated[sync.positions] = at(sync.positions, sync.alpha)
                elif sync.positions.size:
                    values = at(sync.positions, sync.alpha)
                    synced[sync.positions] += values - alpha[sync.positions]
                    alpha[sync.positions] = values
            if isinstance(message, msg.TentativeStep):
                pending = np.zeros(n_local)
                if message.positions.size:
                    pending[message.positions] = at(message.positions, message.delta)
        elif isinstance(message, msg.EvalContribution):
            pair(evaluated, message.v)
        elif isinstance(message, msg.PrimalContribution):
            pair(synced, message.change)
            synced[:] = 0.0
        elif isinstance(message, msg.PrimalUpdate):
            if message.synced is not None:
                pair(synced, message.synced)
                synced[:] = 0.0
            pair(pending, message.tentative)
    if len(rows_a) < n_local:
        raise ValueError(f"client {client_id}: {len(rows_a)} primal contributions seen, "
                         f"the dual attack needs at least |I_k| = {n_local}")
    solution, *_ = np.linalg.lstsq(np.array(rows_a), lam_n * np.array(rows_v), rcond=None)
    return solution


def margin_attack(transcript, client_id, n_local, read=read_as_plaintext):
    """X^k (dense, |I_k| x |J_k|) solved row by row from the pairs (w on J_k, x_i^k . w).

    Rows seen fewer than |J_k| times stay NaN. ``read`` as in :func:`dual_attack`."""
    weights, requested, exchanges = None, None, []
    for direction, _, k, message in transcript:
        if k != client_id:
            continue
        if direction == "down" and isinstance(message, msg.WeightsAndRequest):
            weights, requested = np.asarray(message.w, dtype=np.float64), message.requested
        elif direction == "up" and isinstance(message, msg.InnerProductParts):
            exchanges.append((weights, requested, message.parts))
    if weights is None:
        raise ValueError(f"client {client_id}: no inner-product exchange in the transcript "
                         f"(was the run recorded?)")
    blocks = client_blocks(transcript, client_id)
    pairs = [[] for _ in range(n_local)]
    for w, requested, parts in exchanges:
        for i, part in zip(requested, blocks.read(requested, read(parts))):
            pairs[i].append((w, part))
    solution = np.full((n_local, weights.size), np.nan)
    for i, seen in enumerate(pairs):
        if len(seen) >= weights.size:
            W = np.array([w for w, _ in seen])
            z = np.array([part for _, part in seen])
            solution[i], *_ = np.linalg.lstsq(W, z, rcond=None)
    return solution


def reconstruction_quality(estimate, truth):
    """(max absolute error, |uncentred correlation|) of an estimate of the data.

    The correlation c gives the best error any rescaling of the estimate can reach:
    min_s ||truth - s estimate|| / ||truth|| = sqrt(1 - c^2). What counts as chance
    depends on the attack (the plaintext v_k and w mix the data's rows already): measure it
    with a random ``read``."""
    if np.shape(estimate) != np.shape(truth):
        raise ValueError(f"an estimate of shape {np.shape(estimate)} for data of shape "
                         f"{np.shape(truth)}")
    estimate, truth = np.asarray(estimate, float).ravel(), np.asarray(truth, float).ravel()
    if not np.all(np.isfinite(estimate)):
        return np.inf, 0.0
    norms = np.linalg.norm(estimate) * np.linalg.norm(truth)
    corr = abs(float(estimate @ truth)) / norms if norms > 0 else 0.0
    return float(np.max(np.abs(estimate - truth))), corr
