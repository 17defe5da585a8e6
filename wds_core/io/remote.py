"""Reading remote shards by ranged reads that resume where they failed (the retries: :mod:`~wds_core.io.retries`).

:func:`open_remote` returns a :class:`RangeStream`: the object is read as
consecutive byte ranges (:func:`range_source`: straight from the I/O pool's
threads for HTTP(S) and S3, else through fsspec), several requested at once while the reader parses
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
from typing import Any, BinaryIO

from ..errors import ShardOpenError, install_hint, redact_url
from .direct import FsspecSource, RangeSource, http_source
from .readahead import READ_AHEAD, Allowance, RangeWindow, ReadAhead
from .retries import (
    DEFAULT_RETRY,
    RetryPolicy,
    ShortRead,
    count,
    cut_off,
    describe_error,
    is_transient,
    retry_stats,
    with_retries,
)
from .streams import ReadStream

__all__ = ["RangeStream", "connect", "direct_source", "open_remote", "range_source", "reading_filesystem"]
# retries.py's names, where they were before it was split out
__all__ += ["DEFAULT_RETRY", "RetryPolicy", "describe_error", "is_transient", "retry_stats", "with_retries"]

# the packages a scheme's fsspec backend needs, and the extra that brings them
_INSTALL_HINTS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs")}
_INSTALL_HINTS.update(http=("aiohttp", "http"), https=("aiohttp", "http"))


def filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem and path for ``url``; a missing backend names its install command."""
    import fsspec

    protocol = url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exn:
        hint = _INSTALL_HINTS.get(protocol)
        extra = f"; install it with {install_hint(*hint)}" if hint else ""
        raise ShardOpenError(f"no storage backend for {protocol}:// URLs ({exn}){extra}", url=url) from None
    try:
        return fsspec.core.url_to_fs(url, **options)
    except (TypeError, ValueError, ImportError) as exn:
        raise ShardOpenError(f"cannot set up storage for this URL: {describe_error(exn)}", url=url) from None


def reading_filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """:func:`filesystem` for reading shards: the S3 backend's own retries off (the policy's are the only ones),
    unless ``options`` set ``config_kwargs={"retries": ...}``."""
    own = url.split("://", 1)[0] in ("s3", "s3a") and "retries" not in (options.get("config_kwargs") or {})
    if own:
        config = {**(options.get("config_kwargs") or {}), "retries": {"total_max_attempts": 1}}
        options = {**options, "config_kwargs": config}
    fs, path = filesystem(url, options)
    if own and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1  # s3fs's retry loop; this instance is wds's (its options differ from any other's)
    return fs, path


def connect(
    url: str, options: dict[str, Any], retry: RetryPolicy, stats: Counter[str] | None = None, reading: bool = True
) -> tuple[Any, str]:
    """:func:`reading_filesystem` (or :func:`filesystem`) of ``url``, made as a request of the retry policy.

    Some backends connect when they are made (``ftp://``, ``sftp://``): a
    server that does not answer is then retried like any request, and with a
    ``budget`` the attempt is given up when the budget is spent (it runs in a
    thread that is left to the backend's own timeout), as a
    :class:`ShardOpenError` naming the URL.
    """
    make = reading_filesystem if reading else filesystem

    def attempt(left: float | None) -> tuple[Any, str]:
        return cut_off(lambda: make(url, options), left, "connecting")  # type: ignore[no-any-return]

    return with_retries("connect to the store", attempt, url, None, retry, stats)


def open_remote(
    url: str,
    options: dict[str, Any],
    retry: RetryPolicy = DEFAULT_RETRY,
    read_ahead: ReadAhead = READ_AHEAD,
    stats: Counter[str] | None = None,
) -> BinaryIO:
    """Open a remote shard for reading (see the module doc).

    ``read_ahead`` says how many ranges of what size are requested at once
    (:class:`~wds_core.io.readahead.ReadAhead`): a small first range, so that
    parsing starts after one round trip, then several larger ones in flight.
    Nothing is requested before the first read.  Retries are counted in
    ``stats`` too (a reading stage's).
    """
    stream = RangeStream(range_source(url, options, retry, stats), url, None, retry, read_ahead, stats)
    return stream  # type: ignore[return-value]


def range_source(
    url: str, options: dict[str, Any], retry: RetryPolicy, stats: Counter[str] | None = None
) -> RangeSource:
    """How ``url``'s ranges are requested: straight from the I/O pool's threads for HTTP(S) and S3
    (:mod:`~wds_core.io.direct`), else through its fsspec filesystem (made with :func:`connect`)."""
    source = direct_source(url, options, retry)
    if source is not None:
        return source
    fs, path = connect(url, options, retry, stats)
    return FsspecSource(fs, path, retry)


def direct_source(url: str, options: dict[str, Any], retry: RetryPolicy) -> RangeSource | None:
    """The source that reads ``url`` without fsspec's event loop (:mod:`~wds_core.io.direct`), or ``None`` when
    fsspec should: another scheme, an option only fsspec's backend knows, or a retry budget on S3."""
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("http", "https"):
        return http_source(url, options, retry)
    if scheme in ("s3", "s3a") and retry.budget is None:
        from .s3direct import s3_source

        return s3_source(url, options, retry)
    return None


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

    def object_size(self) -> int | None:
        """The object's size in bytes, looked up when not known yet (``None`` when the server does not say)."""
        if self.size is None:
            self.size = self._lookup_size()
        return self.size

    def read_range(self, start: int, length: int) -> bytes:
        """``length`` bytes at ``start`` (fewer only at the end of the object), with retries; the stream
        position and its buffered ranges are left alone."""
        return self._fetch(start, length)

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

    def _fetch(self, start: int, length: int) -> bytes:
        known = self.size
        if known is not None and start >= known:
            return b""
        end = start + length if known is None else min(known, start + length)
        learned: list[int] = []

        def get(left: float | None) -> bytes:
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

    def _next_range(self, start: int) -> bytes:
        return self._window_at(start).take(start)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = sys.maxsize
        out = []
        while size > 0 and (self._buffer or self._refill()):
            piece = self._buffer[:size]
            self._buffer = self._buffer[len(piece) :]
            self._pos += len(piece)
            size -= len(piece)
            out.append(piece)
        if len(out) == 1:
            whole = out[0].obj
            return whole if len(out[0]) == len(whole) else out[0].tobytes()  # type: ignore[arg-type, return-value]
        return b"".join(out)

    def _window_at(self, start: int) -> RangeWindow:
        if self._window is None:
            sized = getattr(self.source, "sizes_in_ranges", False)
            self._window = RangeWindow(
                self._fetch, lambda: self.size, self._learn_size, start, self.read_ahead, self._count, self._allowance,
                sized,
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
