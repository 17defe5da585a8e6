"""Storage backends: one per kind of URL, behind one protocol, chosen from a registry by the URL's scheme.

A :class:`Backend` reads a shard as a stream (``open``), reads it by offset (``random_access``: ranges and the
size), says its ``size``, writes one (``create``: a :class:`~wds_core.io.shardsink.ShardSink`) and writes the URL
for messages (``redact``).  The registry (:func:`backend_for`) holds

* ``file``: local paths and ``file://`` URLs (:mod:`.local`);
* ``-``: standard input and output;
* ``pipe``: ``pipe:COMMAND`` (:mod:`.pipes`);
* any other scheme: the remote engine (:mod:`.remote`: ranges requested ahead, retried, hedged; HTTP(S) and S3
  straight from the I/O pool's threads, everything else through fsspec), and :mod:`.sinks` for writing;
* a scheme given an opener with :func:`register_opener` (webdataset's ``gopen_schemes[scheme] = f``): the
  opener, ``f(url, mode, bufsize)``, reads and writes every URL of the scheme; ``"__default__"`` stands for
  every ``scheme://`` URL without one of its own;
* a scheme given a backend of its own with :func:`register_backend`.

Backends get what they need of the storage context (:class:`~wds_core.io.storage.Storage`: the options for a
URL, the retry policy, the read-ahead plan) as :class:`Settings`; URL rewrites, secure mode's allowlist and the
shard cache are applied by the context before a backend is called.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol, cast

from ..errors import ShardOpenError, redact_url
from .local import RandomAccess, StdinStream, local_path, local_random_access, open_local
from .openers import OPENERS, register_opener, scheme_opener
from .pipes import PipeSink, PipeStream
from .readahead import ReadAhead
from .remote import RangeStream, open_remote, range_source
from .retries import RetryPolicy
from .shardsink import ShardSink
from .sinks import LocalSink, OpenedSink, StreamSink, remote_sink

__all__ = [
    "BACKENDS",
    "OPENERS",
    "Backend",
    "Settings",
    "backend_for",
    "register_backend",
    "register_opener",
    "scheme_of",
    "scheme_opener",
]

_WINDOW = 1 << 20  # bytes read around headers while walking a remote shard


class Settings(Protocol):
    """What a backend needs of the storage context."""

    @property
    def retry(self) -> RetryPolicy: ...

    @property
    def read_ahead(self) -> ReadAhead: ...

    def options_for(self, url: str) -> dict[str, Any]: ...


class Backend:
    """One kind of storage.  Every method may be given any URL of the backend's schemes; what the kind cannot
    do (a command read by offset, a registered opener's size) is a :class:`~wds_core.errors.ShardOpenError`."""

    name = "storage"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        """The shard as a binary stream, read from the start; the caller closes it."""
        raise ShardOpenError(f"{self.name} cannot be read", url=url)

    def random_access(self, url: str, settings: Settings, size: int | None = None) -> RandomAccess:
        """The shard's bytes by offset (``size``, when known, saves asking for it)."""
        raise ShardOpenError(f"{self.name} cannot be read by offset (random access needs a file or an object)", url=url)

    def size(self, url: str, settings: Settings) -> int | None:
        """The shard's size in bytes, or ``None`` when the kind cannot say without reading it all."""
        return None

    def create(self, url: str, settings: Settings) -> ShardSink:
        """Start writing the shard; nothing is visible under its name before ``commit``."""
        raise ShardOpenError(f"{self.name} cannot be written", url=url)

    def redact(self, url: str) -> str:
        """``url`` fit for a message (credentials and signed queries hidden)."""
        return redact_url(url)

    def cached(self, cache: Any) -> bool:
        """Whether a shard cache keeps copies of this backend's shards."""
        return True


class LocalBackend(Backend):
    name = "a local file"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return open_local(_path(url), url)

    def random_access(self, url: str, settings: Settings, size: int | None = None) -> RandomAccess:
        return local_random_access(_path(url), url)

    def size(self, url: str, settings: Settings) -> int | None:
        with open_local(_path(url), url) as stream:
            return os.fstat(stream.fileno()).st_size

    def create(self, url: str, settings: Settings) -> ShardSink:
        return LocalSink(_path(url), url)

    def cached(self, cache: Any) -> bool:
        return bool(cache.cache_local)


def _path(url: str) -> str:
    path = local_path(url)
    return url if path is None else path


class StdioBackend(Backend):
    name = "standard input/output"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return cast(BinaryIO, StdinStream())

    def create(self, url: str, settings: Settings) -> ShardSink:
        return StreamSink(sys.stdout.buffer, "-")

    def cached(self, cache: Any) -> bool:
        return False


class PipeBackend(Backend):
    name = "a pipe: command"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return cast(BinaryIO, PipeStream(url[len("pipe:") :]))

    def create(self, url: str, settings: Settings) -> ShardSink:
        return PipeSink(url[len("pipe:") :])


class RemoteBackend(Backend):
    """Object stores and other fsspec filesystems, read by ranges through the remote engine."""

    name = "a remote object"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return open_remote(url, settings.options_for(url), settings.retry, settings.read_ahead, stats)

    def _ranges(self, url: str, settings: Settings, size: int | None) -> RangeStream:
        source = range_source(url, settings.options_for(url), settings.retry)
        return RangeStream(source, url, size, settings.retry)

    def random_access(self, url: str, settings: Settings, size: int | None = None) -> RandomAccess:
        stream = self._ranges(url, settings, size)
        known = stream.object_size()
        if known is None:
            raise ShardOpenError("the server does not report the shard's size, which random access needs", url=url)
        return RandomAccess(url, known, stream.read_range, lambda: None, walk=_Window(stream.read_range), ranged=True)

    def size(self, url: str, settings: Settings) -> int | None:
        return self._ranges(url, settings, None).object_size()

    def create(self, url: str, settings: Settings) -> ShardSink:
        return remote_sink(url, settings.options_for(url))


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


class OpenerBackend(Backend):
    """A scheme given an opener ``f(url, mode, bufsize)`` (:func:`register_opener`)."""

    name = "a registered opener's URL"

    def __init__(self, opener: Any) -> None:
        self.opener = opener

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return cast(BinaryIO, self.opener(url, "rb", 8192))

    def create(self, url: str, settings: Settings) -> ShardSink:
        return OpenedSink(self.opener(url, "wb", 8192), url)


LOCAL, STDIO, PIPE, REMOTE = LocalBackend(), StdioBackend(), PipeBackend(), RemoteBackend()

# Backends by scheme ("file", "-", "pipe", or a URL's scheme); a scheme not here is REMOTE's.
BACKENDS: dict[str, Backend] = {"file": LOCAL, "-": STDIO, "pipe": PIPE}


def register_backend(scheme: str, backend: Backend | None) -> None:
    """Read and write every URL of ``scheme`` (``"s3"`` for ``s3://...``) with ``backend``; ``None`` removes it.

    Registered per process, like :func:`~wds_core.io.openers.register_opener` (which wins over a backend for its
    scheme).
    """
    if backend is None:
        if scheme in ("file", "-", "pipe"):
            raise ValueError(f"the {scheme!r} backend is built in; register another in its place to replace it")
        BACKENDS.pop(scheme, None)
    elif not isinstance(backend, Backend):
        raise TypeError(f"a backend is a wds_core.io.backends.Backend, got {type(backend).__name__}")
    else:
        BACKENDS[scheme] = backend


def scheme_of(url: str) -> str:
    """The registry's key for ``url``: ``"-"``, ``"pipe"``, ``"file"`` (local paths too) or the URL's scheme."""
    if url == "-":
        return "-"
    if url.startswith("pipe:"):
        return "pipe"
    if local_path(url) is not None:
        return "file"
    return url.split("://", 1)[0]


def backend_for(url: str) -> Backend:
    """The backend that reads and writes ``url`` (after rewrites): a registered opener's, else the registry's."""
    opener = scheme_opener(url)
    if opener is not None:
        return OpenerBackend(opener)
    return BACKENDS.get(scheme_of(url), REMOTE)
