"""The only place where shard bytes are opened.

``open_shard(url)`` returns a binary stream for

* a local path or ``file://`` URL (unbuffered: readers ask for large blocks),
* ``-`` for standard input,
* ``pipe:COMMAND`` (a shell command whose standard output is the shard; a
  non-zero exit status is an error naming the command, its status and the tail
  of its standard error, never a silently short shard),
* any other URL through fsspec (``memory://``, ``s3://``, ``gs://``, ``http://``...)
  with the storage options that apply to it (:mod:`wds_core.io.storage_config`),
  read by ranges that are retried and resumed (:mod:`wds_core.io.remote`).

URL rewrites apply first; with a :class:`~wds_core.io.cache.ShardCache`, remote
shards (and local ones when the cache asks for them) are read through it.

A URL scheme can be given an opener of its own with :func:`register_opener`
(webdataset's ``gopen_schemes[scheme] = f`` does the same): ``f(url, mode,
bufsize)`` returns the stream, and replaces everything above for that scheme.
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any, BinaryIO, cast

from ..errors import PipeError, ShardNotFoundError, ShardOpenError, redact_url
from .readahead import READ_AHEAD, ReadAhead
from .remote import DEFAULT_RETRY, RangeStream, RetryPolicy, open_remote, range_source
from .secure import check_allowed, verify_opened
from .storage_config import options_for, rewrite_url
from .streams import ReadStream

__all__ = [
    "PipeStream",
    "RandomAccess",
    "local_path",
    "map_local",
    "open_local",
    "open_random_access",
    "open_shard",
    "pipe_failure",
    "read_bytes",
    "register_opener",
    "remote_url",
    "scheme_opener",
    "url_of",
]

_WINDOW = 1 << 20  # bytes read around headers while walking a remote shard

# Openers by URL scheme, filled by register_opener (the drop-in's gopen_schemes is a view of it).
OPENERS: dict[str, Any] = {}


def register_opener(scheme: str, opener: Any) -> None:
    """Open URLs of ``scheme`` (``"s3"`` for ``s3://...``) with ``opener(url, mode, bufsize)``; ``None`` removes it.

    Used by reading and writing alike; registered per process (register it at
    import time in a module the DataLoader workers import too).
    """
    if opener is None:
        OPENERS.pop(scheme, None)
    elif not callable(opener):
        raise TypeError(f"an opener is a function (url, mode, bufsize) -> stream, got {type(opener).__name__}")
    else:
        OPENERS[scheme] = opener


def scheme_opener(url: str) -> Any:
    """The opener registered for ``url``'s scheme (or ``"__default__"`` for other ``scheme://`` URLs), or ``None``."""
    if not OPENERS or ":" not in url:
        return None
    found = OPENERS.get(url.split(":", 1)[0])
    if found is None and "://" in url and not url.startswith("file://"):
        found = OPENERS.get("__default__")
    return found


_STDERR_TAIL = 2000


def url_of(item: Any) -> str:
    """The URL of a shard-list item: a string, a path, or webdataset's ``{"url": ...}``."""
    if isinstance(item, dict):
        item = item.get("url")
    if isinstance(item, os.PathLike):
        item = os.fspath(item)
    if not isinstance(item, str):
        raise TypeError(f"expected a shard URL, got {type(item).__name__}: {item!r}")
    return item


def local_path(url: str) -> str | None:
    """The filesystem path of a local shard URL, or ``None`` for anything else."""
    if url.startswith("file://"):
        return url[len("file://") :]
    if url == "-" or url.startswith("pipe:") or "://" in url:
        return None
    return url


def remote_url(url: str) -> bool:
    """Whether ``url`` is read by ranged requests (:func:`~wds_core.io.remote.open_remote`): not a local path,
    ``-``, ``pipe:`` or a registered opener's."""
    return local_path(url) is None and url != "-" and not url.startswith("pipe:") and scheme_opener(url) is None


def open_shard(
    url: str,
    storage_options: dict | None = None,
    cache: Any = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    stats: Any = None,
    rewritten: bool = False,
    plan: ReadAhead = READ_AHEAD,
) -> BinaryIO:
    """Open ``url`` for reading as a binary stream; the caller closes it.

    ``storage_options`` are the explicit options (flat, or keyed by URL
    prefix) merged over the registered and configured ones; ``cache`` is a
    :class:`~wds_core.io.cache.ShardCache` or ``None``; a remote shard's
    retries are counted in ``stats`` (a Counter) too, and ``plan`` says how its
    ranges are requested ahead.  The URL is rewritten
    once, here, unless the caller did (``rewritten``).
    """
    if not rewritten:
        url = rewrite_url(url)
    check_allowed(url)
    opener = scheme_opener(url)
    if opener is not None:
        if cache is not None:
            return cache.open(url, lambda: opener(url, "rb", 8192))
        return opener(url, "rb", 8192)
    if url == "-":
        return cast(BinaryIO, _StdinStream())
    if url.startswith("pipe:"):
        command = url[len("pipe:") :]
        if cache is not None:
            return cache.open(url, lambda: cast(BinaryIO, PipeStream(command)))
        return cast(BinaryIO, PipeStream(command))
    path = local_path(url)
    if path is not None:
        if cache is not None and cache.cache_local:
            return cache.open(url, lambda: open_local(path, url))
        return open_local(path, url)
    options = options_for(url, storage_options)
    if cache is not None:
        return cache.open(url, lambda: open_remote(url, options, retry, plan, stats))
    return open_remote(url, options, retry, plan, stats)


def open_local(path: str, url: str) -> BinaryIO:
    """A local shard file, unbuffered, with wds's errors for a missing or unreadable one."""
    try:
        stream = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise ShardNotFoundError("shard not found", url=url) from None
    except OSError as exn:
        raise ShardOpenError(f"cannot open shard: {exn.strerror or exn}", url=url) from None
    try:
        verify_opened(stream.fileno(), path)  # in secure mode: the file opened, not the name, is under a root
    except BaseException:
        stream.close()
        raise
    return stream


class _StdinStream(ReadStream):
    """Standard input, left open when the reader closes the stream."""

    def read(self, size: int = -1) -> bytes:
        return sys.stdin.buffer.read(size)


def pipe_failure(command: str, status: int, stderr: BinaryIO) -> PipeError:
    """The error for a ``pipe:`` command that exited with ``status``, quoting the end of its ``stderr`` file."""
    stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, stderr.tell() - _STDERR_TAIL))
    tail = stderr.read().decode("utf-8", "replace").strip()
    detail = f"; its stderr ends with: {tail}" if tail else ""
    return PipeError(f"command exited with status {status}{detail}", url=f"pipe:{command}")


