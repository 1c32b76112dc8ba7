"""Methods HyFDCA is compared against, on the same FederatedDataset, participation models
and History records.

Convex (linear models): :class:`FedAvg` (the paper's hybrid lift), :class:`HyFEMLinear`,
and the two other methods for doubly distributed data the HyFDCA paper names, :class:`D3CA`
and :class:`BlockSplittingADMM` (full participation only).
Deep (small MLPs on the torch-free autograd in ``baselines.autograd``): :class:`HyFEMDeep`,
:class:`FLIC` (and its FedRep base :class:`HetFedRep`), :class:`APFed` (APFed-R and
APFed-C), :class:`CHFL`, each with local-only and pooled references in its module, and
the offline data views their benchmarks run on (``digits_blocks``, ``digits_domains``,
``heterogeneous_toy``, ``horizontal_strips``).
"""

from baselines._base import ConvexBaseline, run_baseline
from baselines._deep_data import digits_blocks, digits_domains
from baselines._deep_views import heterogeneous_toy, horizontal_strips
from baselines.admm import BlockSplittingADMM
from baselines.apfed import APFed
from baselines.chfl import CHFL
from baselines.d3ca import D3CA
from baselines.fedavg import FedAvg, HyFEMLinear
from baselines.flic import FLIC, HetFedRep
from baselines.hyfem_deep import HyFEMDeep

__all__ = ["APFed", "BlockSplittingADMM", "CHFL", "ConvexBaseline", "D3CA", "FLIC", "FedAvg",
           "HetFedRep", "HyFEMDeep", "HyFEMLinear", "digits_blocks", "digits_domains",
           "heterogeneous_toy", "horizontal_strips", "run_baseline"]
