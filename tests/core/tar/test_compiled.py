"""The compiled tar walk (tarscan.c through wds_core.tar.compiled): switched by the environment, reading a local
shard straight from the file, and stopping where the Python walk is to go on.  That it gives what the Python
walk gives on hostile shards is tests/core/test_fuzz.py's differential test."""

import io
import os
import subprocess
import sys

import pytest

import wds_core as wds
from wds_core import TruncatedShardError
from wds_core.tar import compiled, iter_members
from wds_core.tar.tarwrite import encode_member, end_of_archive

needs_walk = pytest.mark.skipif(
    compiled.SCAN is None and os.environ.get("WDS_REQUIRE_COMPILED") != "1", reason="tarscan is not built here"
)


@pytest.mark.parametrize(
    "switch, code",
    [
        ("WDS_TARSCAN", "from wds_core.tar import compiled_walk; print(compiled_walk())"),
        ("WDS_GROUPFAST", "from wds_core import grouping; print(grouping.GROUPER is not None)"),
    ],
)
def test_each_compiled_helper_is_switched_off_by_the_environment(switch, code):
    env = {**os.environ, switch: "python"}
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert off.stdout.strip() == "False"
    if os.environ.get("WDS_REQUIRE_COMPILED") == "1":  # CI builds it: a build that left it out fails here
        on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert on.stdout.strip() == "True"


LONG = "d" * 250  # a directory no ustar header holds: the member gets an extension header, not a plain one


def _shard(tmp_path, members):
    out = io.BytesIO()
    for name, data in members:
        out.write(encode_member(name, data))
    out.write(end_of_archive())
    path = tmp_path / "s.tar"
    path.write_bytes(out.getvalue())
    return path


@needs_walk
def test_the_file_walk_stops_at_what_is_not_a_plain_member(tmp_path):
    members = [(f"k{i}.bin", bytes([i]) * (i * 5000)) for i in range(6)]
    members[4] = (f"{LONG}/k4.bin", members[4][1])
    path = _shard(tmp_path, members)
    with open(path, "rb", buffering=0) as stream:
        size = os.fstat(stream.fileno()).st_size
        walk = compiled.walk_file(compiled.SCAN, stream.fileno(), 0, size, 1 << 30)
        got = []
        try:
            while True:
                got.append(next(walk))
        except StopIteration as stop:
            where = stop.value
    assert [(name, data) for name, data, _ in got] == members[:4] and all(type(d) is bytes for _, d, _ in got)
    assert where == got[-1][2] + 512 + 15_360  # the extension header, after the fourth member (15,000 bytes, padded)
    with open(path, "rb", buffering=0) as stream:  # iter_members goes on from there in Python
        read = [(name, data) for name, data, _ in iter_members(stream, str(path), fd=stream.fileno())]
    assert read == members


@needs_walk
def test_a_shard_cut_while_it_is_read_is_reported_not_a_crash(tmp_path):
    members = [(f"k{i:03d}.bin", bytes([i % 251]) * 40_000) for i in range(60)]
    path = _shard(tmp_path, members)
    reader = iter(wds.WebDataset(str(path), shardshuffle=False))
    first = next(reader)
    assert first["bin"] == members[0][1]
    os.truncate(path, 30 * 41_472 + 1000)  # cut inside the 31st member, while the shard is open
    with pytest.raises(TruncatedShardError) as caught:
        for _ in reader:
            pass
    assert caught.value.url == str(path) and caught.value.offset is not None
