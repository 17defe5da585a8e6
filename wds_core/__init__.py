"""wds: fast, checkpointable streaming of WebDataset shards, with no ML framework.

``__all__`` is what a pipeline uses.  The expert interface lives in
namespaces: :mod:`wds_core.io` (opening shards, storage options, rewrites,
custom schemes), :mod:`wds_core.tar` (members, grouping, offset indexes) and
:mod:`wds_core.fieldcodecs` (registering decoders, encoders and image specs);
their names are importable from here too (``open_shard``, ``iter_members``, ``register_decoder``...:
:data:`EXPERT_NAMES`), outside ``__all__``.  webdataset's
spellings (``shuffle``, ``to_tuple``, ``gopen``...: :data:`WEBDATASET_NAMES`)
are importable from here too, outside ``__all__``: they are defined once, in
the drop-in (:mod:`wds_core.dropin`), which is loaded when one of them is first
asked for.  Importing ``wds_core`` loads no drop-in module and changes no import
machinery (``install_as_webdataset()`` does, when called).

>>> import wds_core as wds
>>> ds = wds.WebDataset("train-{000000..000009}.tar", shuffle=True, seed=7)  # doctest: +SKIP
>>> for sample in ds.shuffle(1000).to_tuple("jpg;png", "json").batched(16): ...  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

from .dataset import FluidWrapper, WebDataset
from .elastic import BalancedEpochs, merge_states
from .errors import (
    CheckpointError,
    DecodingError,
    EmptyDatasetError,
    EncodingError,
    FieldError,
    MissingFieldError,
    OverLimitError,
    PipeError,
    SampleError,
    SampleShapeError,
    ShardChangedError,
    ShardNotFoundError,
    ShardOpenError,
    SpecError,
    TarFormatError,
    TruncatedShardError,
    WdsError,
)
from .fieldcodecs import (
    AudioHandler,
    Continue,
    ImageHandler,
    ImageSpec,
    VideoHandler,
    basichandlers,
    gzfilter,
    handle_extension,
    imagehandler,
)
from .handlers import (
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from .indexed.dataset import ShardListDataset
from .indexed.samplers import ChunkedSampler, DistributedChunkedSampler
from .io.cache import ShardCache
from .io.remote.rangestream import RetryPolicy
from .io.remote.readahead import ReadAhead
from .io.storage import Storage
from .io.storage_config import (
    StorageOptions,
    register_rewrite,
    register_storage,
    unregister_rewrite,
    unregister_storage,
)
from .io.urls import expand_urls
from .loader.main import Loader
from .mock import MockDataset
from .observe.metrics import profile_run
from .observe.profiling import Profile
from .observe.starvation import Starvation
from .pipeline.datapipeline import DataPipeline, PipelineStage
from .pipeline.fluid import FluidInterface
from .pipeline.mixing import RandomMix, RoundRobin
from .sources.descriptor import load_descriptor, write_descriptor
from .sources.dirshards import DirectoryShardList, MultiShardSample
from .sources.interleave import InterleaveShards
from .sources.readoptions import ShardReadOptions
from .sources.recordstreams import CborsWriter, MsgpacksWriter, cbors_to_samples, msgpacks_to_samples
from .sources.shardlists import (
    ResampledShards,
    SimpleShardList,
    SplitByNode,
    SplitByWorker,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from .sources.specfile import load_spec
from .sources.tarsamples import TarfileToSamples, tarfile_to_samples
from .spellings import spellings
from .stages.batching import Batch, Slice, Unbatch
from .stages.batching import Batch as batched  # wds's batching; webdataset's (the drop-in's) reads an item ahead
from .stages.collate import default_collation_fn
from .stages.decode import CropImages, Decode, Decoder, crop_images, decode
from .stages.documents import Interleaved, LazyImage, interleaved_sample
from .stages.fieldkeys import Associate, ExtractKeys, RenameKeys
from .stages.imagetext import ImageTextPairs
from .stages.mapping import Map, MapDict, MapTuple, NonEmpty, Rename, Select, ToTuple, getfirst, transform_with
from .stages.memorycache import MemoryCache
from .stages.sampling import RandomSample, Resample
from .stages.shuffle import DetShuffle, Shuffle
from .stages.tracing import Info, LogKeys
from .stages.xdecode import XDecode
from .state import plug_in
from .tools.makeshards import make_shards
from .tools.parallel import map_shards
from .version import __version__
from .writer import ShardWriter, TarWriter

Pipeline = DataPipeline

# the features the pipeline runs with, plugged in here by name (the pipeline imports none of them)
plug_in(run_hook=profile_run, epoch_tracker=BalancedEpochs())


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


#: The expert names, importable from here but not in ``__all__``: each lives in its namespace (and is in its
#: ``__all__``), the one that says what it is for.
EXPERT_NAMES = {
    "ShardIndex": "tar", "group_members": "tar", "iter_members": "tar", "native_status": "_native",
    "open_shard": "io", "options_for": "io", "register_decoder": "fieldcodecs", "register_encoder": "fieldcodecs",
    "register_image_spec": "fieldcodecs", "register_opener": "io", "rewrite_url": "io", "split_key": "tar",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in EXPERT_NAMES:
        return getattr(importlib.import_module(f"{__name__}.{EXPERT_NAMES[name]}"), name)
    if name in WEBDATASET_NAMES:
        from . import dropin

        return getattr(dropin, name)
    raise AttributeError(f"module 'wds_core' has no attribute {name!r}")


__all__ = [
    "Associate",
    "AudioHandler",
    "Batch",
    "CborsWriter",
    "CheckpointError",
    "ChunkedSampler",
    "Continue",
    "CropImages",
    "DataPipeline",
    "Decode",
    "Decoder",
    "DecodingError",
    "DetShuffle",
    "DirectoryShardList",
    "DistributedChunkedSampler",
    "EmptyDatasetError",
    "EncodingError",
    "ExtractKeys",
    "FieldError",
    "FluidInterface",
    "FluidWrapper",
    "ImageHandler",
    "ImageSpec",
    "ImageTextPairs",
    "Info",
    "InterleaveShards",
    "Interleaved",
    "LazyImage",
    "Loader",
    "LogKeys",
    "Map",
    "MapDict",
    "MapTuple",
    "MemoryCache",
    "MissingFieldError",
    "MockDataset",
    "MsgpacksWriter",
    "MultiShardSample",
    "NonEmpty",
    "OverLimitError",
    "PipeError",
    "Pipeline",
    "PipelineStage",
    "Profile",
    "RandomMix",
    "RandomSample",
    "ReadAhead",
    "Rename",
    "RenameKeys",
    "Resample",
    "ResampledShards",
    "RetryPolicy",
    "RoundRobin",
    "SampleError",
    "SampleShapeError",
    "Select",
    "ShardCache",
    "ShardChangedError",
    "ShardListDataset",
    "ShardNotFoundError",
    "ShardOpenError",
    "ShardReadOptions",
    "ShardWriter",
    "Shuffle",
    "SimpleShardList",
    "Slice",
    "SpecError",
    "SplitByNode",
    "SplitByWorker",
    "Starvation",
    "Storage",
    "StorageOptions",
    "TarFormatError",
    "TarWriter",
    "TarfileToSamples",
    "ToTuple",
    "TruncatedShardError",
    "Unbatch",
    "VideoHandler",
    "WdsError",
    "WebDataset",
    "XDecode",
    "__version__",
    "basichandlers",
    "batched",
    "cbors_to_samples",
    "crop_images",
    "decode",
    "default_collation_fn",
    "expand_urls",
    "getfirst",
    "gzfilter",
    "handle_extension",
    "ignore_and_continue",
    "ignore_and_stop",
    "imagehandler",
    "install_as_webdataset",
    "interleaved_sample",
    "load_descriptor",
    "load_spec",
    "make_shards",
    "map_shards",
    "merge_states",
    "msgpacks_to_samples",
    "register_rewrite",
    "register_storage",
    "reraise_exception",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
    "tarfile_to_samples",
    "transform_with",
    "unregister_rewrite",
    "unregister_storage",
    "warn_and_continue",
    "warn_and_stop",
    "write_descriptor",
]

#: webdataset's spellings (``shuffle``, ``to_tuple``, ``gopen``, ``Cached``...): importable from here, as
#: ``wds_core.shuffle`` or ``from wds_core import shuffle``, but defined in the drop-in (:mod:`wds_core.dropin`),
#: which ``import wds_core`` does not load until one of them is asked for; not in ``__all__``, which holds the
#: native names (``wds_torch`` and the one-line switch give them too).  Derived from :mod:`wds_core.spellings`.
WEBDATASET_NAMES = spellings(__all__)
