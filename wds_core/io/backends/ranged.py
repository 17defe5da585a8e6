"""Remote objects, read by ranges through the remote engine (:mod:`wds_core.io.remote.rangestream`,
:mod:`wds_core.io.remote.readahead`) and written through fsspec.

:class:`RangedBackend` is every scheme fsspec knows (:data:`FSSPEC`); the ``http`` and ``s3`` backends are
ranged backends that read straight from the I/O pool's threads (their ``direct`` source) when they honour every
option given, and through fsspec when they do not.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, BinaryIO

from ...errors import ShardOpenError
from ..localfiles import RandomAccess
from ..remote.rangestream import RangeSource, RangeStream, open_remote
from ..remote.retries import RetryPolicy
from ..shardsink import ShardSink
from .base import Backend, Settings
from .fsspec import fsspec_sink, fsspec_source

__all__ = ["FSSPEC", "RangedBackend"]

_WINDOW = 1 << 20  # bytes read around headers while walking a remote shard


class RangedBackend(Backend):
    """Objects read by ranges, several requested ahead, retried and resumed."""

    name = "a remote object"

    def direct(self, url: str, options: dict[str, Any], retry: RetryPolicy) -> RangeSource | None:
        """A source that requests ``url``'s ranges without fsspec, or ``None`` when fsspec's client should."""
        return None

    def source(
        self, url: str, options: dict[str, Any], retry: RetryPolicy, stats: Counter[str] | None = None
    ) -> RangeSource:
        """How ``url``'s ranges are requested: :meth:`direct`, else through its fsspec filesystem."""
        direct = self.direct(url, options, retry)
        return direct if direct is not None else fsspec_source(url, options, retry, stats)

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        source = self.source(url, settings.options_for(url), settings.retry, stats)
        return open_remote(source, url, settings.retry, settings.read_ahead, stats)

    def _ranges(self, url: str, settings: Settings, size: int | None) -> RangeStream:
        source = self.source(url, settings.options_for(url), settings.retry)
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
        return fsspec_sink(url, settings.options_for(url))


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


FSSPEC = RangedBackend()
