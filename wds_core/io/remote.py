"""Reading remote shards through fsspec with ranged reads that resume where they failed.

:func:`open_remote` asks the backend for the object's size, then returns a
:class:`RangeStream`: the object is read as consecutive byte ranges (one range
ahead is fetched in the background while the reader parses the current one).
A transient failure (connection reset or cut mid-range, timeout, HTTP 408/429/5xx,
a range shorter than asked) re-requests the *same* range after a backoff, so
every byte is delivered exactly once.  When the retry budget is spent the error
names the URL and the byte offset, never a credential.  A shard that fits in
the first range costs one request; the size of a larger one is looked up
while its second range is fetched.
"""

from __future__ import annotations

import inspect
import io
import logging
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..errors import ShardNotFoundError, ShardOpenError, WdsError, redact, redact_url
from .streams import ReadStream

__all__ = ["RangeStream", "RetryPolicy", "connect", "open_remote", "retry_stats"]

_INSTALL_HINTS = {"s3": "wds[s3]", "s3a": "wds[s3]", "gs": "wds[gcs]", "gcs": "wds[gcs]", "http": "wds[http]"}
_INSTALL_HINTS["https"] = "wds[http]"
_TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}
_BOTOCORE_TRANSIENT = {
    "ConnectionError",
    "HTTPClientError",
    "ReadTimeoutError",
    "ConnectTimeoutError",
    "ResponseStreamingError",
    "IncompleteReadError",
}


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failing request is repeated.

    ``attempts`` counts every try of one request (the first included); the
    delay before retry ``n`` is ``initial_delay * 2**n``, at most ``max_delay``.
    These are the only retries: the S3 backend's own (botocore's and s3fs')
    are turned off for the shards wds reads, unless the storage options set
    ``config_kwargs={"retries": ...}`` themselves.

    ``budget`` (seconds, optional) bounds a request end to end: each attempt is
    given the time left (it is cut off when that runs out, whatever the backend
    does inside it: gcsfs retries within an attempt and cannot be told not to),
    and no retry starts once the budget would be passed.
    """

    attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 10.0
    budget: float | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.initial_delay < 0 or self.max_delay < 0:
            raise ValueError("retry delays must be >= 0")
        if self.budget is not None and self.budget < 0:
            raise ValueError("the retry budget must be >= 0 seconds")

    def delay(self, retry: int) -> float:
        return min(self.max_delay, self.initial_delay * (2**retry))


DEFAULT_RETRY = RetryPolicy()


def is_transient(exn: BaseException) -> bool:
    """Whether repeating the request that raised ``exn`` may succeed."""
    if isinstance(exn, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, WdsError)):
        return False
    status = getattr(exn, "status", None) or getattr(exn, "code", None)
    if isinstance(status, int) and 100 <= status < 600:
        return status in _TRANSIENT_STATUS
    if isinstance(exn, (OSError, TimeoutError, _ShortRead)):
        return True
    names = {cls.__name__ for cls in type(exn).__mro__}
    package = type(exn).__module__.split(".")[0]
    if package == "botocore":  # connection trouble is transient; missing credentials or bad parameters are not
        return bool(names & _BOTOCORE_TRANSIENT)
    if package in ("aiohttp", "urllib3", "requests"):
        return not names & {"InvalidURL", "InvalidUrlClientError", "LocationParseError", "MissingSchema"}
    return False


class _ShortRead(Exception):
    pass


def describe_error(exn: BaseException) -> str:
    """``exn``'s type and message, with credentials hidden."""
    return redact(f"{type(exn).__name__}: {exn}")


RETRIES: Counter[str] = Counter()  # in this process: "retries" made, requests "recovered", "gave_up"
_log = logging.getLogger("wds_core.io")
_LOG_EVERY = 5.0  # seconds between retry messages; the ones in between are counted in the next
_said = {"at": -_LOG_EVERY, "quiet": 0}
_said_lock = threading.Lock()


_count_lock = threading.Lock()


def retry_stats() -> dict[str, int]:
    """Retries made in this process, requests that succeeded after retrying, and requests given up."""
    return {key: RETRIES[key] for key in ("retries", "recovered", "gave_up")}


def _count(key: str, stats: Counter[str] | None) -> None:
    """One more ``key`` in this process's counts and in ``stats`` (a reading stage's), from any thread."""
    with _count_lock:
        RETRIES[key] += 1
        if stats is not None:
            stats[key] += 1


