"""The storage layer (issue 30, item 7): one frozen storage context, and one backend per kind of URL behind one
protocol, chosen by scheme from a registry."""

import dataclasses
import pathlib
import pickle
import subprocess
import sys

import pytest

import wds_core
from wds_core.errors import ShardOpenError
from wds_core.io import backends
from wds_core.io.backends.http import HttpBackend
from wds_core.io.backends.local import LocalBackend, StdioBackend
from wds_core.io.backends.pipe import PipeBackend
from wds_core.io.backends.ranged import RangedBackend
from wds_core.io.backends.s3 import S3Backend
from wds_core.io.remote.retries import RetryPolicy
from wds_core.io.storage import Storage, remote_url


@pytest.mark.parametrize(
    "url, kind",
    [
        ("/data/a.tar", LocalBackend),
        ("file:///data/a.tar", LocalBackend),
        ("relative/a.tar", LocalBackend),
        ("-", StdioBackend),
        ("pipe:cat a.tar", PipeBackend),
        ("s3://bucket/a.tar", S3Backend),
        ("s3a://bucket/a.tar", S3Backend),
        ("https://host/a.tar", HttpBackend),
        ("http://host/a.tar", HttpBackend),
        ("memory://a.tar", RangedBackend),
        ("gs://bucket/a.tar", RangedBackend),
    ],
)
def test_each_kind_of_url_has_its_backend(url, kind):
    assert type(backends.backend_for(url)) is kind
    assert remote_url(url) == issubclass(kind, RangedBackend)


def test_what_the_backends_stand_on_is_imported_at_first_use():
    code = (
        "import sys, wds_core\n"
        "from wds_core.io.backends import backend_for\n"
        "assert type(backend_for('s3://b/a.tar')).__name__ == 'S3Backend'\n"
        "assert type(backend_for('gs://b/a.tar')).__name__ == 'RangedBackend'\n"
        "assert not {'botocore', 's3fs', 'gcsfs'} & set(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------- the storage context


def test_the_storage_context_is_frozen_data():
    storage = Storage({"key": "k", "secret": "s3cr3t"}, retry=RetryPolicy(attempts=2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        storage.retry = RetryPolicy()  # type: ignore[misc]
    assert "s3cr3t" not in repr(storage)
    copy = pickle.loads(pickle.dumps(storage))
    assert copy.options == storage.options and copy.retry == storage.retry and copy.read_ahead == storage.read_ahead
    assert Storage.of(storage) is storage
    assert Storage.of(storage, retry=RetryPolicy(attempts=5)).retry.attempts == 5 and storage.retry.attempts == 2
    assert Storage.of({"anon": True}).options == {"anon": True} and Storage.of(None).options is None


@pytest.mark.parametrize(
    "settings, message",
    [({"options": "key=x"}, "storage_options must be a dict"), ({"retry": 3}, "retry must be a RetryPolicy"),
     ({"read_ahead": 2}, "read_ahead must be a ReadAhead"), ({"cache": "/tmp"}, "cache must be a ShardCache")],
)  # fmt: skip
def test_the_storage_context_refuses_wrong_settings_when_made(settings, message):
    with pytest.raises(TypeError, match=message):
        Storage(**settings)


def test_a_pickled_pipeline_carries_its_storage_context(tmp_path):
    """As a spawned worker receives it: the rewrites registered where it was pickled apply where it is read."""
    with wds_core.TarWriter(str(tmp_path / "a.tar")) as sink:
        for i in range(4):
            sink.write({"__key__": f"k{i}", "txt": str(i)})
    wds_core.register_rewrite("mirror://", str(tmp_path) + "/")
    try:
        data = pickle.dumps(wds_core.WebDataset("mirror://a.tar"))
    finally:
        wds_core.unregister_rewrite()
    assert [s["__key__"] for s in pickle.loads(data)] == [f"k{i}" for i in range(4)]
    with pytest.raises(ShardOpenError, match="mirror"):  # this process has no such rewrite
        list(wds_core.WebDataset("mirror://a.tar"))


# ---------------------------------------------------------------- pipe:, once


def test_size_and_exists_ask_each_kind(tmp_path, http_server):
    (tmp_path / "a.tar").write_bytes(b"x" * 1000)
    (pathlib.Path(http_server.root) / "b.tar").write_bytes(b"y" * 2000)
    storage = Storage()
    assert storage.size(str(tmp_path / "a.tar")) == 1000 and storage.exists(f"file://{tmp_path}/a.tar")
    assert not storage.exists(str(tmp_path / "missing.tar"))
    assert storage.size(http_server.url + "/b.tar") == 2000 and storage.exists(http_server.url + "/b.tar")
    assert not storage.exists(http_server.url + "/missing.tar")
    assert storage.size("pipe:cat a.tar") is None and not storage.exists("pipe:cat a.tar")
