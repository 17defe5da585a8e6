"""``webdataset.extradatasets``: ``MockDataset``, ``repeatedly``, and ``with_epoch``/``with_length`` as functions.

``with_epoch(dataset, n)`` and ``with_length(dataset, n)`` return a copy of a
pipeline with that setting (any other iterable is wrapped in a pipeline
first); the dataset given is not changed.  ``with_epoch(n)`` alone is a stage
that passes on at most ``n`` items per epoch.
"""

from __future__ import annotations

from typing import Any

from ..mock import MockDataset
from ..pipeline.datapipeline import DataPipeline
from ..stages.batching import Slice
from . import utils  # noqa: F401 - webdataset's module imports it, and code reaches it here
from .compat import FluidWrapper
from .pytorch import IterableDataset  # noqa: F401
from .utils import PipelineStage, repeatedly  # noqa: F401

__all__ = ["MockDataset", "repeatedly", "with_epoch", "with_length"]


def _pipeline_copy(dataset: Any) -> DataPipeline:
    if isinstance(dataset, DataPipeline):
        return dataset.compose()  # a copy with its own list of stages and no run
    return FluidWrapper(dataset)


def with_epoch(*args: Any) -> Any:
    """``with_epoch(dataset, n)``: the dataset with ``n`` items per epoch; ``with_epoch(n)``: a stage of ``n`` items."""
    if len(args) == 1 and isinstance(args[0], int):
        return Slice(args[0])
    if len(args) != 2 or not isinstance(args[1], int):
        raise TypeError("with_epoch takes (dataset, nsamples) or, as a stage, (nsamples)")
    return _pipeline_copy(args[0]).with_epoch(args[1])


def with_length(dataset: Any, length: int) -> Any:
    """The dataset with ``len()`` = ``length`` (the number of items per epoch is not changed)."""
    if not isinstance(length, int):
        raise TypeError("with_length takes (dataset, length); on a pipeline, call pipeline.with_length(length)")
    return _pipeline_copy(dataset).with_length(length, silent=True)
