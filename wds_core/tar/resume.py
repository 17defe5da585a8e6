"""Positioning a shard's stream at a checkpointed offset: by a seek when it can, else by reading past it."""

from __future__ import annotations

from typing import Any

from ..errors import SampleError
from ..io.decompress import is_compressed
from .tario import open_decompressed

__all__ = ["skip_to"]

_SKIP_CHUNK = 1 << 20


def skip_to(stream: Any, start: int, url: str, plain: bool = False) -> tuple[Any, bool]:
    """``stream`` decompressed when it is compressed, positioned at ``start`` (seeking when it can), and whether
    it is a plain tar.

    Restoring inside a remote shard costs one ranged request at ``start`` when the shard is known to be
    plain (``plain``); else its first bytes are asked for alone (not a whole first range) to see whether it is
    compressed.
    """
    seekable = getattr(stream, "seekable", lambda: False)()
    if start > 0 and seekable:
        if not plain and hasattr(stream, "read_range"):
            plain = not is_compressed(stream.read_range(0, 6))
        if plain:
            stream.seek(start)
            return stream, True
    tar, compressed = open_decompressed(stream)
    if start == 0:
        return tar, not compressed
    if not compressed and seekable:
        stream.seek(start)
        return stream, True
    remaining = start
    while remaining > 0:
        got = len(tar.read(min(remaining, _SKIP_CHUNK)))
        if got == 0:
            raise SampleError("the shard is shorter than the checkpointed offset", url=url, offset=start)
        remaining -= got
    return tar, not compressed
