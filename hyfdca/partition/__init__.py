"""Federated data: client blocks over global ids, and builders that split pooled data."""

from hyfdca.partition._builders import (
    dealt_features,
    from_blocks,
    horizontal,
    hybrid_grid,
    mnist_quadrants,
    vertical,
)
from hyfdca.partition._federated import ClientBlock, FederatedDataset, make_block
from hyfdca.partition._spec import SPEC_HELP, partition_from_spec

__all__ = [
    "ClientBlock",
    "FederatedDataset",
    "dealt_features",
    "from_blocks",
    "horizontal",
    "hybrid_grid",
    "make_block",
    "mnist_quadrants",
    "partition_from_spec",
    "SPEC_HELP",
    "vertical",
]
