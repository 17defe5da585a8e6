"""Local files by path or ``file://`` URL, and ``-``: standard input and output."""

import subprocess
import sys

import pytest

from wds_core.errors import ShardNotFoundError, ShardOpenError
from wds_core.io.backends.local import LOCAL, STDIO
from wds_core.io.storage import Storage

DATA = bytes(range(256)) * 64


def test_a_path_and_its_file_url_are_the_same_file(tmp_path):
    path = tmp_path / "a.tar"
    path.write_bytes(DATA)
    for url in (str(path), path.as_uri()):
        with LOCAL.open(url, Storage()) as stream:
            assert stream.read() == DATA
        assert LOCAL.size(url, Storage()) == len(DATA)
        access = LOCAL.random_access(url, Storage())
        try:
            assert access.size == len(DATA) and access.read_at(1000, 10) == DATA[1000:1010]
        finally:
            access.close()


def test_a_file_appears_only_when_committed(tmp_path):
    target = tmp_path / "out.tar"
    sink = LOCAL.create(str(target), Storage())
    sink.write(b"x" * 100)
    assert not target.exists()
    sink.commit()
    assert target.read_bytes() == b"x" * 100
    dropped = LOCAL.create(str(tmp_path / "dropped.tar"), Storage())
    dropped.write(b"y")
    dropped.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.tar"]


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises((ShardNotFoundError, ShardOpenError)) as info:
        LOCAL.open(str(tmp_path / "missing.tar"), Storage())
    assert "missing.tar" in str(info.value)


def test_dash_reads_standard_input_and_writes_standard_output():
    code = (
        "from wds_core.io.backends.local import STDIO\n"
        "from wds_core.io.storage import Storage\n"
        "data = STDIO.open('-', Storage()).read()\n"
        "sink = STDIO.create('-', Storage())\n"
        "sink.write(data[::-1])\n"
        "sink.commit()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], input=DATA, capture_output=True, check=True)
    assert out.stdout == DATA[::-1]
    assert not STDIO.cached(None)
