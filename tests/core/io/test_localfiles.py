"""wds_core.io.localfiles: shard-list items to URLs, local paths, opening, mapping and reading by offset."""

import os
import pathlib

import pytest

from wds_core import _native
from wds_core.errors import ShardNotFoundError, ShardOpenError
from wds_core.io import localfiles as local


@pytest.mark.parametrize(
    ("item", "url"),
    [("a.tar", "a.tar"), ({"url": "s3://b/a.tar"}, "s3://b/a.tar"), (pathlib.Path("/d/a.tar"), "/d/a.tar")],
)
def test_the_url_of_a_shard_list_item(item, url):
    assert local.url_of(item) == url


@pytest.mark.parametrize("item", [3, None, {"path": "a.tar"}, b"a.tar"])
def test_an_item_that_is_no_url_is_said_so(item):
    with pytest.raises(TypeError, match="expected a shard URL"):
        local.url_of(item)


@pytest.mark.parametrize(
    ("url", "path"),
    [("a.tar", "a.tar"), ("/d/a.tar", "/d/a.tar"), ("file:///d/a.tar", "/d/a.tar"), ("-", None),
     ("pipe:cat a.tar", None), ("s3://b/a.tar", None), ("https://h/a.tar", None)],
)  # fmt: skip
def test_local_paths(url, path):
    assert local.local_path(url) == path


def test_opening_a_missing_or_unreadable_shard(tmp_path):
    with pytest.raises(ShardNotFoundError) as caught:
        local.open_local(str(tmp_path / "missing.tar"), "file://" + str(tmp_path / "missing.tar"))
    assert caught.value.url.endswith("missing.tar")
    with pytest.raises(ShardOpenError, match="cannot open shard"):
        local.open_local(str(tmp_path), str(tmp_path))  # a directory


@pytest.fixture(params=["mapped", "pread"])
def random_access(request, tmp_path, monkeypatch):
    if request.param == "pread":
        monkeypatch.setattr(local, "_mapped_copy", lambda: None)
    elif _native.load("mapcopy") is None:
        pytest.skip("the compiled mapped copy is not built (or is turned off)")
    path = tmp_path / "s.tar"
    data = os.urandom(10000)
    path.write_bytes(data)
    shard = local.local_random_access(str(path), "s.tar")
    yield shard, data, path
    shard.close()


def test_reads_by_offset_come_back_short_only_at_the_end(random_access):
    shard, data, _ = random_access
    assert shard.size == len(data)
    assert shard.read_at(0, 100) == data[:100] and shard.read_at(9990, 100) == data[9990:]
    assert shard.read_at(20000, 10) == b"" and shard.read_at(-5, 10) == b""
    rows = [("k.a", 0, 512, 100), ("k.b", 700, 1212, 50)]
    assert shard.read_members(rows) == [("k.a", data[512:612], 0), ("k.b", data[1212:1262], 700)]


def test_a_shard_cut_after_it_was_opened_reads_short_not_a_crash(random_access):
    shard, data, path = random_access
    os.truncate(path, 4096)
    assert shard.read_at(4000, 500) == data[4000:4096]
    assert shard.read_at(8192, 100) == b""


def test_maps_of_what_is_no_regular_file(tmp_path):
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with open(empty, "rb", buffering=0) as stream:
        assert local.file_descriptor(stream) >= 0 and local.map_whole(stream) is None
    read, write = os.pipe()
    with os.fdopen(read, "rb", buffering=0) as stream:
        assert local.map_whole(stream) is None
    os.close(write)
    full = tmp_path / "full.tar"
    full.write_bytes(b"x" * 100)
    with open(full, "rb", buffering=0) as stream:
        mapped = local.map_whole(stream)
        assert mapped is not None and mapped[:3] == b"xxx"
        mapped.close()
        assert local.map_file(stream.fileno(), at_least=200) is None  # shorter than measured: not mapped
    assert local.file_descriptor(stream) == -1 and local.file_descriptor(object()) == -1
