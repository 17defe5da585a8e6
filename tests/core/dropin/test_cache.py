"""webdataset.cache over wds: FileCache, StreamingOpen, LRUCleanup, cache names, 0.2's caching reader."""

import os
import time

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from wds_core.dropin import cache, tariterators


def test_file_cache_downloads_once_and_validates(tmp_path, http_server):
    write_shard(os.path.join(http_server.root, "s-0.tar"), make_samples("h", 3))
    with open(os.path.join(http_server.root, "junk.tar"), "wb") as f:
        f.write(b"<html>not found</html>")
    url = f"{http_server.url}/s-0.tar"
    files = cache.FileCache(str(tmp_path / "cache"))
    opened = list(files([url, {"url": url}]))
    assert opened[0]["local_path"] == str(tmp_path / "cache" / "s-0.tar")
    assert len(list(tariterators.group_by_keys(tariterators.tar_file_expander(opened)))) == 6
    with pytest.raises(ValueError, match="not a tar archive"):
        list(files([f"{http_server.url}/junk.tar"]))
    assert not os.path.exists(tmp_path / "cache" / "junk.tar")
    local = str(tmp_path / "l.tar")
    write_shard(local, make_samples("l", 1))
    assert next(iter(files([local])))["local_path"] == local  # local shards are not copied


def test_streaming_open_lru_cleanup_and_names(tmp_path):
    write_shard(tmp_path / "s.tar", make_samples("s", 2))
    opened = list(cache.StreamingOpen()([str(tmp_path / "s.tar")]))
    assert opened[0]["local_path"] == str(tmp_path / "s.tar") and opened[0]["stream"].read(5)
    folder = tmp_path / "c"
    folder.mkdir()
    for i in range(5):
        (folder / f"f{i}").write_bytes(b"x" * 100)
        os.utime(folder / f"f{i}", (time.time() - 100 + i, time.time() - 100 + i))
    cache.LRUCleanup(str(folder), 250, keyfn=os.path.getmtime, interval=None).cleanup()
    assert sorted(os.listdir(folder)) == ["f3", "f4"]
    assert cache.url_to_cache_name("s3://bucket/dir/shard-000.tar") == "shard-000.tar"
    assert cache.url_to_cache_name("s3://bucket/dir/shard-000.tar", ndir=1) == "dir/shard-000.tar"
    assert cache.pipe_cleaner("pipe:curl -s -L https://host/a.tar") == "https://host/a.tar"
    assert cache.islocal("/x/y.tar") and not cache.islocal("gs://b/y.tar")


def test_cached_tarfile_to_samples_is_the_reader_with_a_shard_cache(tmp_path):
    write_shard(tmp_path / "s.tar", make_samples("c", 3))
    stage = cache.cached_tarfile_to_samples(cache_dir=str(tmp_path / "cc"), always=True)
    assert isinstance(stage, wds_core.TarfileToSamples) and stage.options.storage.cache is not None
    keys = [s["__key__"] for s in wds_core.DataPipeline([str(tmp_path / "s.tar")], stage)]
    assert keys == ["c00000", "c00001", "c00002"]
    assert any(name.endswith("s.tar") for _, _, names in os.walk(tmp_path / "cc") for name in names)
    assert cache.maybe_cached_tarfile_to_samples().options.storage.cache is None


def test_file_cache_in_secure_mode_writes_only_under_the_roots(tmp_path, http_server, monkeypatch):
    """Issue 56, case 1: the drop-in's FileCache wrote its copy outside secure mode's roots and opened it back."""
    write_shard(os.path.join(http_server.root, "s-0.tar"), make_samples("h", 3))
    url = f"{http_server.url}/s-0.tar"
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    monkeypatch.setenv("WDS_SECURE", "1")
    monkeypatch.setenv("WDS_SECURE_ROOTS", str(root))
    outside = cache.FileCache(str(elsewhere / "cache"), handler=wds_core.reraise_exception)
    with pytest.raises(wds_core.SpecError, match="not under an allowed root"):
        list(outside([url]))
    assert not elsewhere.exists()
    inside = cache.FileCache(str(root / "cache"))
    assert len(list(tariterators.group_by_keys(tariterators.tar_file_expander(inside([url]))))) == 3
    assert os.listdir(root / "cache") == ["s-0.tar"]
