"""Reading remote shards by ranged reads that resume where they failed (the retries: :mod:`~wds_core.io.retries`).

:func:`open_remote` returns a :class:`RangeStream`: the object is read as
consecutive byte ranges (requested by the object's backend's :class:`RangeSource`: straight from the I/O
pool's threads for HTTP(S) and S3, else through fsspec; :mod:`~wds_core.io.backends`), several requested at
once while the reader parses
the current one (:mod:`~wds_core.io.readahead`), the first a small one so that
parsing starts after one round trip, with the object's size looked up beside
it.  A transient failure (connection reset or cut mid-range, timeout, HTTP
408/429/5xx, a range shorter than asked) re-requests the *same* range after a
backoff, so every byte is delivered exactly once.  When the retry budget is
spent the error names the URL and the byte offset, never a credential.
"""

from __future__ import annotations

import io
import sys
from collections import Counter
from typing import Any, BinaryIO, Protocol

from ...errors import ShardOpenError, redact_url
from ..streams import ReadStream
from .engine import ENGINE
from .readahead import READ_AHEAD, Allowance, RangeWindow, ReadAhead
from .retries import (
    DEFAULT_RETRY,
    RetryPolicy,
    ShortRead,
    count,
    describe_error,
    is_transient,
    retry_stats,
    with_retries,
)

__all__ = ["RangeSource", "RangeStream", "open_remote"]
# retries.py's names, where they were before it was split out
__all__ += ["DEFAULT_RETRY", "RetryPolicy", "describe_error", "is_transient", "retry_stats", "with_retries"]


class RangeSource(Protocol):
    """How an object's ranges are requested: a backend makes one for each object it opens
    (:meth:`~wds_core.io.backends.ranged.RangedBackend.source`)."""

    sizes_in_ranges: bool  # a range's answer says the object's size (no separate request needed for it)

    def get(self, start: int, end: int, left: float | None) -> tuple[bytes | bytearray, int | None]:
        """Bytes ``[start, end)`` and the object's size if the response said it, within ``left`` seconds."""
        ...

    def info(self, left: float | None) -> dict[str, Any]:
        """``{"size": ..., "type": "file" | "directory"}`` of the object."""
        ...


def open_remote(
    source: RangeSource,
    url: str,
    retry: RetryPolicy = DEFAULT_RETRY,
    read_ahead: ReadAhead = READ_AHEAD,
    stats: Counter[str] | None = None,
) -> BinaryIO:
    """Read the remote object ``url`` (whose ranges ``source`` requests) as a stream (see the module doc).

    ``read_ahead`` says how many ranges of what size are requested at once
    (:class:`~wds_core.io.readahead.ReadAhead`): a small first range, so that
    parsing starts after one round trip, then several larger ones in flight.
    Nothing is requested before the first read.  Retries are counted in
    ``stats`` too (a reading stage's).
    """
    stream = RangeStream(source, url, None, retry, read_ahead, stats)
    return stream  # type: ignore[return-value]


