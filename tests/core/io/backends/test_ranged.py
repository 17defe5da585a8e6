"""Objects read by ranges through fsspec (``memory://`` here): streamed, by offset, sized, written."""

import fsspec
import pytest

from wds_core.errors import ShardOpenError
from wds_core.io.backends.ranged import FSSPEC
from wds_core.io.storage import Storage

DATA = bytes(range(256)) * 8192  # 2 MiB: more than one range and one walk window


@pytest.fixture
def stored():
    fs = fsspec.filesystem("memory")
    fs.pipe("/ranged/a.tar", DATA)
    yield "memory://ranged/a.tar"
    fs.rm("/ranged", recursive=True)


def test_streamed_by_offset_and_sized(stored):
    with FSSPEC.open(stored, Storage()) as stream:
        assert stream.read() == DATA
    assert FSSPEC.size(stored, Storage()) == len(DATA)
    access = FSSPEC.random_access(stored, Storage())
    assert access.ranged and access.size == len(DATA)
    assert access.read_at(1_500_000, 100) == DATA[1_500_000:1_500_100]
    assert access.walk(10, 5) == DATA[10:15] and access.walk(20, 5) == DATA[20:25]  # from one window


def test_written_through_fsspec_and_missing_objects_named(stored):
    sink = FSSPEC.create("memory://ranged/b.tar", Storage())
    sink.write(b"abc")
    sink.commit()
    assert fsspec.filesystem("memory").cat("/ranged/b.tar") == b"abc"
    with pytest.raises(ShardOpenError) as info:
        FSSPEC.open("memory://ranged/missing.tar", Storage()).read()
    assert "missing.tar" in str(info.value)
