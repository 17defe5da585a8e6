"""``ReadStream``: the base of the library's own read-only raw streams (pipes, ranges, cache fills...).

Subclasses define ``read(size)``; ``readinto`` is derived from it, so buffered
wrappers such as ``io.BufferedReader`` and the decompressors can use them.
:class:`Salvaging` wraps a decompressor so that the data decompressed before
a problem (a shard cut short) is read before the problem is raised.
"""

from __future__ import annotations

import io
from typing import Any

__all__ = ["ReadStream", "Salvaging"]


class ReadStream(io.RawIOBase):
    """A readable raw stream whose subclasses define ``read``."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class Salvaging(ReadStream):
    """A decompressing stream read one decompressed chunk at a time (``read1``).

    A decompressor's ``read(n)`` that meets the end of a truncated stream
    raises and drops what it decompressed in that call; here every chunk
    before the problem is returned first and the error comes with the read
    after them.
    """

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self._inner = inner
        self._read1 = getattr(inner, "read1", None) or inner.read
        self._error: BaseException | None = None

    def read(self, size: int = -1) -> bytes:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        parts: list[bytes] = []
        got = 0
        while size < 0 or got < size:
            try:
                chunk = self._read1(size - got if size >= 0 else 1 << 20)
            except Exception as exn:
                if not parts:
                    raise
                self._error = exn
                break
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._inner.close()
        super().close()
