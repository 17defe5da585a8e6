"""Storage through fsspec: a filesystem per URL (an install hint when its backend is missing), S3's own retries
off for reading, ranges of an object, and writes that appear only when committed."""

import fsspec
import pytest

from wds_core.errors import ShardOpenError
from wds_core.io.backends.fsspec import FsspecSource, filesystem, fsspec_sink, reading_filesystem


def test_a_missing_backend_names_what_to_install():
    with pytest.raises(ShardOpenError, match="no storage backend for nosuchfs:// URLs"):
        filesystem("nosuchfs://bucket/a.tar", {})


def test_reading_s3_leaves_retries_to_the_policy_unless_the_options_set_them():
    pytest.importorskip("s3fs")
    options = {"anon": True, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    fs, path = reading_filesystem("s3://bucket/a.tar", options)
    assert path == "bucket/a.tar" and fs.retries == 1
    assert fs.config_kwargs["retries"] == {"total_max_attempts": 1}
    own, _ = reading_filesystem("s3://bucket/a.tar", {**options, "config_kwargs": {"retries": {"mode": "standard"}}})
    assert own.config_kwargs["retries"] == {"mode": "standard"}


def test_ranges_of_an_object_and_its_size():
    memory = fsspec.filesystem("memory")
    memory.pipe("/fsspec-test/a.tar", b"0123456789" * 100)
    try:
        source = FsspecSource(*filesystem("memory://fsspec-test/a.tar", {}))
        assert source.get(10, 20, None) == (b"0123456789", None)
        assert source.info(None)["size"] == 1000
    finally:
        memory.rm("/fsspec-test", recursive=True)


def test_a_written_object_appears_only_when_committed():
    memory = fsspec.filesystem("memory")
    sink = fsspec_sink("memory://fsspec-test/out.tar", {})
    sink.write(b"abc")
    assert not memory.exists("/fsspec-test/out.tar")
    sink.commit()
    assert memory.cat("/fsspec-test/out.tar") == b"abc"
    dropped = fsspec_sink("memory://fsspec-test/dropped.tar", {})
    dropped.write(b"x")
    dropped.abort()
    assert memory.ls("/fsspec-test", detail=False) == ["/fsspec-test/out.tar"]
    memory.rm("/fsspec-test", recursive=True)
