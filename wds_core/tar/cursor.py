"""Where the reader of a shard is: the cursor the tar layer keeps as it hands out samples (:class:`Cursor`).

Between two samples a reader's whole position in its shard is the byte offset at which the next sample starts and
the name of the member whose header is there; :func:`~.grouping.group_members` (and its compiled twin) set both
just before each sample is handed out, so a checkpoint taken then names bytes that a restore can check before it
yields anything: the header found at the offset must be that member's (:mod:`wds_core.sources.reader`).
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["Cursor", "name_digest"]


class Cursor:
    """``offset``: where the next sample starts (``-1`` once the shard is done); ``name``: the name of the member
    whose (first) header is there, when the tar layer knows it; ``partial``: the members read whole of the sample
    at a cut or damage, for a reader whose handler goes on."""

    __slots__ = ("offset", "name", "partial")

    def __init__(self) -> None:
        self.offset = -1
        self.name: str | None = None
        self.partial: dict[str, Any] | None = None

    def at(self, offset: int, name: str | None = None) -> None:
        """The next sample starts at ``offset`` with the member ``name``."""
        self.offset, self.name = offset, name


def name_digest(name: str) -> str:
    """What a state keeps of the name of the member at its offset: 16 hex digits of its SHA-256."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
