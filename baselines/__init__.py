"""Methods HyFDCA is compared against, on the same FederatedDataset, participation models
and History records.

Convex (linear models): :class:`FedAvg` (the paper's hybrid lift), :class:`HyFEMLinear`.
Deep (on the torch-free autograd in ``baselines.autograd``): to come.
"""

from baselines._base import ConvexBaseline, run_baseline
from baselines.fedavg import FedAvg, HyFEMLinear

__all__ = ["ConvexBaseline", "FedAvg", "HyFEMLinear", "run_baseline"]
