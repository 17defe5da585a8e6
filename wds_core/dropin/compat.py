"""``webdataset.compat``: ``WebDataset``, ``FluidInterface``, ``FluidWrapper`` (wds's) and ``WebLoader``.

``WebLoader`` wraps a PyTorch ``DataLoader`` and comes with ``wds_torch``;
without a framework, :class:`wds_core.Loader` runs a pipeline in worker
processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..chaining import FluidInterface
from ..errors import EmptyDatasetError
from ..fluid import FluidWrapper, WebDataset
from ._refuse import refused_class

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset", "WebLoader", "check_empty"]


def check_empty(source: Iterable[Any]) -> Iterator[Any]:
    """Pass everything through; an error when nothing came (``WebDataset(empty_check=True)`` does this itself)."""
    count = 0
    for item in source:
        count += 1
        yield item
    if count == 0:
        raise EmptyDatasetError("no samples found; perhaps there are fewer shards than workers")


WebLoader = refused_class(
    "compat.WebLoader", "it wraps a PyTorch DataLoader: use wds_torch.WebLoader, or wds_core.Loader without PyTorch"
)
