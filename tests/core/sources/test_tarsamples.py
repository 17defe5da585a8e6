"""Reading shards into samples: the tar reader stage, its error handling, and agreement with webdataset."""

import os
import tarfile
import warnings

import pytest

import wds_core
from tests.conftest import make_samples, tar_bytes, write_shard
from wds_core import (
    DataPipeline,
    SimpleShardList,
    TruncatedShardError,
    WebDataset,
    ignore_and_continue,
    tarfile_to_samples,
    warn_and_continue,
)

webdataset = pytest.importorskip("webdataset")


def test_samples_never_span_shards(tmp_path):
    a = write_shard(tmp_path / "a.tar", [{"__key__": "same", "txt": b"1"}])
    b = write_shard(tmp_path / "b.tar", [{"__key__": "same", "cls": b"2"}])
    got = list(WebDataset([a, b]))
    assert [sorted(k for k in s if not k.startswith("__")) for s in got] == [["txt"], ["cls"]]


def interop_shard(path):
    """Names that exercise webdataset's rules, written by the standard library (pax)."""
    long_key = "k" * 120
    names = [
        ("__meta__.json", b"{}"),
        (f"dir.v1/{long_key}.jpg", b"j"),
        (f"dir.v1/{long_key}.txt.gz", b"g"),
        ("dir.v1/x.seg.PNG", b"p"),
        ("dir.v1/x.Cls", b"3"),
        ("dir.v1/x.empty", b""),
        ("plain", b"dropped"),
        ("y.json", b"{}"),
    ]
    path.write_bytes(tar_bytes(names, tarfile.PAX_FORMAT))
    return str(path)


def test_same_samples_as_webdataset(tmp_path, shards):
    spec, paths, keys = shards
    extra = interop_shard(tmp_path / "interop.tar")
    urls = paths + [extra]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = list(webdataset.WebDataset(urls, shardshuffle=False, nodesplitter=None))
    ours = list(WebDataset(urls))
    assert ours == theirs


def test_pipeline_form_and_select_rename(shards):
    spec, paths, keys = shards
    ds = DataPipeline(
        SimpleShardList(paths[0]),
        tarfile_to_samples(
            select_files=lambda n: n.endswith(".label"), rename_files=lambda n: n.replace(".cls", ".label")
        ),
    )
    got = list(ds)
    assert [s["__key__"] for s in got] == keys[:25]
    assert all(set(s) == {"__key__", "__url__", "label"} for s in got)  # the stage gives no __local_path__


def test_truncated_shard_with_skipping_handler_keeps_what_was_read_whole(tmp_path):
    samples = make_samples("t", 10)
    full = write_shard(tmp_path / "full.tar", samples)
    raw = open(full, "rb").read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(raw[: 6 * 2048 + 700])  # in the padding after sample 6's first member (7 bytes, read whole)
    after = write_shard(tmp_path / "after.tar", make_samples("u", 3))
    with pytest.raises(TruncatedShardError) as info:
        list(WebDataset([str(cut), after]))
    assert str(cut) in str(info.value) and info.value.offset is not None
    with pytest.warns(UserWarning, match="TruncatedShardError"):
        got = list(WebDataset([str(cut), after], reading=wds_core.ShardReadOptions(handler=warn_and_continue)))
    assert [s["__key__"] for s in got] == [f"t{i:05d}" for i in range(7)] + ["u00000", "u00001", "u00002"]
    assert got[6]["txt"] == b"t-6-txt" and "cls" not in got[6]  # as webdataset: the members before the cut
    cut.write_bytes(raw[: 6 * 2048 + 512 + 3])  # inside that member's data: nothing of sample 6 is whole
    with pytest.warns(UserWarning, match="TruncatedShardError"):
        got = list(WebDataset([str(cut)], reading=wds_core.ShardReadOptions(handler=warn_and_continue)))
    assert [s["__key__"] for s in got] == [f"t{i:05d}" for i in range(6)]


def test_missing_shard_with_skipping_handler_moves_on(tmp_path, shards):
    spec, paths, keys = shards
    got = [
        s["__key__"]
        for s in WebDataset(
            [str(tmp_path / "missing.tar"), paths[0]], reading=wds_core.ShardReadOptions(handler=ignore_and_continue)
        )
    ]
    assert got == keys[:25]


def test_shard_without_end_of_archive_is_reported(tmp_path):
    with open(write_shard(tmp_path / "x.tar", make_samples("v", 2)), "rb") as f:
        raw = f.read()[: 4 * 1024]  # both samples, but not the end-of-archive blocks
    path = tmp_path / "noend.tar"
    path.write_bytes(raw)
    with pytest.raises(TruncatedShardError, match="end-of-archive"):
        list(WebDataset(str(path)))


def test_empty_dataset_check(tmp_path):
    path = tmp_path / "empty.tar"
    path.write_bytes(bytes(1024))
    with pytest.raises(ValueError, match="no samples"):
        list(WebDataset(str(path)))
    assert list(WebDataset(str(path), empty_check=False)) == []


def test_big_members_read_intact(tmp_path):
    blobs = [os.urandom(n) for n in (3 << 20, 1, 1 << 20, 70_000)]
    path = write_shard(tmp_path / "big.tar", [{"__key__": f"b{i}", "bin": b} for i, b in enumerate(blobs)])
    assert [s["bin"] for s in WebDataset(path)] == blobs


def test_the_reading_options_travel_whole_into_the_reader(tmp_path):
    """Issue 66: ShardReadOptions reaches the reader as it was given (no constructor unpacks it into loose
    arguments to pack again); a stage pickled by an older wds, with loose settings, reads as before."""
    import pickle

    from wds_core.sources.readoptions import ShardReadOptions
    from wds_core.sources.tarsamples import TarfileToSamples

    options = ShardReadOptions(handler=wds_core.ignore_and_continue, zero_copy=True, check_versions=False)
    stage = TarfileToSamples.from_options(options)
    assert stage.options is options
    back = pickle.loads(pickle.dumps(stage)).options  # into a worker: the same options (its Storage a copy)
    assert (back.handler, back.zero_copy, back.check_versions) == (wds_core.ignore_and_continue, True, False)
    older = TarfileToSamples.__new__(TarfileToSamples)
    older.__setstate__({"handler": wds_core.warn_and_continue, "select_files": None, "rename_files": None,
                        "storage_options": {"anon": True}, "retry": None, "read_ahead": None, "cache": None,
                        "limits": None, "zero_copy": True, "local_path": False})  # fmt: skip
    assert older.options.handler is wds_core.warn_and_continue and older.options.zero_copy
    assert older.options.storage.options == {"anon": True} and older.options.check_versions
