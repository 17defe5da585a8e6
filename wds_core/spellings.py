"""webdataset's top-level names: the one list the drop-in and the core derive theirs from.

:mod:`wds_core.dropin`'s ``__all__`` starts with :data:`TOP_LEVEL_NAMES`; ``wds_core.WEBDATASET_NAMES`` (the
spellings importable from the core, by attribute) are those of them that are not native names and not
:data:`ELSEWHERE` (a framework's, or refused).  Importing this module imports nothing.
"""

__all__ = ["ELSEWHERE", "TOP_LEVEL_NAMES", "spellings"]

TOP_LEVEL_NAMES = (  # webdataset 1.0.2's top-level names and 0.2.x's that 1.x dropped
    "Cached",
    "Continue",
    "DataPipeline",
    "Decoder",
    "DecodingError",
    "FluidInterface",
    "FluidWrapper",
    "LMDBCached",
    "LRUCleanup",
    "MockDataset",
    "MultiShardSample",
    "PipelineStage",
    "RandomMix",
    "ResampledShards",
    "RoundRobin",
    "ShardWriter",
    "SimpleShardList",
    "TarWriter",
    "WebDataset",
    "WebLoader",
    "associate",
    "batched",
    "cached_tarfile_samples",
    "cached_tarfile_to_samples",
    "cbors2_to_samples",
    "cbors_to_samples",
    "decode",
    "detshuffle",
    "extract_keys",
    "getfirst",
    "gopen",
    "gopen_schemes",
    "gzfilter",
    "handle_extension",
    "ignore_and_continue",
    "ignore_and_stop",
    "imagehandler",
    "info",
    "lru_cleanup",
    "map",
    "map_dict",
    "map_tuple",
    "maybe_cached_tarfile_to_samples",
    "non_empty",
    "numpy_dumps",
    "pipe_cleaner",
    "pipelinefilter",
    "pytorch_weights_only",
    "rename",
    "rename_keys",
    "repeatedly",
    "reraise_exception",
    "resampled",
    "rsample",
    "select",
    "shardspec",
    "shuffle",
    "single_node_only",
    "slice",
    "split_by_node",
    "split_by_worker",
    "tarfile_samples",
    "tarfile_to_samples",
    "to_tuple",
    "torch_audio",
    "torch_dumps",
    "torch_loads",
    "torch_video",
    "transform_with",
    "unbatched",
    "warn_and_continue",
    "warn_and_stop",
    "with_epoch",
    "with_length",
    "xdecode",
)

# of those, the ones the core does not give: PyTorch's (the adapter has them) and those refused (the drop-in has
# them as stubs that say why)
ELSEWHERE = frozenset({"LMDBCached", "WebLoader", "pytorch_weights_only", "torch_audio", "torch_dumps", "torch_loads",
                        "torch_video"})  # fmt: skip


def spellings(native: list[str]) -> frozenset[str]:
    """webdataset's names (and the drop-in's ``Processor``) a package gives besides its ``native`` names."""
    return frozenset({*TOP_LEVEL_NAMES, "Processor"}) - set(native) - ELSEWHERE
