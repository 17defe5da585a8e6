"""``webdataset.compat``: ``WebDataset``, ``FluidInterface``, ``FluidWrapper`` and ``WebLoader``.

The first three are wds's, batching as webdataset does: ``.batched(n)`` and
``.listed(n)`` hand a full batch on once the item after it has come (see
:class:`~wds_core.stages.batching.ReadAheadBatch`), where wds's own classes hand it on
as soon as it is full.  ``WebLoader`` wraps a PyTorch ``DataLoader`` and comes
with ``wds_torch``; without a framework, :class:`wds_core.Loader` runs a
pipeline in worker processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .. import dataset as fluid
from ..errors import EmptyDatasetError
from ..pipeline import fluid as chaining
from ..stages.batching import ReadAheadBatch
from ._refuse import refused_class

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset", "WebLoader", "check_empty"]


class FluidInterface(chaining.FluidInterface):
    """webdataset's ``FluidInterface``: wds's, batching as webdataset does."""

    batch_stage = ReadAheadBatch


class WebDataset(fluid.WebDataset, FluidInterface):
    __doc__ = fluid.WebDataset.__doc__


class FluidWrapper(fluid.FluidWrapper, FluidInterface):
    __doc__ = fluid.FluidWrapper.__doc__


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
