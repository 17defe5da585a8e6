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
@pytest.mark.parametrize("map_files", [True, False], ids=["copied-from-a-map", "read"])
def test_a_shard_cut_while_it_is_read_is_reported_not_a_crash(tmp_path, monkeypatch, map_files):
    """Mapped, the cut makes the copy of the next member a SIGBUS, which tarscan.c's guard turns into a stop: the
    samples before the cut are all delivered, then the cut is reported with its member and offset."""
    monkeypatch.setattr(compiled, "MAP_FILES", map_files)
    members = [(f"k{i:03d}.bin", bytes([i % 251]) * 40_000) for i in range(60)]
    path = _shard(tmp_path, members)
    reader = iter(wds.WebDataset(str(path), shardshuffle=False))
    got = [next(reader)]
    assert got[0]["bin"] == members[0][1]
    os.truncate(path, 30 * 41_472 + 1000)  # cut inside the 31st member, while the shard is open
    with pytest.raises(TruncatedShardError) as caught:
        for sample in reader:
            got.append(sample)
    # every sample before the cut; the one in progress (k029: the cut member might have been one of its own) is
    # the handler's to deliver or not, and reraise_exception raises
    assert [s["bin"] for s in got] == [data for _, data in members[:29]]
    assert caught.value.url == str(path) and caught.value.member == "k030.bin"
    assert caught.value.offset == 30 * 41_472 + 1000


SIGBUS_ELSEWHERE = """
import mmap, os, sys
import wds_core as wds
path = sys.argv[1]
assert sum(1 for _ in wds.WebDataset(path, shardshuffle=False)) == 60  # the guard is installed by now
with open(path, "rb") as handle:
    view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
os.truncate(path, 4096)
print("read", flush=True)
view[len(view) - 1]  # past the end of the cut file, outside any guarded copy
print("survived", flush=True)
"""


@needs_walk
@pytest.mark.parametrize("faulthandler", [False, True])
def test_a_sigbus_outside_the_walk_still_ends_the_process(tmp_path, faulthandler):
    """The guard takes only the faults of its own copies: any other SIGBUS goes to the handler that was there
    before it (faulthandler's report), or ends the process by the signal, as it would have without wds."""
    path = _shard(tmp_path, [(f"k{i:03d}.bin", bytes(40_000)) for i in range(60)])
    flags = ["-X", "faulthandler"] if faulthandler else []
    run = subprocess.run(
        [sys.executable, *flags, "-c", SIGBUS_ELSEWHERE, str(path)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == -7, run.stderr  # SIGBUS
    assert run.stdout == "read\n"
    assert ("Bus error" in run.stderr) == faulthandler
