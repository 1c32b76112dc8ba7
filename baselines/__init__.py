"""Methods HyFDCA is compared against, on the same FederatedDataset, participation models
and History records.

Convex (linear models): :class:`FedAvg` (the paper's hybrid lift), :class:`HyFEMLinear`,
and the two other methods for doubly distributed data the HyFDCA paper names, :class:`D3CA`
and :class:`BlockSplittingADMM` (full participation only).
Deep (on the torch-free autograd in ``baselines.autograd``): to come.
"""

from baselines._base import ConvexBaseline, run_baseline
from baselines.admm import BlockSplittingADMM
from baselines.d3ca import D3CA
from baselines.fedavg import FedAvg, HyFEMLinear

__all__ = ["BlockSplittingADMM", "ConvexBaseline", "D3CA", "FedAvg", "HyFEMLinear",
           "run_baseline"]
