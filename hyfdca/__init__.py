"""HyFDCA: hybrid federated dual coordinate ascent, and the toolkit around it.

Public API (layers: docs/architecture.md): the settings and variants, ``run_hyfdca`` and
its two engines (``HyFDCARun``: server and clients exchanging messages through a
``Transport``; ``BatchedHyFDCA``: every client of a round in one Numba call), the
messages and their byte encoding, and the scikit-learn estimators. The data model
(data sets, partitions, participation, history) is the package ``feddata``.
"""

from hyfdca._batched import BatchedHyFDCA
from hyfdca._certificate import CertificateError
from hyfdca._checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from hyfdca._encoding_range import FixedPointRangeError
from hyfdca._messages import decode_message, encode_message
from hyfdca._protocol import HyFDCARun
from hyfdca._run import ENGINES, run_hyfdca, train
from hyfdca._settings import DEFAULT_VARIANT, VARIANTS, HyFDCASettings
from hyfdca._transport import (FaultyTransport, InProcessTransport, MissingReplies, Traffic,
                               Transport)

__version__ = "0.1.0.dev0"

# the estimators (and with them scikit-learn) load on first use, not with the package:
# a process that only runs rounds (a Flower ClientApp starts one per message) does not
# pay for them (docs/architecture.md)
_ON_USE = ("HyFDCAClassifier", "HyFDCARegressor")   # from hyfdca._estimators


def __getattr__(name):
    if name in _ON_USE:
        from hyfdca import _estimators

        return getattr(_estimators, name)
    raise AttributeError(f"module 'hyfdca' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_ON_USE])


__all__ = [
    "BatchedHyFDCA",
    "CertificateError",
    "CheckpointError",
    "DEFAULT_VARIANT",
    "ENGINES",
    "FaultyTransport",
    "FixedPointRangeError",
    "HyFDCAClassifier",
    "HyFDCARegressor",
    "HyFDCARun",
    "HyFDCASettings",
    "InProcessTransport",
    "MissingReplies",
    "Traffic",
    "Transport",
    "VARIANTS",
    "decode_message",
    "encode_message",
    "load_checkpoint",
    "run_hyfdca",
    "save_checkpoint",
    "train",
]
