"""Many range requests in flight per reader, over its shard and the shards ahead, on one I/O pool per process.

An object store gives each connection a fixed bandwidth after a fixed
latency: one request at a time holds a reader to one connection's speed
(~36 MB/s at 40 ms and 40 MB/s a connection).  A :class:`RangeWindow` hands a
shard's consecutive ranges to its reader in order, as each arrives.  The
first range after opening (or seeking) is small (``first_range``), so parsing
starts after one round trip; when the object's size is not known (a response
without ``Content-Range``) it is asked for once that range has arrived, and
the window opens when it is known.

The windows of one reader share an :class:`Allowance`: at most
``ReadAhead.in_flight`` requests outstanding and ``ReadAhead.budget`` bytes
requested and not yet consumed, served in the reader's order -- the shard it
reads first, then the ``shards_ahead`` shards of its list it has opened and
primed (:meth:`RangeWindow.prime`) -- so the connections are never idle
between shards and the shards ahead only get what the current one does not
need.  When a range is answered its connection goes to the next range the
allowance allows.

The requests run on the process's remote engine (:mod:`.engine`): one pool of
threads, and one byte budget over every reader's allowance.  Each range is fetched with the retry policy
of its stream, so a range is delivered whole and once.  :meth:`RangeWindow.cancel`
drops what has not started; what is running finishes and is dropped (and is
not retried once its stream is closed).

Measured against a local server shaped like an object store
(``python benchmarks/bench_store.py --rows shaped``, 40 ms and 40 MB/s a
connection): one process reads ~10x what one connection gives.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

from .engine import BOOKKEEPING, ENGINE, io_pool, start_jobs
from .throttle import THROTTLE

__all__ = ["READ_AHEAD", "Allowance", "ReadAhead", "RangeWindow"]


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

    Ranges grow with the connection (:mod:`.links`): once the host's answers
    are timed, to the size that keeps a connection busy, between
    ``range_bytes`` and ``max_range``, the rest of a shard in equal parts (no
    short last range); a shard ahead starts with such a range.

    Until a reader has read ``ramp`` bytes, it has asked for at most four
    times what it read plus ``first_range``, a range at a time once that room
    is twice what it asked (256 KiB, 512 KiB, 1.5 MiB, 4.5 MiB...), shards
    ahead from the same room: a DataLoader worker's first batch before
    anything ahead.  ``0`` lifts this bound.

    ``window_bytes`` caps what one shard has requested and not yet read
    (``None``: only ``budget`` does; one range is always allowed), so that a
    reader of many shards at once (:mod:`wds_core.sources.interleave`) spreads
    its requests over all of them instead of filling its budget with the
    first.
    """

    first_range: int = 256 << 10
    range_bytes: int = 2 << 20
    in_flight: int = 24
    budget: int = 128 << 20  # the process's (engine.Engine.budget): one reader alone may use all of it
    hedge_after: float | None = 0.1
    shards_ahead: int = 8
    ramp: int = 8 << 20
    window_bytes: int | None = None
    max_range: int = 16 << 20

    def __post_init__(self) -> None:
        for name in ("shards_ahead", "ramp"):
            if getattr(self, name) < 0:
                raise ValueError(f"ReadAhead.{name} must be >= 0, got {getattr(self, name)}")
        if self.window_bytes is not None and self.window_bytes < 1:
            raise ValueError(f"ReadAhead.window_bytes must be >= 1 or None, got {self.window_bytes}")
        for name in ("first_range", "range_bytes", "in_flight", "budget", "max_range"):
            if getattr(self, name) < 1:
                raise ValueError(f"ReadAhead.{name} must be >= 1, got {getattr(self, name)}")
        if self.hedge_after is not None and self.hedge_after <= 0:
            raise ValueError(f"ReadAhead.hedge_after must be > 0 seconds or None, got {self.hedge_after}")


READ_AHEAD = ReadAhead()


