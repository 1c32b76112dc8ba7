"""HyFDCA: hybrid federated dual coordinate ascent, and the toolkit around it."""

from hyfdca._estimators import HyFDCAClassifier, HyFDCARegressor
from hyfdca._history import History
from hyfdca._protocol import HyFDCARun, run_hyfdca
from hyfdca._settings import VARIANTS, HyFDCASettings

__version__ = "0.1.0.dev0"

__all__ = [
    "VARIANTS",
    "History",
    "HyFDCAClassifier",
    "HyFDCARegressor",
    "HyFDCARun",
    "HyFDCASettings",
    "run_hyfdca",
]
