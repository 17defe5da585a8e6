"""``ReadStream``: the base of the library's own read-only raw streams (pipes, ranges, cache fills...).

Subclasses define ``read(size)``; ``readinto`` is derived from it, so buffered
wrappers such as ``io.BufferedReader`` and the decompressors can use them.
"""

from __future__ import annotations

import io
from typing import Any

__all__ = ["ReadStream"]


class ReadStream(io.RawIOBase):
    """A readable raw stream whose subclasses define ``read``."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
