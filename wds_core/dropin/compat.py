"""``webdataset.compat``: ``WebDataset``, ``FluidInterface``, ``FluidWrapper`` and ``WebLoader``.

The first three are wds's, batching as webdataset does: ``.batched(n)`` and
``.listed(n)`` hand a full batch on once the item after it has come (see
:class:`~wds_core.stages.batching.ReadAheadBatch`), where wds's own classes hand it on
as soon as it is full.  ``WebLoader`` wraps a PyTorch ``DataLoader`` and comes
with ``wds_torch``; without a framework, :class:`wds_core.Loader` runs a
pipeline in worker processes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..dataset import FluidWrapper as CoreFluidWrapper
from ..dataset import WebDataset as CoreWebDataset
from ..datasetplan import NATIVE_KEYWORDS, webdataset_plan
from ..errors import EmptyDatasetError
from ..handlers import Handler, reraise_exception
from ..pipeline.datapipeline import DataPipeline  # noqa: F401 - webdataset's ``compat.DataPipeline``
from ..pipeline.fluid import FluidInterface as CoreFluidInterface
from ..sources.readoptions import ShardReadOptions
from ..sources.shardlists import split_by_node, split_by_worker
from ..stages.batching import ReadAheadBatch
from . import autodecode, cache, filters, hooks, shardlists, tariterators, utils  # noqa: F401 - as webdataset's
from ._refuse import refused_class
from .filters import pipelinefilter  # noqa: F401
from .pytorch import DataLoader, IterableDataset  # noqa: F401 - PyTorch's with wds_torch
from .shardlists import SPLITTERS
from .tariterators import group_by_keys, tar_file_expander

__all__ = ["FluidInterface", "FluidWrapper", "WebDataset", "WebLoader", "check_empty", "group_by_keys",
           "tar_file_expander"]  # fmt: skip


class FluidInterface(CoreFluidInterface):
    """webdataset's ``FluidInterface``: wds's, batching as webdataset does."""

    batch_stage = ReadAheadBatch

    def decode(self, *handlers: Any, **options: Any) -> Any:
        """Decode fields as wds's ``.decode()``, with the drop-in's :class:`~.autodecode.Decoder` (webdataset's
        default handler lists honoured)."""
        return self.compose(filters.decode(*handlers, **options))


# what webdataset 1.0.2's WebDataset reads shards with, looked up when it is built
_READER_PIECES = (
    ("compat", "tar_file_expander"), ("compat", "group_by_keys"), ("cache", "StreamingOpen"), ("gopen", "gopen"),
    ("tariterators", "tar_file_iterator"), ("tariterators", "valid_sample"),
)  # fmt: skip


def reader_stages(self: Any, reading: ShardReadOptions) -> list[Any]:
    """A drop-in ``WebDataset``'s reader: wds's, or webdataset's chain (``cache.StreamingOpen``, then
    ``compat.tar_file_expander`` and ``compat.group_by_keys`` as they are now) when code replaced one of its
    pieces (then ``state_dict()`` is a ``CheckpointError`` naming the plain piece)."""
    if not hooks.replaced_any(_READER_PIECES):
        return CoreWebDataset.reader_stages(self, reading)
    opener = cache.StreamingOpen(handler=reading.handler)
    if hooks.replacement("cache", "StreamingOpen") is None:
        opener.storage = reading.storage  # wds's own opener keeps the dataset's storage options and cache
    # the pieces as they are now, as webdataset's pipelinefilter keeps them (partials: spawned workers get a copy)
    handler, select, rename = reading.handler, reading.select_files, reading.rename_files
    return [
        opener,
        functools.partial(tar_file_expander, handler=handler, select_files=select, rename_files=rename),
        functools.partial(group_by_keys, handler=handler),
    ]


def splitter_stage(self: Any, splitter: Any) -> Any:
    """wds's default splitters as the drop-in's, which ask a replaced ``utils.pytorch_worker_info``."""
    return SPLITTERS.get(id(splitter), splitter)


def webdataset_init(
    self: Any,
    urls: Any,
    handler: Handler = reraise_exception,
    mode: str | None = None,
    resampled: bool = False,
    repeat: bool = False,
    shardshuffle: bool | int | None = None,
    cache_size: int = -1,
    cache_dir: str | None = None,
    url_to_name: Callable | None = None,
    detshuffle: bool = False,
    nodesplitter: Callable | None = split_by_node,
    workersplitter: Callable | None = split_by_worker,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    empty_check: bool = True,
    verbose: bool = False,
    seed: int | None = None,
    **more: Any,
) -> None:
    """webdataset's ``WebDataset`` signature (and the keywords wds added to it: ``storage_options``, ``retry``,
    ``read_ahead``, ``cache_local``, ``balanced``, ``allow_pipe``, ``sample_counts``, ``zero_copy``, ``interleave``;
    wds's native ``storage`` and ``reading`` too), translated into a plan (:mod:`wds_core.datasetplan`)."""
    keywords = {
        "handler": handler, "mode": mode, "resampled": resampled, "repeat": repeat, "shardshuffle": shardshuffle,
        "cache_size": cache_size, "cache_dir": cache_dir, "url_to_name": url_to_name, "nodesplitter": nodesplitter,
        "workersplitter": workersplitter, "select_files": select_files, "rename_files": rename_files,
        "verbose": verbose,
    }  # fmt: skip
    native = {"seed": seed, "empty_check": empty_check}
    for name, value in more.items():
        (native if name in NATIVE_KEYWORDS else keywords)[name] = value
    self._build(webdataset_plan(urls, native, keywords))


class WebDataset(CoreWebDataset, FluidInterface):
    __doc__ = CoreWebDataset.__doc__

    __init__ = webdataset_init
    reader_stages = reader_stages
    splitter_stage = splitter_stage


class FluidWrapper(CoreFluidWrapper, FluidInterface):
    __doc__ = CoreFluidWrapper.__doc__


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
