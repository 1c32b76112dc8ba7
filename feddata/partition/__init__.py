"""Builders that split pooled data into a :class:`~feddata.FederatedDataset`: horizontal,
vertical, P x Q grids, the paper's dealt and quadrant schemes, explicit blocks,
partitions named by a short text (``partition_from_spec``), and new samples split like a
training partition for federated prediction (``split_like``)."""

from feddata.partition._builders import (
    dealt_features,
    from_blocks,
    horizontal,
    hybrid_grid,
    mnist_quadrants,
    split_like,
    vertical,
)
from feddata.partition._spec import SPEC_HELP, partition_from_spec, spec_key

__all__ = [
    "dealt_features",
    "from_blocks",
    "horizontal",
    "hybrid_grid",
    "mnist_quadrants",
    "partition_from_spec",
    "SPEC_HELP",
    "spec_key",
    "split_like",
    "vertical",
]