class PipeStream(ReadStream):
    """The standard output of a shell command, read as a shard.

    Reading to the end checks the exit status: a failing command raises
    :class:`PipeError` with its status and the tail of its standard error.
    Closing before the end (the consumer stopped early) terminates the command
    quietly.
    """

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(
                command, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr
            )
        except OSError as exn:
            self._stderr.close()
            raise PipeError(f"cannot start command: {exn}", url=f"pipe:{command}") from None
        assert self._proc.stdout is not None
        self._out = self._proc.stdout
        self._finished = False

    def read(self, size: int = -1) -> bytes:
        data = self._out.read(size)
        if size < 0 or len(data) < size:
            self._check_exit()
        return data

    def _check_exit(self) -> None:
        if self._finished:
            return
        self._finished = True
        status = self._proc.wait()
        if status != 0:
            raise pipe_failure(self.command, status, self._stderr)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._proc.poll() is None:
                self._proc.terminate()
            self._out.close()
            self._proc.wait()
        finally:
            self._stderr.close()
            super().close()

    def __repr__(self) -> str:
        return f"PipeStream({redact_url('pipe:' + self.command)!r})"


def read_bytes(url: str, storage_options: dict | None = None) -> bytes:
    """The whole object at ``url``, opened as shards are (rewrites, storage options, retries)."""
    with open_shard(url, storage_options) as stream:
        return bytes(stream.read())


class RandomAccess:
    """One shard's bytes by offset: ``read_at(offset, n)`` and its ``size``.

    ``walk`` is what a header walk reads through (for a remote shard, windows
    around the headers); ``ranged`` says that every read is a request, so a
    sample's members are best read with one.
    """

    def __init__(
        self,
        url: str,
        size: int,
        read_at: Callable[[int, int], bytes],
        close: Callable[[], None],
        walk: Callable[[int, int], bytes] | None = None,
        ranged: bool = False,
    ) -> None:
        self.url, self.size, self.read_at, self.close = url, size, read_at, close
        self.walk = read_at if walk is None else walk
        self.ranged = ranged


def map_local(path: str, url: str) -> RandomAccess:
    """A local file, memory-mapped."""
    with open_local(path, url) as handle:
        size = os.fstat(handle.fileno()).st_size
        view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else None
    if view is None:
        return RandomAccess(url, 0, lambda offset, n: b"", lambda: None)
    return RandomAccess(url, size, lambda offset, n: view[offset : offset + n], view.close)


class _Window:
    """Reads of a remote object around the last window fetched (header walks read a few bytes at a time)."""

    def __init__(self, fetch: Callable[[int, int], bytes]) -> None:
        self.fetch = fetch
        self.start, self.data = 0, b""

    def __call__(self, start: int, n: int) -> bytes:
        offset = start - self.start
        if 0 <= offset and offset + n <= len(self.data):
            return self.data[offset : offset + n]
        self.start, self.data = start, self.fetch(start, max(n, _WINDOW))
        return self.data[:n]


def open_random_access(
    url: str, storage_options: dict | None = None, retry: RetryPolicy = DEFAULT_RETRY, size: int | None = None
) -> RandomAccess:
    """Random access to a shard: memory-mapped when it is local, byte-range requests when it is remote.

    ``url`` goes through the registered rewrites; ``size``, when known (a
    descriptor's ``filesize``), saves asking the server.
    """
    target = rewrite_url(url)
    check_allowed(target)
    path = local_path(target)
    if path is not None:
        return map_local(path, url)
    stream = RangeStream(range_source(target, options_for(target, storage_options), retry), target, size, retry)
    known = stream.object_size()
    if known is None:
        raise ShardOpenError("the server does not report the shard's size, which random access needs", url=url)
    return RandomAccess(url, known, stream.read_range, lambda: None, walk=_Window(stream.read_range), ranged=True)
