"""The storage layer (issue 30, item 7): one frozen storage context, and one backend per kind of URL behind one
protocol, chosen by scheme from a registry."""

import dataclasses
import io
import pathlib
import pickle
import subprocess
import sys

import numpy as np
import pytest

import wds_core
from wds_core.dropin.gopen import gopen_pipe
from wds_core.errors import PipeError, ShardOpenError, SpecError
from wds_core.io import backends
from wds_core.io.backends.http import HttpBackend
from wds_core.io.backends.local import LocalBackend, StdioBackend
from wds_core.io.backends.opener import OpenerBackend
from wds_core.io.backends.pipe import PipeBackend
from wds_core.io.backends.ranged import RangedBackend
from wds_core.io.backends.s3 import S3Backend
from wds_core.io.commands import PipeStream
from wds_core.io.localfiles import RandomAccess
from wds_core.io.remote.retries import RetryPolicy
from wds_core.io.shardsink import ShardSink
from wds_core.io.storage import Storage, create_shard, open_random_access, open_shard, remote_url


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


def test_a_registered_opener_wins_over_the_registry_for_its_scheme_only():
    wds_core.register_opener("s3", lambda url, mode, bufsize: io.BytesIO(b""))
    try:
        assert isinstance(backends.backend_for("s3://b/a.tar"), OpenerBackend)
        assert type(backends.backend_for("gs://b/a.tar")) is RangedBackend
        assert not remote_url("s3://b/a.tar")
    finally:
        wds_core.register_opener("s3", None)


class DictBackend(backends.Backend):
    """A whole storage kind in a few lines: objects in a dict, by URL."""

    name = "a dict object"

    def __init__(self):
        self.objects = {}

    def open(self, url, settings, stats=None):
        if url not in self.objects:
            raise ShardOpenError("no such object", url=url)
        return io.BytesIO(self.objects[url])

    def random_access(self, url, settings, size=None):
        data = self.objects[url]
        return RandomAccess(url, len(data), lambda offset, n: data[offset : offset + n], lambda: None)

    def size(self, url, settings):
        return len(self.objects[url])

    def create(self, url, settings):
        objects = self.objects

        class Sink(ShardSink):
            def __init__(self):
                self.url, self.parts = url, []

            def write(self, data):
                self.parts.append(bytes(data))

            def commit(self):
                objects[url] = b"".join(self.parts)

            def abort(self):
                self.parts = []

        return Sink()


def test_a_registered_backend_serves_writers_streaming_and_random_access(tmp_path):
    store = DictBackend()
    wds_core.io.register_backend("dict", store)
    try:
        with wds_core.ShardWriter("dict://bucket/shard-%02d.tar", maxcount=3) as sink:
            for i in range(7):
                sink.write({"__key__": f"k{i}", "npy": np.full(3, i, np.uint8)})
        assert sorted(store.objects) == [f"dict://bucket/shard-{i:02d}.tar" for i in range(3)]
        keys = [s["__key__"] for s in wds_core.WebDataset("dict://bucket/shard-{00..02}.tar")]
        assert keys == [f"k{i}" for i in range(7)]
        dataset = wds_core.ShardListDataset([f"dict://bucket/shard-{i:02d}.tar" for i in range(3)])
        assert len(dataset) == 7 and dataset[4]["__key__"] == "k4"
        assert Storage().backend("dict://bucket/shard-00.tar").size("dict://bucket/shard-00.tar", Storage()) > 0
        with pytest.raises(ShardOpenError, match="no such object"):
            list(wds_core.WebDataset("dict://bucket/missing.tar"))
    finally:
        wds_core.io.register_backend("dict", None)
    assert type(backends.backend_for("dict://bucket/shard-00.tar")) is RangedBackend


def test_register_backend_refuses_what_is_not_a_backend_and_keeps_the_built_in_ones():
    with pytest.raises(TypeError, match="Backend"):
        wds_core.io.register_backend("x", object())
    with pytest.raises(ValueError, match="built in"):
        wds_core.io.register_backend("pipe", None)


def test_what_a_kind_cannot_do_is_an_error_naming_the_url(tmp_path):
    with pytest.raises(ShardOpenError, match="cannot be read by offset") as caught:
        open_random_access("pipe:cat /dev/null")
    assert "pipe:cat /dev/null" in str(caught.value)
    with pytest.raises(ShardOpenError, match="cannot be read by offset"):
        open_random_access("-")


def test_a_registered_backend_is_outside_secure_modes_allowlist(monkeypatch):
    wds_core.io.register_backend("dict", DictBackend())
    monkeypatch.setenv("WDS_SECURE", "1")
    try:
        with pytest.raises(SpecError, match="secure mode"):
            open_shard("dict://bucket/a.tar")
        with pytest.raises(SpecError, match="secure mode"):
            create_shard("dict://bucket/a.tar")
    finally:
        wds_core.io.register_backend("dict", None)


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


def test_pipe_urls_are_one_implementation_for_reading_writing_and_gopen(tmp_path):
    target = tmp_path / "out.bin"
    with gopen_pipe(f"pipe:cat > {target}", "wb") as stream:
        stream.write(b"hello")
    assert target.read_bytes() == b"hello"
    stream = gopen_pipe(f"pipe:cat {target}")
    assert isinstance(stream, PipeStream) and stream.read() == b"hello"
    stream.close()
    with pytest.raises(PipeError, match="status 3.*oops"):
        with open_shard("pipe:echo oops >&2; exit 3") as stream:
            stream.read()
    with pytest.raises(PipeError, match="status 4"):
        with gopen_pipe("pipe:cat > /dev/null; exit 4", "wb") as stream:
            stream.write(b"x")


def test_size_and_exists_ask_each_kind(tmp_path, http_server):
    (tmp_path / "a.tar").write_bytes(b"x" * 1000)
    (pathlib.Path(http_server.root) / "b.tar").write_bytes(b"y" * 2000)
    storage = Storage()
    assert storage.size(str(tmp_path / "a.tar")) == 1000 and storage.exists(f"file://{tmp_path}/a.tar")
    assert not storage.exists(str(tmp_path / "missing.tar"))
    assert storage.size(http_server.url + "/b.tar") == 2000 and storage.exists(http_server.url + "/b.tar")
    assert not storage.exists(http_server.url + "/missing.tar")
    assert storage.size("pipe:cat a.tar") is None and not storage.exists("pipe:cat a.tar")
