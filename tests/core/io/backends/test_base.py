"""The Backend protocol: a whole storage kind in a few lines, registered by scheme; what a kind cannot do is an
error naming the URL, and a registered kind is outside secure mode's allowlist."""

import io

import numpy as np
import pytest

import wds_core
from wds_core.errors import ShardOpenError, SpecError
from wds_core.io import backends
from wds_core.io.backends.ranged import RangedBackend
from wds_core.io.localfiles import RandomAccess
from wds_core.io.shardsink import ShardSink
from wds_core.io.storage import Storage, create_shard, open_random_access, open_shard


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
