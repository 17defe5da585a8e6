"""Locks and events made anew in a forked child (issue 56, case 9): a DataLoader forks its workers while the
parent's threads stream, and a lock one of them held at that instant must not be held for ever in the child."""

import os
import signal
import threading

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from wds_core.io.forklocks import ForkSafeLock, fork_safe_event


def forked(child) -> int:
    """The exit code of a forked child that runs ``child()`` (its truth is the code: 0 or 1), killed by an alarm
    after 10 s (a lock held for ever)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(10)
        try:
            os._exit(0 if child() else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_lock_held_by_a_thread_at_the_fork_is_free_in_the_child_and_so_is_an_event_s():
    lock, event = ForkSafeLock(), fork_safe_event()
    holding, done = threading.Event(), threading.Event()

    def hold():
        with lock, event._cond:  # what a thread in event.wait() or event.set() holds
            holding.set()
            done.wait()

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait()
    try:
        assert forked(lambda: lock.acquire(timeout=5) and (event.set() or event.wait(5))) == 0
        assert not lock.acquire(blocking=False) or lock.release()  # still the thread's here
    finally:
        done.set()
        thread.join()
    with lock:  # re-entrant, as the plain locks it replaces never needed but may take
        with lock:
            pass


@pytest.mark.slow
def test_children_forked_while_four_threads_stream_read_remote_shards(http_server, monkeypatch):
    """Forking 200 times while four threads stream remote shards by small ranges (many requests, each counted
    under the engine's bookkeeping lock): every child reads a remote sample.  The lock, held at about one fork in
    10 to 100, blocked the child for ever on its first read."""
    from tests.core.io.remote.test_rangestream import small_ranges

    small_ranges(monkeypatch, 1024)
    for s in range(4):
        samples = make_samples(f"s{s}-", 300)
        for i, sample in enumerate(samples):
            sample["bin"] = bytes([i % 251]) * 3000
        write_shard(os.path.join(http_server.root, f"shard-{s}.tar"), samples, ("txt", "cls", "bin"))
    spec = http_server.url + "/shard-{0..3}.tar"
    stop = threading.Event()
    read = [0] * 4

    def stream(n):
        while not stop.is_set():
            for _ in wds_core.WebDataset(spec, seed=n, shuffle=True):
                read[n] += 1
                if stop.is_set():
                    return

    from wds_core.io import storage_config
    from wds_core.io.backends import httpconn, s3client
    from wds_core.io.remote import engine, retries

    # and one that holds each lock of the I/O layer in turn, most of the time, as a pool thread may at the instant
    # of a fork (the four readers alone hold the engine's at about one fork in 100 on 2 cores)
    held = [engine.BOOKKEEPING, engine._pool_lock, httpconn.CONNECTIONS.lock, retries._count_lock,
            retries._said_lock, storage_config._lock, s3client._clients_lock]  # fmt: skip

    def hold():
        while not stop.is_set():
            for lock in held:
                with lock:
                    stop.wait(0.002)

    threads = [threading.Thread(target=stream, args=(n,), daemon=True) for n in range(4)]
    threads.append(threading.Thread(target=hold, daemon=True))
    for thread in threads:
        thread.start()
    one = http_server.url + "/shard-0.tar"
    try:
        while min(read) == 0:
            stop.wait(0.01)
        codes = []
        while len(codes) < 200 and not any(codes):  # the first child that fails or hangs ends the test
            codes.append(forked(lambda: next(iter(wds_core.WebDataset(one)))["__key__"] == "s0-00000"))
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert codes == [0] * 200, f"child {len(codes)} of 200 failed or hung (exit code {codes[-1]})"
    assert min(read) > 0
