"""The remote engine of a process: one pool of request threads and one byte budget, shared by every reader.

Every remote request of a process runs on :func:`io_pool` (``POOL_WORKERS`` threads, made anew in a forked
child: threads do not survive a fork): the ranges readers request ahead (:mod:`.readahead`), size lookups,
hedged repeats, and the parts of S3 uploads (:mod:`.backends.s3upload`), whose bytes in flight the engine counts
too (an upload waits for its oldest part while the budget is spent, and always has one in flight).

The bytes requested and not yet taken are counted twice: by the reader that asked for them (its
:class:`~.readahead.Allowance`: the shard it reads first, then the shards ahead of it, within
``ReadAhead.budget``), and by the :data:`ENGINE`, across every reader of the process, within
:attr:`Engine.budget` (``WDS_IO_BUDGET``, default 128 MiB: two readers' default budgets).  One reader alone is
held by its own budget, as before; several (the sources of a mix, the lanes of a reader of many shards, readers
in threads) share the engine's, so a process holds at most that much read ahead however many readers it runs.
A reader with nothing requested may always request one range, so none waits for the others to finish; when
bytes are taken, the readers the engine held back are served again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..forklocks import ForkSafeLock

__all__ = ["ENGINE", "POOL_WORKERS", "Engine", "io_pool", "start_jobs"]

POOL_WORKERS = 64  # requests of all the readers of a process; they wait on the network, not the CPU
BOOKKEEPING = ForkSafeLock()  # held only to count and request ranges, never while waiting for one
_DEFAULT_BUDGET = 128 << 20

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = ForkSafeLock()


def io_pool() -> ThreadPoolExecutor:
    """The process's pool for remote requests (a forked child makes its own: threads do not survive a fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(POOL_WORKERS, thread_name_prefix="wds-io")
            _pool_pid = os.getpid()
        return _pool


def _budget_from_environment() -> int:
    text = os.environ.get("WDS_IO_BUDGET", "").strip()
    if not text:
        return _DEFAULT_BUDGET
    try:
        value = int(float(text))
    except ValueError:
        raise ValueError(f"WDS_IO_BUDGET is a number of bytes, got {text!r}") from None
    if value < 1:
        raise ValueError(f"WDS_IO_BUDGET must be >= 1 byte, got {value}")
    return value


class Engine:
    """What the readers of a process have requested together, and the most they may (``budget`` bytes)."""

    def __init__(self, budget: int | None = None) -> None:
        self.budget = _budget_from_environment() if budget is None else budget
        self.held = 0  # bytes requested and not yet taken, every reader of the process
        self.exiting = False  # the interpreter is exiting (the pool refused a request): nothing more is requested
        self.waiting: dict[int, Any] = {}  # readers' allowances held back by the budget, by id, in order
        self._waking = False

    def room(self) -> bool:
        """Whether the process may request more bytes (under the bookkeeping lock)."""
        return self.held < self.budget

    def hold(self, nbytes: int) -> None:
        """Count ``nbytes`` that are not a reader's (the part of an upload in flight) until :meth:`release`."""
        with BOOKKEEPING:
            self.held += nbytes

    def release(self, nbytes: int) -> None:
        """``nbytes`` held are let go: the readers held back are served again."""
        with BOOKKEEPING:
            self.held -= nbytes
        self.wake()

    def wait_for_room(self, allowance: Any) -> None:
        """``allowance`` had more to request than the budget let it: serve it again when bytes are taken."""
        self.waiting.setdefault(id(allowance), allowance)

    def wake(self) -> None:
        """Serve again the allowances held back, in the order they were, while there is room (called without the
        bookkeeping lock; an allowance's ``fill`` takes it)."""
        with BOOKKEEPING:
            if self._waking or not self.waiting or not self.room():
                return
            self._waking = True
            waiting, self.waiting = list(self.waiting.values()), {}
        try:
            for allowance in waiting:
                allowance.fill(wake=False)
        finally:
            with BOOKKEEPING:
                self._waking = False


ENGINE = Engine()


def _forked() -> None:  # a child holds none of its parent's requests
    ENGINE.held, ENGINE.waiting, ENGINE.exiting, ENGINE._waking = 0, {}, False, False


os.register_at_fork(after_in_child=_forked)


def _run(request: Future, fetch: Callable[[int, int], bytes | bytearray], start: int, length: int) -> None:
    """Answer ``request`` (a range booked by a window) on a pool thread, unless it was cancelled before."""
    if not request.set_running_or_notify_cancel():
        return
    try:
        data = fetch(start, length)
    except BaseException as exn:
        request.set_exception(exn)
    else:
        request.set_result(data)


def start_jobs(jobs: list[tuple[Future, Callable[[int, int], bytes | bytearray], int, int]]) -> None:
    """Hand booked ranges to the pool, outside the bookkeeping lock (starting a pool thread takes a while: the
    reader must not wait for it to take the range it needs)."""
    for at, job in enumerate(jobs):
        try:
            io_pool().submit(_run, *job)
        except RuntimeError:  # the interpreter is exiting: the pool is shut down
            ENGINE.exiting = True
            for request, *_ in jobs[at:]:
                request.cancel()
            return
