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
    compiled.SCAN is None and os.environ.get("WDS_REQUIRE_COMPILED") != "1",
    reason="tarscan is not built here or is turned off",
)


@pytest.mark.parametrize(
    "switch, code",
    [
        ("WDS_TARSCAN", "from wds_core.tar import compiled_walk; print(compiled_walk())"),
        ("WDS_GROUPFAST", "from wds_core.tar import grouping; print(grouping.GROUPER is not None)"),
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
    reader = iter(wds.WebDataset(str(path)))
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
assert sum(1 for _ in wds.WebDataset(path)) == 60  # the guard is installed by now
with open(path, "rb") as handle:
    view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
os.truncate(path, 4096)
print("read", flush=True)
view[len(view) - 1]  # past the end of the cut file, outside any guarded copy
print("survived", flush=True)
"""


@pytest.mark.slow
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


CUT_WHILE_HANDLED_ELSEWHERE = """
import ctypes, os, signal, sys
import wds_core as wds
from wds_core.errors import TruncatedShardError
path, reader, elsewhere = sys.argv[1:]

def read():
    if reader == "stream":
        return (sample["bin"] for sample in wds.WebDataset(path))
    dataset = wds.ShardListDataset([path])
    return (dataset[i]["bin"] for i in range(60))

assert sum(1 for _ in read()) == 60  # the guard has been used in this process
if elsewhere == "fork":  # as a DataLoader worker is started
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    # torch's worker loop sets a SIGBUS handler of its own, in C, which knows nothing of the one it replaces
    ctypes.CDLL(None).signal(signal.SIGBUS, None)
else:  # the application's own handler, which returns: a fault then repeats for ever
    signal.signal(signal.SIGBUS, lambda signum, frame: None)
samples = read()
next(samples)
os.truncate(path, 30 * 40_960 + 1000)  # inside the 31st member, the shard mapped
try:
    count = 1 + sum(1 for _ in samples)
except TruncatedShardError as exn:
    print("cut", exn.member, exn.offset, flush=True)
os._exit(0)
"""


@pytest.mark.slow
@needs_walk
@pytest.mark.parametrize("elsewhere", ["fork", "handler"])
@pytest.mark.parametrize("reader", ["stream", "indexed"])
def test_a_cut_is_reported_whatever_handles_sigbus_when_it_happens(tmp_path, reader, elsewhere):
    """Issue 43: the guard was installed once a process, so a forked DataLoader worker (whose SIGBUS handler torch
    replaces) died of a cut shard, and a handler the application set afterwards made the cut fault for ever.  The
    guard is there while a helper copies out of a map, whatever was set before: the cut is reported, with its
    member and offset, within the timeout."""
    path = _shard(tmp_path, [(f"k{i:03d}.bin", bytes([i]) * 40_448) for i in range(60)])  # 40,960 bytes a member
    run = subprocess.run(
        [sys.executable, "-c", CUT_WHILE_HANDLED_ELSEWHERE, str(path), reader, elsewhere],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout == "cut k030.bin 1229800\n", run.stderr


@needs_walk
def test_the_guard_is_there_only_while_a_helper_copies(tmp_path):
    """Outside the helpers' copies wds leaves SIGBUS as it found it (to Python's default here, faulthandler's or
    an application's handler): the guard is installed for a walk and put back after it."""
    from wds_core._native import sigbus_guard

    path = _shard(tmp_path, [(f"k{i:03d}.bin", bytes([i]) * 40_448) for i in range(60)])
    reader = iter(wds.WebDataset(str(path)))
    next(reader)
    assert sigbus_guard.status() == {"copying": 0, "installed": False}
    assert sum(1 for _ in reader) == 59
    dataset = wds.ShardListDataset([str(path)])
    assert dataset[7]["bin"] == bytes([7]) * 40_448
    dataset.close()
    assert sigbus_guard.status() == {"copying": 0, "installed": False}