def _say_retry(what: str, url: str, attempt: int, policy: RetryPolicy, exn: BaseException, delay: float) -> None:
    with _said_lock:
        now = time.monotonic()
        if now - _said["at"] < _LOG_EVERY:
            _said["quiet"] += 1
            return
        quiet, _said["quiet"], _said["at"] = _said["quiet"], 0, now
    more = f" ({quiet} more retries since the last message)" if quiet else ""
    _log.warning(
        "retrying %s of %s in %.1f s (attempt %d of %d): %s%s",
        what, redact_url(url), delay, attempt + 2, policy.attempts, describe_error(exn), more,
    )  # fmt: skip


def _with_retries(
    what: str, call: Any, url: str, offset: int | None, policy: RetryPolicy, stats: Counter[str] | None = None
) -> Any:
    """``call(timeout)``, repeated after transient failures; the last failure becomes a ShardOpenError.

    ``timeout`` is the time left of ``policy.budget`` (``None`` without one): the attempt must end by then.
    Each retry is counted (:func:`retry_stats` and ``stats``) and logged (``wds_core.io``, at most one
    message every few seconds).
    """
    started = time.monotonic()
    for attempt in range(policy.attempts):
        tried = time.monotonic()
        left = None if policy.budget is None else max(policy.budget - (tried - started), 0.001)
        try:
            result = call(left)
        except FileNotFoundError:
            raise ShardNotFoundError("shard not found", url=url) from None
        except Exception as exn:
            if not is_transient(exn):
                raise ShardOpenError(f"cannot {what}: {describe_error(exn)}", url=url, offset=offset) from None
            delay = policy.delay(attempt)
            spent = time.monotonic() - started
            over = policy.budget is not None and spent + delay > policy.budget
            if attempt + 1 == policy.attempts or over:
                _count("gave_up", stats)
                tries = f"{attempt + 1} attempt{'s' if attempt else ''} in {spent:.1f} s" + (
                    f" (the retry budget is {policy.budget:g} s)" if over else ""
                )
                last = describe_error(exn)
                if left is not None and isinstance(exn, TimeoutError) and time.monotonic() - tried >= left:
                    last = f"the attempt was cut off after the {left:.1f} s left of the budget ({type(exn).__name__})"
                message = f"cannot {what} after {tries}; last error {last}"
                raise ShardOpenError(message, url=url, offset=offset) from None
            _count("retries", stats)
            _say_retry(what, url, attempt, policy, exn, delay)
            time.sleep(delay)
        else:
            if attempt:
                _count("recovered", stats)
            return result
    raise AssertionError("unreachable")  # pragma: no cover


def filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem and path for ``url``; a missing backend names its install command."""
    import fsspec

    protocol = url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exn:
        hint = _INSTALL_HINTS.get(protocol)
        extra = f'; install it with pip install "{hint}"' if hint else ""
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
        if left is None:
            return make(url, options)
        done: dict[str, Any] = {}

        def run() -> None:
            try:
                done["result"] = make(url, options)
            except BaseException as exn:  # noqa: BLE001 - handed to the caller's thread
                done["error"] = exn

        worker = threading.Thread(target=run, daemon=True, name="wds-connect")
        worker.start()
        worker.join(left)
        if worker.is_alive():
            raise TimeoutError(f"connecting took more than the {left:.1f} s left of the budget")
        if "error" in done:
            raise done["error"]
        return done["result"]

    return _with_retries("connect to the store", attempt, url, None, retry, stats)


def _within(method: Any, left: float | None) -> dict[str, Any]:
    """Keyword arguments that cut a call of ``method`` off after ``left`` seconds, when it can be.

    fsspec runs an async backend's coroutine for its blocking methods and accepts ``timeout=`` there
    (cancelling the coroutine, retries and all); other methods run as they are.
    """
    if left is None or not inspect.iscoroutinefunction(getattr(method, "__wrapped__", None)):
        return {}
    return {"timeout": left}


def open_remote(
    url: str,
    options: dict[str, Any],
    retry: RetryPolicy = DEFAULT_RETRY,
    chunk_size: int = 32 << 20,
    max_chunk_size: int = 32 << 20,
    stats: Counter[str] | None = None,
) -> BinaryIO:
    """Open a remote shard for reading (see the module doc).

    The first range is ``chunk_size`` bytes; each following range doubles up
    to ``max_chunk_size``: few requests per shard (each costs a round trip and,
    on some servers, more), and at most two ranges in memory.  Nothing is
    requested before the first read.  Retries are counted in ``stats`` too (a reading stage's).
    """
    fs, path = connect(url, options, retry, stats)
    stream = RangeStream(fs, path, url, None, retry, chunk_size, max_chunk_size, stats)
    return stream  # type: ignore[return-value]


class RangeStream(ReadStream):
    """A remote object read by consecutive ranges, one range prefetched.

    ``size`` may be ``None``: a shard that fits in the first range then costs a
    single request (a range shorter than asked for ends the object); for a
    larger one, the size is looked up while the second range is fetched.
    Seekable: a seek drops the buffered range and the next read starts a new
    range at the new position (restoring a checkpoint inside a shard).
    """

    def __init__(
        self,
        fs: Any,
        path: str,
        url: str,
        size: int | None,
        retry: RetryPolicy,
        chunk_size: int = 4 << 20,
        max_chunk_size: int | None = None,
        stats: Counter[str] | None = None,
    ) -> None:
        super().__init__()
        self.fs, self.path, self.url, self.size = fs, path, url, size
        self.stats = stats
        self.retry, self.first_chunk_size = retry, chunk_size
        self.max_chunk_size = max(chunk_size, max_chunk_size or chunk_size)
        self.chunk_size = chunk_size  # of the next range; grows after each one
        self._pos = 0  # offset of the next byte read() returns
        self._buffer = memoryview(b"")
        self._buffer_end = 0  # object offset just after the buffer
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[int, Future] | None = None

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
            self.chunk_size = self.first_chunk_size
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
        info_of = self.fs.info
        info = _with_retries(
            "look up the shard", lambda left: info_of(self.path, **_within(info_of, left)), self.url, None, self.retry,
            self.stats,
        )  # fmt: skip
        if info.get("type") == "directory":
            raise ShardOpenError("the URL names a directory, not a shard", url=self.url)
        size = info.get("size")
        return None if size is None else int(size)

    def _fetch(self, start: int, length: int) -> bytes:
        known = self.size
        if known is not None and start >= known:
            return b""
        end = start + length if known is None else min(known, start + length)
        learned: list[int] = []

        cat = self.fs.cat_file

        def get(left: float | None) -> bytes:
            data = cat(self.path, start=start, end=end, **_within(cat, left))
            if len(data) == end - start:
                return data
            if known is None and len(data) < end - start:
                learned.append(start + len(data))  # a complete response that stops early: the object ends here
                return data
            if len(data) > end - start and (known is None or len(data) == known):
                learned.append(len(data))  # the server ignored the Range header and sent the whole object
                return data[start:end]
            raise _ShortRead(f"asked for bytes {start}-{end}, got {len(data)} bytes")

        what = f"read bytes {start}-{end}" + (f" of {known}" if known is not None else "")
        data = _with_retries(what, get, self.url, start, self.retry, self.stats)
        if known is None:
            self.size = learned[0] if learned else self._lookup_size()
        return data

    def _next_range(self, start: int) -> bytes:
        ahead, self._ahead = self._ahead, None
        data = ahead[1].result() if ahead is not None and ahead[0] == start else self._fetch(start, self.chunk_size)
        following = start + len(data)
        if data and (self.size is None or following < self.size):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="wds-range")
            self.chunk_size = min(self.max_chunk_size, self.chunk_size * 2)
            self._ahead = (following, self._pool.submit(self._fetch, following, self.chunk_size))
        return data

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = sys.maxsize
        out = []
        while size > 0 and (self.size is None or self._pos < self.size):
            if not self._buffer:
                data = self._next_range(self._pos)
                if not data:
                    break
                self._buffer, self._buffer_end = memoryview(data), self._pos + len(data)
            piece = self._buffer[:size]
            self._buffer = self._buffer[len(piece) :]
            self._pos += len(piece)
            size -= len(piece)
            out.append(piece)
        if len(out) == 1:
            whole = out[0].obj
            return whole if len(out[0]) == len(whole) else out[0].tobytes()  # type: ignore[arg-type, return-value]
        return b"".join(out)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._ahead = None
        self._buffer = memoryview(b"")
        super().close()

    def __repr__(self) -> str:
        return f"RangeStream({redact_url(self.url)!r}, size={self.size})"
