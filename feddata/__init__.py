"""The federated data layer: data sets, client blocks, participation and run histories.

Everything HyFDCA, the baselines and the experiments stand on, and nothing of theirs: this
package imports only ``solvers`` (and NumPy, SciPy, scikit-learn). Layers:
docs/architecture.md.

- :mod:`feddata.datasets`: loaders (LIBSVM, IDX, SMS text, bundled, synthetic), catalogue.
- :mod:`feddata.federated`: :class:`FederatedDataset`, the client blocks X^k over global
  sample ids I_k and feature ids J_k.
- :mod:`feddata.partition`: builders that split pooled data into client blocks.
- :mod:`feddata.problems`: a catalogued data set as a federated training problem with a
  validation set.
- :mod:`feddata.participation`: which clients take part in each round.
- :mod:`feddata.history`: the per-round record of a run, with CSV and JSON export.
"""

from feddata import datasets, partition
from feddata.federated import (ClientBlock, FederatedDataset, Layout, block_mean_sq,
                                block_sq_norm, make_block)
from feddata.history import History, local_work
from feddata.participation import KINDS as PARTICIPATION_KINDS
from feddata.participation import Participation
from feddata.problems import federated_problem

__all__ = [
    "PARTICIPATION_KINDS",
    "ClientBlock",
    "FederatedDataset",
    "Layout",
    "History",
    "local_work",
    "Participation",
    "block_mean_sq",
    "block_sq_norm",
    "datasets",
    "federated_problem",
    "make_block",
    "partition",
]
