"""What every storage backend is: :class:`Backend` (read as a stream, read by offset, size, write, redact), and
:class:`Settings`, what a backend is given of the storage context (:class:`~wds_core.io.storage.Storage`: the
options for a URL, the retry policy, the read-ahead plan).  URL rewrites, secure mode's allowlist and the shard
cache are applied by the context before a backend is called.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, BinaryIO, Protocol

from ...errors import ShardOpenError, redact_url
from ..localfiles import RandomAccess
from ..remote.readahead import ReadAhead
from ..remote.retries import RetryPolicy
from ..shardsink import ShardSink

__all__ = ["Backend", "Settings"]


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