class RangeStream(ReadStream):
    """A remote object read by consecutive ranges, several requested ahead (:mod:`~wds_core.io.readahead`).

    ``size`` may be ``None``: it is then looked up beside the first range (a
    range shorter than asked for ends the object).  Seekable: a seek drops the
    ranges requested ahead and the next read starts a new window at the new
    position (restoring a checkpoint inside a shard asks for that offset first).
    """

    def __init__(
        self,
        source: RangeSource,
        url: str,
        size: int | None,
        retry: RetryPolicy,
        read_ahead: ReadAhead = READ_AHEAD,
        stats: Counter[str] | None = None,
    ) -> None:
        super().__init__()
        self.source, self.url, self.size = source, url, size
        self.stats = stats
        self.retry, self.read_ahead = retry, read_ahead
        self._pos = 0  # offset of the next byte read() returns
        self._buffer = memoryview(b"")
        self._buffer_end = 0  # object offset just after the buffer
        self._window: RangeWindow | None = None
        self._allowance: Allowance | None = None  # a reader's, shared with its shards ahead
        self._first = False  # served before the other windows of the allowance (the shard being read)

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END and self.size is None:
            self.size = self._lookup_size()
            if self.size is None:
                raise io.UnsupportedOperation(f"{redact_url(self.url)}: the server does not report the size")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size or 0}[whence]
        target = max(0, base + offset)
        start = self._buffer_end - len(self._buffer)
        if start <= target <= self._buffer_end:
            self._buffer = self._buffer[target - start :]
        else:
            self._buffer, self._buffer_end = memoryview(b""), target
            if self._window is not None:
                self._window.cancel()
                self._window = None
        self._pos = target
        return target

    def version(self) -> str | None:
        """What identifies the object's bytes, once a range of it has come: its ETag (or Last-Modified), as its
        source pinned it; ``None`` when the store says neither."""
        version = getattr(self.source, "version", None)
        return version() if callable(version) else None

    def object_size(self) -> int | None:
        """The object's size in bytes, looked up when not known yet (``None`` when the server does not say)."""
        if self.size is None:
            self.size = self._lookup_size()
        return self.size

    def read_range(self, start: int, length: int) -> bytes:
        """``length`` bytes at ``start`` (fewer only at the end of the object), with retries; the stream
        position and its buffered ranges are left alone.  A read asked for now (indexed access), not ahead: it
        never waits for the engine's budget, which counts its bytes while it runs."""
        ENGINE.hold(length)
        try:
            data = self._fetch(start, length)
            return data if isinstance(data, bytes) else bytes(data)
        finally:
            ENGINE.release(length)

    def _lookup_size(self) -> int | None:
        info = with_retries("look up the shard", self.source.info, self.url, None, self.retry, self.stats)
        if info.get("type") == "directory":
            raise ShardOpenError("the URL names a directory, not a shard", url=self.url)
        size = info.get("size")
        return None if size is None else int(size)

    def _learn_size(self) -> int | None:
        if self.size is None:
            self.size = self._lookup_size()
        return self.size

    def _fetch(self, start: int, length: int) -> bytes | bytearray:
        known = self.size
        if known is not None and start >= known:
            return b""
        end = start + length if known is None else min(known, start + length)
        learned: list[int] = []

        def get(left: float | None) -> bytes | bytearray:
            data, total = self.source.get(start, end, left)
            if known is None and total is not None:  # the response said the size (Content-Range)
                learned.append(total)
                if len(data) == max(0, min(end, total) - start):
                    return data
                raise ShortRead(f"asked for bytes {start}-{end} of {total}, got {len(data)} bytes")
            if len(data) == end - start:
                return data
            if known is None and len(data) < end - start:
                learned.append(start + len(data))  # a complete response that stops early: the object ends here
                return data
            if len(data) > end - start and (known is None or len(data) == known):
                learned.append(len(data))  # the server ignored the Range header and sent the whole object
                return data[start:end]
            raise ShortRead(f"asked for bytes {start}-{end}, got {len(data)} bytes")

        what = f"read bytes {start}-{end}" + (f" of {known}" if known is not None else "")
        data = with_retries(what, get, self.url, start, self.retry, self.stats, lambda: self.closed)
        if known is None and learned:
            self.size = learned[0]  # else the window asks for it once its first range is here
        return data

    def _next_range(self, start: int) -> bytes | bytearray:
        return self._window_at(start).take(start)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = sys.maxsize
        out, start = [], self._pos
        while size > 0 and (self._buffer or self._refill()):
            piece = self._buffer[:size]
            self._buffer = self._buffer[len(piece) :]
            self._pos += len(piece)
            size -= len(piece)
            out.append(piece)
        if self._window is not None:
            self._window.allowance.consume(self._pos - start)
        if len(out) == 1:
            whole = out[0].obj  # a range read whole is handed out as it is (a large one comes as a bytearray)
            if isinstance(whole, bytes) and len(out[0]) == len(whole):
                return whole
            return out[0].tobytes()
        return b"".join(out)

    def _window_at(self, start: int) -> RangeWindow:
        if self._window is None:
            sized = getattr(self.source, "sizes_in_ranges", False)
            self._window = RangeWindow(
                self._fetch, lambda: self.size, self._learn_size, start, self.read_ahead, self._count, self._allowance,
                sized, getattr(self.source, "range_hint", None),
            )  # fmt: skip
            if self._first:
                self._window.allowance.adopt(self._window, first=True)
        return self._window

    def _count(self, what: str) -> None:
        count(what, self.stats)

    def prefetch(self, size_too: bool = True) -> None:
        """Request the first ranges now, before the first read (the reader is still on the shard before); the size
        beside them unless not ``size_too`` (the shard about to be read asks for it once its first range is here,
        when the answer did not say it)."""
        if self._pos == 0 and not self._buffer:
            self._window_at(0).prime(size_too)

    def attach(self, allowance: Allowance, first: bool) -> None:
        """Request ranges within ``allowance``, a reader's, shared with the other shards it requests: ``first`` for
        the shard it reads (served before the others), else a shard ahead (served in the order attached)."""
        self._allowance, self._first = allowance, first
        if self._window is not None:
            allowance.adopt(self._window, first)

    def _refill(self) -> bool:
        """The range at the position into the (empty) buffer; ``False`` at the end of the object."""
        if self.size is not None and self._pos >= self.size:
            return False
        data = self._next_range(self._pos)
        self._buffer, self._buffer_end = memoryview(data), self._pos + len(data)
        return bool(data)

    def peek(self, size: int) -> bytes:
        """Up to ``size`` bytes at the position, without moving it (the first range is fetched if needed)."""
        if not self._buffer:
            self._refill()
        return self._buffer[:size].tobytes()

    def read_arrived(self, size: int) -> bytes:
        """At most ``size`` bytes of what has arrived: the rest of the current range, or the next range once it is
        here (``b""`` at the end); never waits for more than one range, so a reader parses as ranges arrive."""
        if not self._buffer and not self._refill():
            return b""
        piece = self._buffer[:size]
        self._buffer = self._buffer[len(piece) :]
        self._pos += len(piece)
        if self._window is not None:
            self._window.allowance.consume(len(piece))
        return piece.tobytes()

    def close(self) -> None:
        if self._window is not None:
            self._window.cancel()
            self._window = None
        was_open = not self.closed
        self._buffer = memoryview(b"")
        super().close()  # closed first: the ranges stopped below are not retried
        closer = getattr(self.source, "close", None)  # ranges under way end now, not in the background
        if closer is not None and was_open:
            closer()

    def __repr__(self) -> str:
        return f"RangeStream({redact_url(self.url)!r}, size={self.size})"
