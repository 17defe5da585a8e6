"""Many range requests in flight per remote shard, on one I/O pool per process.

An object store gives each connection a fixed bandwidth after a fixed
latency: one request at a time holds a reader to one connection's speed
(~36 MB/s at 40 ms and 40 MB/s a connection).  :class:`RangeWindow` keeps up
to ``ReadAhead.in_flight`` consecutive ranges of a shard requested at once,
within ``ReadAhead.budget`` bytes requested and not yet consumed, and hands
them to the reader in order as each arrives.  The first range after opening
(or seeking) is small (``first_range``), so parsing starts after one round
trip; when the object's size is not known it is asked for once that range
has arrived (while it is parsed), and the window opens when it is known.

Once every range of the shard being read is requested, the reader has the
next shard of its list primed (:meth:`RangeWindow.prime`: its first ranges and
its size, then its window from the pool), so the connections are not idle
between shards: a reader holds at most two windows, ``2 x budget`` bytes.

The requests run on :func:`io_pool`, shared by every reader of the process
(made anew in a forked child).  Each range is fetched with the retry policy
of its stream, so a range is delivered whole and once.  :meth:`RangeWindow.cancel`
drops what has not started; what is running finishes and is dropped.

Measured against a local server shaped like an object store
(``python benchmarks/bench_remote.py --shaped``): one process reads ~4x what
one connection gives; fsspec's HTTP client (one event loop thread) tops out
near 220 MB/s on this machine with 16 ranges in flight.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

__all__ = ["READ_AHEAD", "ReadAhead", "RangeWindow", "io_pool"]


@dataclass(frozen=True)
class ReadAhead:
    """How a remote shard is streamed.

    ``in_flight`` ranges of ``range_bytes`` are requested at once, at most
    ``budget`` bytes requested and not yet read; the first range after an open
    or a seek is ``first_range`` bytes.  ``in_flight=1`` with one large range
    is the old behaviour of one request at a time.

    A straggler is repeated (hedged): when the reader waits for a range that
    has taken four times the median of the last ranges of the shard (once
    four have been timed), and at least ``hedge_after`` seconds, the same
    range is asked for again and the first answer is used (the other is
    dropped); ``None`` never repeats one.
    """

    first_range: int = 256 << 10
    range_bytes: int = 2 << 20
    in_flight: int = 16
    budget: int = 64 << 20
    hedge_after: float | None = 0.1

    def __post_init__(self) -> None:
        for name in ("first_range", "range_bytes", "in_flight", "budget"):
            if getattr(self, name) < 1:
                raise ValueError(f"ReadAhead.{name} must be >= 1, got {getattr(self, name)}")
        if self.hedge_after is not None and self.hedge_after <= 0:
            raise ValueError(f"ReadAhead.hedge_after must be > 0 seconds or None, got {self.hedge_after}")


READ_AHEAD = ReadAhead()

_POOL_WORKERS = 64  # requests of all the readers of a process; they wait on the network, not the CPU
_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The process's pool for remote requests (a forked child makes its own: threads do not survive a fork)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(_POOL_WORKERS, thread_name_prefix="wds-io")
            _pool_pid = os.getpid()
        return _pool


class RangeWindow:
    """The ranges of one object requested ahead of its reader, from ``start``.

    ``fetch(start, length)`` returns the bytes (fewer only at the end of the
    object); ``known()`` the object's size (``None`` while it is not known) and
    ``lookup()`` asks for it.  :meth:`take` returns the range at the reader's
    position, waiting for it, and requests more; :meth:`prime` requests the
    first ranges before the reader comes (the shard after the one being read).
    ``then(callback)`` is called once every range of the object is requested:
    the reader then has the next shard requested.
    """

    def __init__(
        self,
        fetch: Callable[[int, int], bytes],
        known: Callable[[], int | None],
        lookup: Callable[[], int | None],
        start: int,
        plan: ReadAhead,
        count: Callable[[str], None] = lambda what: None,
    ) -> None:
        self.fetch, self.known, self.lookup, self.plan = fetch, known, lookup, plan
        self.count = count  # count("hedged") for each range asked for twice
        self.took: deque[float] = deque(maxlen=16)  # seconds the last ranges took, for what a straggler is
        self.next = start  # offset of the next range to request
        self.first = True  # the next range is the first after an open or a seek
        self.pending: deque[tuple[int, int, Future, float]] = deque()  # start, length, request, when asked
        self.held = 0  # bytes requested and not yet taken
        self.size_lookup: Future | None = None  # the size, asked for once the first range arrived (or when primed)
        self.lock = threading.Lock()  # a primed window is filled from the pool once its size is known
        self.cancelled = False
        self.callback: Callable[[], None] | None = None
        self.all_requested = False

    def then(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once every range of the object is requested (now, if they are)."""
        with self.lock:
            done, self.callback = self.all_requested, (None if self.all_requested else callback)
        if done:
            callback()

    def _request(self) -> Callable[[], None] | None:
        """Request ranges up to the window (under the lock); the callback to call, once all are requested."""
        size = self.known()
        plan = self.plan
        while not self.cancelled and len(self.pending) < plan.in_flight:
            if self.held >= plan.budget and self.pending:
                break
            if size is None and self.pending:
                return None  # one range until the size is known (asking past the end is an error on some stores)
            if size is not None and self.next >= size:
                break
            length = plan.first_range if self.first else plan.range_bytes
            if size is not None:
                length = min(length, size - self.next)
            self.first = False
            asked = time.monotonic()
            request = io_pool().submit(self.fetch, self.next, length)
            request.add_done_callback(functools.partial(self._timed, asked))
            self.pending.append((self.next, length, request, asked))
            self.next += length
            self.held += length
        if size is None or self.next < size or self.all_requested:
            return None
        self.all_requested = True
        callback, self.callback = self.callback, None
        return callback

    def _fill(self) -> None:
        with self.lock:
            callback = self._request()
        if callback is not None:
            callback()

    def prime(self) -> None:
        """Request the first ranges now; the size, when unknown, is asked for beside them and the window is filled
        from the pool once it is known."""
        self._fill()
        with self.lock:
            if self.known() is None and self.size_lookup is None:
                self.size_lookup = io_pool().submit(self._learn_and_fill)

    def _learn_and_fill(self) -> None:
        self.lookup()
        self._fill()

    def take(self, position: int) -> bytes:
        """The range that starts at ``position`` (``b""`` at the end of the object)."""
        with self.lock:
            if self.pending and self.pending[0][0] != position:  # pragma: no cover - a seek makes a new window
                raise AssertionError(f"the window is at {self.pending[0][0]}, the reader at {position}")
            empty = not self.pending
            if empty:
                self.next = position
        if empty:
            self._open()
        with self.lock:
            if not self.pending:
                return b""
            start, length, future, asked = self.pending.popleft()
            self.held -= length
        data = self._wait(start, length, future, asked)
        if len(data) < length:  # the object ends here: what was asked after it is not there
            self.cancel()
            with self.lock:
                self.next, self.all_requested = start + len(data), True
                callback, self.callback = self.callback, None
            if callback is not None:
                callback()
            return data
        with self.lock:
            if self.known() is None and self.size_lookup is None:
                # the first range is here, and parsing starts on it while the size is asked for (asked only now,
                # so that a server that does not answer is asked once, not twice); the window opens at the next take
                self.size_lookup = io_pool().submit(self.lookup)
                return data
        self._open()
        return data

    def _open(self) -> None:
        """Request up to the window, once the size asked for (if it is) is known."""
        with self.lock:
            lookup = self.size_lookup if self.known() is None else None
        if lookup is not None:
            lookup.result()
        self._fill()

    def _timed(self, asked: float, request: Future) -> None:
        if not request.cancelled() and request.exception() is None:
            self.took.append(time.monotonic() - asked)

    def _wait(self, start: int, length: int, request: Future, asked: float) -> bytes:
        """The bytes of ``request``; asked for again when it straggles (see :class:`ReadAhead`), first answer wins."""
        after = self.plan.hedge_after
        if after is not None and len(self.took) >= 4 and not request.done():  # what is usual is known
            took = sorted(self.took)
            left = max(4 * took[len(took) // 2], after) - (time.monotonic() - asked)
            if not wait([request], timeout=max(left, 0)).done:
                self.count("hedged")
                twin = io_pool().submit(self.fetch, start, length)
                first = next(iter(wait([request, twin], return_when=FIRST_COMPLETED).done))
                other = twin if first is request else request
                try:
                    data = first.result()
                except Exception:  # the other may still answer: a failure is only final when both fail
                    data = other.result()
                other.cancel()
                return data
        return request.result()

    def cancel(self) -> None:
        """Drop what was requested: not started, it never will be; running, its bytes are dropped."""
        with self.lock:
            self.cancelled = True
            for _, _, future, _ in self.pending:
                future.cancel()
            self.pending.clear()
            self.held = 0
            if self.size_lookup is not None:
                self.size_lookup.cancel()
