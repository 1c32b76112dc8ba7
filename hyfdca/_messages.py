"""Typed messages between the server and the clients (one dataclass per direction and step).

Fields holding dual variables or inner products are always ``EncryptedVector``; the
plaintext fields are sample positions, primal contributions and revealed aggregate sums.
"""

from dataclasses import dataclass, fields

import numpy as np

from crypto import EncryptedVector


@dataclass(frozen=True)
class DualSync:
    """Server -> client: Enc(alpha_i) for the client's samples that changed (positions),
    and the step g of the last round the client took part in (it settles the client's
    tentative step: alpha_i += g dalpha_i)."""

    positions: np.ndarray
    alpha: EncryptedVector
    step: float = 1.0


@dataclass(frozen=True)
class DualRefresh:
    """Client -> server, with its reply to a dual sync: fresh Enc(alpha_i) of synced
    samples (positions) to store in place of the old ciphertexts (masking backend: keeps
    the stored ciphertexts short)."""

    positions: np.ndarray
    alpha: EncryptedVector


@dataclass(frozen=True)
class RoundStart:
    """Server -> client: the dual sync, and which of its samples may be drawn this round."""

    sync: DualSync
    eligible: np.ndarray


@dataclass(frozen=True)
class PrimalContribution:
    """Client -> server: the change of v_k = (X^k)^T alpha / (lam N) over J_k since its
    last report (the entries the dual sync changed), and the samples drawn."""

    change: np.ndarray
    drawn: np.ndarray


@dataclass(frozen=True)
class EvalContribution:
    """Client -> server (certificate): v_k = (X^k)^T alpha / (lam N) over J_k in full."""

    v: np.ndarray


@dataclass(frozen=True)
class WeightsAndRequest:
    """Server -> client: w on J_k, the samples whose inner-product part is needed, and
    (when the round has no separate dual sync) the dual sync."""

    w: np.ndarray
    requested: np.ndarray
    sync: DualSync | None = None


@dataclass(frozen=True)
class InnerProductParts:
    """Client -> server: Enc(x_i^k . w) for the requested samples."""

    parts: EncryptedVector


@dataclass(frozen=True)
class Margins:
    """Server -> client: Enc(x_i . w) for the samples it drew (order of ``drawn``); when
    every sample has one holder, instead w on J_k and the dual sync (margins are local)."""

    margins: EncryptedVector | None
    w: np.ndarray | None = None
    sync: DualSync | None = None


@dataclass(frozen=True)
class DualUpdate:
    """Client -> server: Enc(dalpha_i / |C_i|) for the samples it changed (positions)."""

    positions: np.ndarray
    dalpha: EncryptedVector


@dataclass(frozen=True)
class TentativeStep:
    """Server -> client: Enc(aggregated dalpha_i) for its touched samples (positions), the
    number of present holders of each (its share weight in the line-search sums), and who
    takes part in this round's secure sum (labelled ``tag``)."""

    positions: np.ndarray
    delta: EncryptedVector
    present_holders: np.ndarray
    participants: np.ndarray
    tag: str


@dataclass(frozen=True)
class PrimalUpdate:
    """Client -> server: the change of v_k by the dual syncs since its last report
    (``synced``, None if none), the change by the tentative step (``tentative``,
    (X^k)^T dalpha / (lam N)), its masked line-search shares, and (full participation) the
    samples it will draw next round."""

    synced: np.ndarray | None
    tentative: np.ndarray
    shares: np.ndarray | None
    next_drawn: np.ndarray | None = None


@dataclass(frozen=True)
class EvalRequest:
    """Server -> client: Enc(x_i . w) for all its samples, and the secure-sum round."""

    margins: EncryptedVector
    participants: np.ndarray
    tag: str


@dataclass(frozen=True)
class EvalShares:
    """Client -> server: masked shares of (1/N) sum_i l(z_i)/|C_i| and of
    (1/N) sum_i -l*(-alpha_i)/|C_i|."""

    shares: np.ndarray


def message_nbytes(message, evaluator):
    """Bytes of a message on the wire: arrays by size, ciphertexts by the backend's size."""
    total = 0
    for f in fields(message):
        value = getattr(message, f.name)
        if isinstance(value, EncryptedVector):
            total += evaluator.nbytes(value)
        elif isinstance(value, np.ndarray):
            total += value.nbytes
        elif hasattr(value, "__dataclass_fields__"):
            total += message_nbytes(value, evaluator)
        elif value is not None:
            total += 8
    return total
