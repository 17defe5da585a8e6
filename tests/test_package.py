import importlib
import subprocess
import sys

import pytest

import wds_core


@pytest.mark.slow
def test_core_imports_no_framework():
    code = "import sys, wds_core; print([m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# What a pipeline uses; the expert names are in wds_core.io, wds_core.tar and wds_core.fieldcodecs.
PUBLIC = [
    "Associate", "AudioHandler", "Batch", "Cached", "CborsWriter", "CheckpointError", "ChunkedSampler",
    "Continue", "CropImages", "DataPipeline", "Decode", "Decoder", "DecodingError", "DetShuffle",
    "DirectoryShardList", "DistributedChunkedSampler", "EmptyDatasetError", "EncodingError", "ExtractKeys",
    "FieldError", "FluidInterface", "FluidWrapper", "ImageHandler", "ImageSpec", "ImageTextPairs", "Info",
    "InterleaveShards", "Interleaved", "LRUCleanup", "LazyImage", "Loader", "LogKeys", "Map", "MapDict", "MapTuple",
    "MemoryCache", "MissingFieldError", "MockDataset", "MsgpacksWriter", "MultiShardSample", "NonEmpty",
    "OverLimitError", "PipeError", "Pipeline", "PipelineStage", "Processor", "Profile", "RandomMix",
    "RandomSample", "Rename", "RenameKeys",
    "Resample", "ResampledShards", "RetryPolicy", "RoundRobin", "SampleError", "SampleShapeError", "Select",
    "ShardCache", "ShardChangedError", "ShardListDataset", "ShardNotFoundError", "ShardOpenError", "ShardWriter",
    "Shuffle",
    "SimpleShardList", "Slice", "SpecError", "SplitByNode", "SplitByWorker", "Starvation", "StorageOptions",
    "TarFormatError",
    "TarWriter", "TarfileToSamples", "ToTuple", "TruncatedShardError", "Unbatch", "VideoHandler", "WdsError",
    "WebDataset", "XDecode", "__version__", "associate", "basichandlers", "batched", "cached_tarfile_samples",
    "cached_tarfile_to_samples", "cbors2_to_samples", "cbors_to_samples", "crop_images", "decode",
    "default_collation_fn", "detshuffle", "expand_urls", "extract_keys", "getfirst", "gopen", "gopen_schemes",
    "gzfilter", "handle_extension", "ignore_and_continue", "ignore_and_stop", "imagehandler", "info",
    "install_as_webdataset", "interleaved_sample", "load_descriptor", "load_spec", "lru_cleanup", "map",
    "map_dict", "map_shards", "map_tuple", "maybe_cached_tarfile_to_samples", "merge_states",
    "msgpacks_to_samples", "non_empty", "numpy_dumps", "pipe_cleaner", "pipelinefilter", "register_rewrite",
    "register_storage", "rename", "rename_keys", "repeatedly", "reraise_exception", "resampled", "rsample",
    "select", "shardspec", "shuffle", "single_node_only", "slice", "split_by_node", "split_by_worker",
    "tarfile_samples", "tarfile_to_samples", "to_tuple", "transform_with", "unbatched", "unregister_rewrite",
    "unregister_storage", "warn_and_continue", "warn_and_stop", "with_epoch", "with_length", "write_descriptor",
    "xdecode",
]  # fmt: skip
EXPERT = {
    "wds_core.io": ["open_shard", "options_for", "register_opener", "rewrite_url"],
    "wds_core.tar": ["ShardIndex", "iter_members", "split_key"],
    "wds_core.grouping": ["group_members"],  # members to samples: above tar/, which imports nothing from above
    "wds_core.fieldcodecs": ["register_decoder", "register_encoder", "register_image_spec"],
}


def test_public_names_are_pinned_and_sorted():
    assert wds_core.__all__ == PUBLIC
    assert all(hasattr(wds_core, name) for name in wds_core.__all__)


def test_expert_names_live_in_namespaces_and_stay_importable_from_the_top():
    for namespace, names in EXPERT.items():
        module = importlib.import_module(namespace)
        for name in names:
            assert name in module.__all__ and name not in wds_core.__all__
            assert getattr(wds_core, name) is getattr(module, name)  # the old path still works
            for adapter in ("wds_jax", "wds_tf"):  # (wds_torch in tests/torch)
                assert getattr(importlib.import_module(adapter), name) is getattr(module, name)
    for namespace in ("wds_core.io", "wds_core.tar"):
        module = importlib.import_module(namespace)
        assert module.__all__ == sorted(module.__all__)


@pytest.mark.slow
def test_importing_the_core_changes_no_import_machinery():
    """``import wds_core`` installs no import hooks of its own (only ``install_as_webdataset()`` does, when called)."""
    code = (
        "import sys\n"
        "hooks = (list(sys.meta_path), list(sys.path_hooks))\n"
        "import wds_core, wds_core.dropin\n"
        "print(hooks == (list(sys.meta_path), list(sys.path_hooks)), 'webdataset' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_refused_webdataset_stubs_stay_in_the_drop_in():
    """Names wds does not provide are importable from the drop-in (scripts import more than they use), never
    exported by the native API."""
    from wds_core import dropin

    assert "LMDBCached" in dropin.__all__ and not hasattr(wds_core, "LMDBCached")
    with pytest.raises(NotImplementedError, match="LMDBCached is not provided"):
        dropin.LMDBCached("cache.lmdb")
    with pytest.raises(AttributeError):
        wds_core.no_such_module  # noqa: B018


@pytest.mark.slow
def test_demo_main_job_runs():
    out = subprocess.run(
        ["wds", "demo", "--shards", "3", "--samples-per-shard", "200"], capture_output=True, text=True, check=True
    )
    assert "exactly once" in out.stdout and "samples/s" in out.stdout
