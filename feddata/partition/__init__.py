"""Builders that split pooled data into a :class:`~feddata.FederatedDataset`: horizontal,
vertical, P x Q grids, the paper's dealt and quadrant schemes, explicit blocks, and
partitions named by a short text (``partition_from_spec``)."""

from feddata.partition._builders import (
    dealt_features,
    from_blocks,
    horizontal,
    hybrid_grid,
    mnist_quadrants,
    vertical,
)
from feddata.partition._spec import SPEC_HELP, partition_from_spec

__all__ = [
    "dealt_features",
    "from_blocks",
    "horizontal",
    "hybrid_grid",
    "mnist_quadrants",
    "partition_from_spec",
    "SPEC_HELP",
    "vertical",
]
