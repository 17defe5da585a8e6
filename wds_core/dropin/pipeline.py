"""``webdataset.pipeline``: ``DataPipeline`` (wds's: checkpointable, stages may be ``PipelineStage``s).

The other names are those webdataset's module holds (``add_length_method``, and 0.2's imports, ``pipeline.eds``
among them), for code that reaches them here.
"""

from typing import Any

from ..handlers import reraise_exception  # noqa: F401 - 0.2's import
from ..pipeline.datapipeline import DataPipeline, PipelineStage
from . import autodecode, filters, shardlists, tariterators  # noqa: F401 - 0.2's imports
from . import extradatasets as eds  # noqa: F401 - 0.2's name for it
from .pytorch import DataLoader, IterableDataset  # noqa: F401 - PyTorch's with wds_torch

__all__ = ["DataPipeline", "PipelineStage", "add_length_method"]


def add_length_method(obj: Any) -> Any:
    """webdataset's: give ``obj`` a ``len()`` that is its ``size`` (its class becomes a subclass that has one)."""

    def length(self: Any) -> int:
        return int(self.size)

    obj.__class__ = type(type(obj).__name__ + "WithLength", (type(obj),), {"__len__": length})
    return obj
