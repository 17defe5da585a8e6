"""wds: fast, checkpointable streaming of WebDataset shards, with no ML framework.

>>> import wds_core as wds
>>> ds = wds.WebDataset("train-{000000..000009}.tar", shardshuffle=True, seed=7)  # doctest: +SKIP
>>> for sample in ds.shuffle(1000).to_tuple("jpg;png", "json").batched(16): ...  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from .buffers import Batch, DetShuffle, Shuffle, Slice, Unbatch
from .cache import ShardCache
from .chaining import FluidInterface
from .collate import default_collation_fn
from .compat import (
    Processor,
    batched,
    map,
    map_dict,
    map_tuple,
    rename,
    select,
    shuffle,
    slice,
    to_tuple,
    unbatched,
)
from .decode import Decode, Decoder, XDecode, decode
from .descriptor import load_descriptor
from .dropin import (
    Cached,
    LMDBCached,
    LRUCleanup,
    associate,
    cached_tarfile_samples,
    cached_tarfile_to_samples,
    cbors2_to_samples,
    detshuffle,
    extract_keys,
    gopen,
    gopen_schemes,
    info,
    lru_cleanup,
    maybe_cached_tarfile_to_samples,
    non_empty,
    numpy_dumps,
    pipe_cleaner,
    pipelinefilter,
    rename_keys,
    repeatedly,
    resampled,
    rsample,
    shardspec,
    tarfile_samples,
    with_epoch,
    with_length,
    xdecode,
)
from .elastic import merge_states
from .errors import (
    CheckpointError,
    DecodingError,
    EmptyDatasetError,
    EncodingError,
    FieldError,
    MissingFieldError,
    PipeError,
    SampleError,
    SampleShapeError,
    ShardNotFoundError,
    ShardOpenError,
    SpecError,
    TarFormatError,
    TruncatedShardError,
    WdsError,
)
from .fieldcodecs import (
    Continue,
    ImageHandler,
    ImageSpec,
    basichandlers,
    gzfilter,
    handle_extension,
    imagehandler,
    register_decoder,
    register_encoder,
    register_image_spec,
)
from .fieldstages import Associate, ExtractKeys, RenameKeys
from .fluid import FluidWrapper, WebDataset
from .handlers import (
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from .indexed import ShardListDataset
from .interleaved import Interleaved, LazyImage, interleaved_sample
from .loader import Loader
from .memo import MemoryCache
from .mixing import RandomMix, RoundRobin
from .mock import MockDataset
from .pairs import ImageTextPairs
from .parallel import map_shards
from .pipeline import DataPipeline, PipelineStage
from .recordstreams import CborsWriter, MsgpacksWriter, cbors_to_samples, msgpacks_to_samples
from .remote import RetryPolicy
from .samplers import ChunkedSampler, DistributedChunkedSampler
from .samples import TarfileToSamples, group_members, split_key, tarfile_to_samples
from .sampling import RandomSample, Resample
from .shards import (
    ResampledShards,
    SimpleShardList,
    SplitByNode,
    SplitByWorker,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from .shardsources import DirectoryShardList, MultiShardSample
from .specfile import load_spec
from .stages import Map, MapDict, MapTuple, NonEmpty, Rename, Select, ToTuple, getfirst, transform_with
from .storage import open_shard, register_opener
from .storage_config import (
    StorageOptions,
    options_for,
    register_rewrite,
    register_storage,
    rewrite_url,
    unregister_rewrite,
    unregister_storage,
)
from .tarindex import ShardIndex
from .tario import iter_members
from .tracing import Info, LogKeys
from .urls import expand_urls
from .writer import ShardWriter, TarWriter, write_descriptor

__version__ = "0.1.0"

Pipeline = DataPipeline


def install_as_webdataset(verbose: bool = True) -> Any:
    """Make ``import webdataset`` (and ``webdataset.filters``...) give wds_core, for scripts you cannot edit.

    Framework-free; with PyTorch use ``wds_torch.install_as_webdataset()``.  Call
    it before anything imports webdataset.  Says which package is active (on
    stderr when ``verbose``); ``wds_core.dropin.uninstall()`` undoes it.
    """
    from . import dropin

    namespace = {name: globals()[name] for name in __all__}
    namespace.update(dropin.top_level(dropin.MODULES))
    return dropin.install(namespace, dropin.MODULES, "wds_core", verbose)


__all__ = [
    "Associate",
    "Cached",
    "DetShuffle",
    "DirectoryShardList",
    "ExtractKeys",
    "FluidWrapper",
    "Info",
    "LMDBCached",
    "LRUCleanup",
    "LogKeys",
    "MemoryCache",
    "MissingFieldError",
    "MockDataset",
    "MultiShardSample",
    "NonEmpty",
    "PipelineStage",
    "RandomSample",
    "RenameKeys",
    "Resample",
    "SampleShapeError",
    "XDecode",
    "associate",
    "cached_tarfile_samples",
    "cached_tarfile_to_samples",
    "cbors2_to_samples",
    "detshuffle",
    "extract_keys",
    "gopen",
    "gopen_schemes",
    "info",
    "install_as_webdataset",
    "lru_cleanup",
    "maybe_cached_tarfile_to_samples",
    "non_empty",
    "numpy_dumps",
    "pipe_cleaner",
    "pipelinefilter",
    "register_opener",
    "rename_keys",
    "repeatedly",
    "resampled",
    "rsample",
    "shardspec",
    "tarfile_samples",
    "transform_with",
    "with_epoch",
    "with_length",
    "xdecode",
    "ChunkedSampler",
    "DistributedChunkedSampler",
    "ShardIndex",
    "ShardListDataset",
    "load_descriptor",
    "write_descriptor",
    "Loader",
    "Processor",
    "ShardCache",
    "RetryPolicy",
    "StorageOptions",
    "options_for",
    "register_rewrite",
    "register_storage",
    "rewrite_url",
    "unregister_rewrite",
    "unregister_storage",
    "Batch",
    "CborsWriter",
    "CheckpointError",
    "Continue",
    "DataPipeline",
    "Decode",
    "Decoder",
    "DecodingError",
    "EmptyDatasetError",
    "EncodingError",
    "FieldError",
    "FluidInterface",
    "ImageHandler",
    "ImageSpec",
    "ImageTextPairs",
    "Interleaved",
    "LazyImage",
    "Map",
    "MapDict",
    "MapTuple",
    "MsgpacksWriter",
    "PipeError",
    "RandomMix",
    "Pipeline",
    "Rename",
    "ResampledShards",
    "RoundRobin",
    "SampleError",
    "Select",
    "ShardNotFoundError",
    "ShardOpenError",
    "ShardWriter",
    "Shuffle",
    "SimpleShardList",
    "Slice",
    "SpecError",
    "SplitByNode",
    "SplitByWorker",
    "TarFormatError",
    "TarWriter",
    "TarfileToSamples",
    "ToTuple",
    "TruncatedShardError",
    "Unbatch",
    "WdsError",
    "WebDataset",
    "__version__",
    "basichandlers",
    "batched",
    "cbors_to_samples",
    "decode",
    "default_collation_fn",
    "expand_urls",
    "getfirst",
    "group_members",
    "gzfilter",
    "handle_extension",
    "ignore_and_continue",
    "ignore_and_stop",
    "imagehandler",
    "interleaved_sample",
    "iter_members",
    "load_spec",
    "map",
    "map_dict",
    "map_shards",
    "map_tuple",
    "merge_states",
    "msgpacks_to_samples",
    "open_shard",
    "register_decoder",
    "register_encoder",
    "register_image_spec",
    "rename",
    "reraise_exception",
    "select",
    "shuffle",
    "single_node_only",
    "slice",
    "split_by_node",
    "split_by_worker",
    "split_key",
    "tarfile_to_samples",
    "to_tuple",
    "unbatched",
    "warn_and_continue",
    "warn_and_stop",
]