class Allowance:
    """What the windows of one reader may request together: ``plan.in_flight`` ranges and ``plan.budget`` bytes
    requested and not yet taken.  The windows are served in the reader's order (the shard being read first, then
    the shards ahead of it), so the shards ahead only get what the shard being read does not need."""

    def __init__(self, plan: ReadAhead) -> None:
        self.plan = plan
        # one lock for the bookkeeping of every window of the process: a window moves from one allowance to another
        # (a reader adopting a stream it opened), and its ranges must never be requested by two threads at once
        self.lock = BOOKKEEPING
        self._held = 0  # bytes requested and not yet taken, all windows (the engine counts them too)
        self.pending = 0  # ranges requested and not yet taken, all windows
        self.running = 0  # ranges requested and not yet answered: the connections in use
        self.asked = 0  # bytes requested so far, all windows (less those cancelled before they were answered)
        self.consumed = 0  # bytes the reader has read, all windows (the start-up bound's measure: ReadAhead.ramp)
        self.next_fill = 0  # what consumed must reach for the start-up bound to allow the next range
        self.typical = 0  # the size of the last shard whose size was learned: a guess at the next one's
        self.windows: list[RangeWindow] = []
        self.filling = self.again = False
        self.jobs: list[tuple[Future, Callable[[int, int], bytes | bytearray], int, int]] = []  # booked, not sent

    @property
    def held(self) -> int:
        """Bytes requested and not yet taken, all windows."""
        return self._held

    @held.setter
    def held(self, value: int) -> None:  # under the lock
        ENGINE.held += value - self._held
        self._held = value

    def starting(self) -> int | None:
        """While the reader starts (it has read less than ``plan.ramp``): the bytes it may still ask for, ``0``
        until that is twice what it asked for so far (see :class:`ReadAhead`); ``None`` once it has started."""
        if self._started():
            return None
        plan = self.plan
        room = 4 * self.consumed + plan.first_range - self.asked
        return room if room >= self._step() or room >= plan.range_bytes << 3 else 0

    def _started(self) -> bool:
        return not self.plan.ramp or self.consumed >= self.plan.ramp

    def _step(self) -> int:
        """The room the start-up bound waits for before it allows the next range: twice what was asked."""
        return max(self.plan.first_range, 2 * self.asked)

    def consume(self, nbytes: int) -> None:
        """The reader read ``nbytes`` more: the start-up bound may now allow another range."""
        self.consumed += nbytes
        if self.consumed >= self.next_fill:
            self.fill()

    def room(self) -> bool:
        """Whether one more range may be requested (one may always be, when nothing is pending): within the
        reader's budget and the engine's (held back by the engine's, the allowance is served again when bytes
        are taken: :meth:`~.engine.Engine.wait_for_room`), and while it starts within what it has read."""
        if self.running >= self.plan.in_flight:
            return False
        if self.starting() == 0 and self.pending:
            return False
        if self.pending == 0:
            return True
        if self._held >= self.plan.budget:
            return False
        if ENGINE.held >= ENGINE.budget:
            ENGINE.wait_for_room(self)
            return False
        return True

    def fill(self, wake: bool = True) -> None:
        """Request what the allowance allows, window by window in the reader's order; then (``wake``) serve the
        allowances the engine held back, while it has room."""
        with self.lock:
            if self.filling:  # a range cancelled calls back into fill(): the loop below goes round again
                self.again = True
                return
            self.filling = True
            try:
                plan, engine = self.plan, ENGINE
                while True:
                    self.again = False
                    for window in list(self.windows):
                        # room(), and RangeWindow.full(), written out: with many windows (a reader of many shards
                        # at once) this loop runs for each range taken and each answered
                        if self.running >= plan.in_flight or (self._held >= plan.budget and self.pending):
                            break
                        if self.pending and engine.held >= engine.budget:
                            engine.wait_for_room(self)
                            break
                        if self.starting() == 0:
                            break
                        cap, ahead = window.plan.window_bytes, window.ahead
                        if cap is not None and ahead and ahead + window.plan.range_bytes > cap:
                            continue
                        window._request()
                    if not self.again:
                        break
                self._next_fill()
            finally:
                self.filling = False
        self.start()
        if wake and ENGINE.waiting:
            ENGINE.wake()

    def _next_fill(self) -> None:
        """What ``consumed`` must reach for the start-up bound to allow another range (under the lock)."""
        if self._started():
            self.next_fill = 1 << 62
            return
        plan = self.plan  # the least consumed c with 4c + first_range - asked >= the step
        self.next_fill = min(plan.ramp, -(-(self._step() + self.asked - plan.first_range) // 4))

    def start(self) -> None:
        """Hand the ranges booked so far to the pool (called without the lock held)."""
        with self.lock:
            jobs, self.jobs = self.jobs, []
        if jobs:
            start_jobs(jobs)

    def adopt(self, window: RangeWindow, first: bool) -> None:
        """Serve ``window`` from now on: first (the shard being read) or after the others (a shard ahead)."""
        with self.lock:
            old = window.allowance
            if window in old.windows:
                old.windows.remove(window)
            if old is not self:
                moved = [length for _, length, _, _ in window.pending]
                old.pending -= len(moved)
                old.held -= sum(moved)
                old.running -= window.running
                self.pending += len(moved)
                self.held += sum(moved)
                self.running += window.running
                window.allowance = self
            window.reading = window.reading or first
            if not window.cancelled and not window.exhausted:
                self.windows.insert(0, window) if first else self.windows.append(window)


class RangeWindow:
    """The ranges of one object requested ahead of its reader, from ``start``.

    ``fetch(start, length)`` returns the bytes (fewer only at the end of the
    object); ``known()`` the object's size (``None`` while it is not known) and
    ``lookup()`` asks for it.  :meth:`take` returns the range at the reader's
    position, waiting for it, and requests more; :meth:`prime` requests the
    first ranges before the reader comes (a shard ahead of the one being read).
    The windows of one reader share an :class:`Allowance` (one of its own
    otherwise).
    """

    def __init__(
        self,
        fetch: Callable[[int, int], bytes | bytearray],
        known: Callable[[], int | None],
        lookup: Callable[[], int | None],
        start: int,
        plan: ReadAhead,
        count: Callable[[str], None] = lambda what: None,
        allowance: Allowance | None = None,
        sizes_in_ranges: bool = False,
        hint: Callable[[int, int], int | None] | None = None,
    ) -> None:
        self.fetch, self.known, self.lookup, self.plan = fetch, known, lookup, plan
        self.hint = hint  # the range size that keeps a connection busy, once measured (links.Link.target)
        self.primed = False  # asked for before its reader came to it (a shard ahead)
        self.reading = False  # the shard its reader reads (served first)
        self.sizes_in_ranges = sizes_in_ranges  # the first range's answer says the size: never asked for apart
        self.count = count  # count("hedged") for each range asked for twice
        self.took: deque[float] = deque(maxlen=16)  # seconds the last ranges took, for what a straggler is
        self.next = start  # offset of the next range to request
        self.first = True  # the next range is the first after an open or a seek
        self.pending: deque[tuple[int, int, Future, float]] = deque()  # start, length, request, when asked
        self.size_lookup: Future | None = None  # the size, asked for once the first range arrived (or when primed)
        self.cancelled = False
        self.exhausted = False  # every range is requested
        self.running = 0  # ranges requested and not yet answered
        self.ahead = 0  # bytes requested and not yet taken (plan.window_bytes caps it)
        self.allowance = allowance or Allowance(plan)
        with self.allowance.lock:
            self.allowance.windows.append(self)

    @property
    def lock(self) -> Any:
        return BOOKKEEPING

    def _request(self, needed: bool = False) -> None:
        """Request ranges while the allowance allows (under the lock); one more when the reader ``needed`` it and
        the shards ahead hold every connection of the allowance (the budget is then passed by one range)."""
        size = self.known()
        allowance = self.allowance
        while (
            not self.cancelled
            and not ENGINE.exiting
            and ((allowance.room() and not self.full()) or (needed and not self.pending))
        ):
            if size is None and not self._may_guess():
                return  # one range until the size is known (asking past the end is an error on some stores)
            if size is not None and self.next >= size:
                break
            if size is not None:
                allowance.typical = size
            length = self._length(size, allowance.starting(), needed)
            self.first = False
            asked = time.monotonic()
            request: Future = Future()  # handed to the pool once the lock is released (Allowance.start)
            allowance.jobs.append((request, self.fetch, self.next, length))
            self.pending.append((self.next, length, request, asked))
            self.next += length
            self.ahead += length
            allowance.held += length
            allowance.asked += length
            allowance.pending += 1
            allowance.running += 1
            self.running += 1
            request.add_done_callback(functools.partial(self._timed, asked))
        if size is not None and self.next >= size:
            self._done_requesting()

    def _length(self, size: int | None, starting: int | None, needed: bool) -> int:
        """The next range's length: the first after an open or a seek small (the first sample after one round
        trip), unless the shard is one ahead and the connection is timed; else the size that keeps a connection
        busy, the rest of the shard cut in equal parts of about that; while the reader starts, within what it
        may still ask for (see :class:`ReadAhead`)."""
        plan = self.plan
        # a shard asked for ahead grows its ranges; one its reader waits for comes in ranges of range_bytes, several
        # at once, so that its first bytes arrive soon
        ahead = self.primed and not self.reading
        grown = self.hint(plan.range_bytes, plan.max_range) if self.hint is not None and ahead else None
        target = grown or plan.range_bytes
        if self.first and not (self.allowance.consumed > 0 and target > plan.range_bytes):
            length = plan.first_range
        elif target <= plan.range_bytes or (size is None and not self._guess()):
            length = target
        else:  # grown: the rest in equal parts of about the target, no short last range
            rest = (size if size is not None else self._guess()) - self.next
            length = -(-rest // -(-rest // target)) if rest > 0 else target
        if starting is not None:
            length = min(length, max(starting, plan.first_range))
        if size is not None:
            length = min(length, size - self.next)
        return max(length, 1)

    def _guess(self) -> int:
        """What this shard's size may be while unknown: the size of the reader's last shard, where asking past
        an object's end is harmless (a range's answer says the size: HTTP(S), S3); ``0``: no guess."""
        return self.allowance.typical if self.sizes_in_ranges and self.hint is not None else 0

    def full(self) -> bool:
        """Whether another range would pass ``plan.window_bytes`` (one range may always be requested)."""
        cap = self.plan.window_bytes
        return cap is not None and self.ahead > 0 and self.ahead + self.plan.range_bytes > cap

    def _may_guess(self) -> bool:
        """Whether a range may be requested while the size is unknown: the first one, the next one once the
        size was asked for and the store did not say it (one at a time, under the lock), or, in a shard ahead,
        any up to the size the reader's last shard had."""
        guess = self._guess()
        if guess and self.next < guess and self.primed and not self.first:
            return True
        if self.pending:
            return False
        lookup = self.size_lookup
        return self.first or (lookup is not None and lookup.done())

    def _done_requesting(self) -> None:
        """Every range is requested: the windows after this one get what is free (under the lock)."""
        self.exhausted = True
        if self in self.allowance.windows:
            self.allowance.windows.remove(self)

    def prime(self, size_too: bool = True) -> None:
        """Request the first ranges as the allowance allows; the size, when unknown, is asked for beside them
        (``size_too``, unless the first range's answer will say it) and the window filled from the pool once it
        is known."""
        self.primed = True
        self.allowance.fill()
        with self.lock:
            if size_too and self.known() is None and self.size_lookup is None and not self.sizes_in_ranges:
                self.size_lookup = io_pool().submit(self._learn_and_fill)

    def _learn_and_fill(self) -> None:
        self.lookup()
        self.allowance.fill()

    def take(self, position: int) -> bytes | bytearray:
        """The range that starts at ``position`` (``b""`` at the end of the object)."""
        self.reading = True
        with self.lock:
            if self.pending and self.pending[0][0] != position:  # pragma: no cover - a seek makes a new window
                raise AssertionError(f"the window is at {self.pending[0][0]}, the reader at {position}")
            empty = not self.pending
            if empty:
                self.next = position
                if not self.cancelled and self not in self.allowance.windows:
                    self.exhausted = False
                    self.allowance.windows.insert(0, self)
        if empty:
            self._open()
        with self.lock:
            if not self.pending:
                self._request(needed=True)
            if not self.pending:
                return b""
        self.allowance.start()
        with self.lock:
            start, length, future, asked = self.pending.popleft()
            self.ahead -= length
            self.allowance.held -= length
            self.allowance.pending -= 1
        data = self._wait(start, length, future, asked)
        if len(data) < length:  # the object ends here: what was asked after it is not there
            self.cancel()
            with self.lock:
                self.next = start + len(data)
            self.allowance.fill()
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
        """Request what the allowance allows, once the size asked for (if it is) is known."""
        with self.lock:
            lookup = self.size_lookup if self.known() is None else None
        if lookup is not None:
            lookup.result()
        self.allowance.fill()

    def _timed(self, asked: float, request: Future) -> None:
        """A range is answered (or cancelled): its connection is free for the next one the allowance allows."""
        if not request.cancelled() and request.exception() is None:
            self.took.append(time.monotonic() - asked)
        with self.lock:
            self.allowance.running -= 1
            self.running -= 1
        self.allowance.fill()

    def _wait(self, start: int, length: int, request: Future, asked: float) -> bytes | bytearray:
        """The bytes of ``request``; asked for again when it straggles (see :class:`ReadAhead`), first answer wins."""
        after = self.plan.hedge_after
        if after is not None and len(self.took) >= 4 and not request.done() and THROTTLE.calm():  # (not while
            # the store is asking for fewer requests)
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
            allowance = self.allowance
            for _, length, future, _ in self.pending:
                future.cancel()
                allowance.held -= length
                allowance.pending -= 1
                allowance.asked -= length
            self.pending.clear()
            self.ahead = 0
            if self in allowance.windows:
                allowance.windows.remove(self)
            if self.size_lookup is not None:
                self.size_lookup.cancel()
