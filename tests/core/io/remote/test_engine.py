"""The remote engine of a process (issue 46): one pool, and one byte budget over every reader's allowance."""

import os
import threading
import time

import fsspec
import pytest

from wds_core.io.backends.fsspec import FsspecSource
from wds_core.io.remote import engine
from wds_core.io.remote.rangestream import RangeStream
from wds_core.io.remote.readahead import ReadAhead
from wds_core.io.remote.retries import RetryPolicy

FAST = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.05)
RANGE = 64 << 10


class SlowMemory:
    """A memory filesystem whose ranges take a while, so that requests pile up ahead of the readers."""

    def __init__(self, fs, watch):
        self.fs, self.watch = fs, watch

    def cat_file(self, path, start, end, **kw):
        self.watch()
        time.sleep(0.002)
        return self.fs.cat_file(path, start=start, end=end)

    def info(self, path, **kw):
        return self.fs.info(path)


def test_readers_of_one_process_share_the_engines_budget(monkeypatch):
    fs = fsspec.filesystem("memory")
    data = [os.urandom(4 << 20) for _ in range(4)]
    for i, blob in enumerate(data):
        fs.pipe_file(f"/engine/{i}.bin", blob)
    monkeypatch.setattr(engine.ENGINE, "budget", 1 << 20)  # four readers of 1 MiB each, 1 MiB for the process
    most = [0]

    def watch():
        most[0] = max(most[0], engine.ENGINE.held)

    plan = ReadAhead(RANGE, RANGE, 16, 1 << 20, ramp=0, hedge_after=None)
    got = [b""] * 4

    def read(i):
        source = FsspecSource(SlowMemory(fs, watch), f"/engine/{i}.bin", FAST)
        stream = RangeStream(source, f"memory://engine/{i}.bin", len(data[i]), FAST, plan)
        parts = []
        while piece := stream.read(100_000):
            parts.append(piece)
        stream.close()
        got[i] = b"".join(parts)

    readers = [threading.Thread(target=read, args=(i,)) for i in range(4)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(60)
    assert got == data  # every byte, once, in order
    # alone, each reader would hold up to its own 1 MiB: together they stay near the engine's 1 MiB (each may
    # always have one range in flight, so that none waits for the others)
    assert most[0] <= (1 << 20) + 4 * RANGE
    assert engine.ENGINE.held == 0 and not engine.ENGINE.waiting


def test_one_reader_is_held_by_its_own_budget_as_before(monkeypatch):
    fs = fsspec.filesystem("memory")
    blob = os.urandom(2 << 20)
    fs.pipe_file("/engine/one.bin", blob)
    most = [0]

    def watch():
        most[0] = max(most[0], engine.ENGINE.held)

    plan = ReadAhead(RANGE, RANGE, 64, 1 << 20, ramp=0, hedge_after=None)
    stream = RangeStream(
        FsspecSource(SlowMemory(fs, watch), "/engine/one.bin", FAST), "memory://x", len(blob), FAST, plan
    )
    assert stream.read(RANGE) == blob[:RANGE]
    time.sleep(0.2)  # what the reader may request ahead arrives
    assert stream.read() == blob[RANGE:]
    assert (1 << 20) - RANGE <= most[0] <= (1 << 20) + RANGE  # its own budget, well under the engine's


def test_the_budget_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("WDS_IO_BUDGET", "3e8")
    assert engine.Engine().budget == 300_000_000
    monkeypatch.setenv("WDS_IO_BUDGET", "lots")
    with pytest.raises(ValueError, match="WDS_IO_BUDGET"):
        engine.Engine()
    monkeypatch.delenv("WDS_IO_BUDGET")
    assert engine.Engine().budget == 128 << 20


def test_a_forked_child_holds_none_of_its_parents_requests(monkeypatch):
    monkeypatch.setattr(engine.ENGINE, "held", 12345)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, str(engine.ENGINE.held).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 100) == b"0"
    os.close(read), os.close(write)
