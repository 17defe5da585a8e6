"""What a walk of tar headers is given and gives: its options (:class:`TarOptions`), and each member, or a refusal
of one (:class:`Refused`), typed.

A member is ``(name, data, offset)``: its name, its bytes (a view of a mapped shard's, or, walked by offset for an
index, the range of offsets they take) and the offset of its first header.  A member or extension headers over the
limits, streamed past when the walk skips them, is a :class:`Refused` in the stream of members, never an error in
a member's data slot: whoever groups members asks the item's type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import OverLimitError
from ..limits import DecodeLimits
from .source import CHUNK

__all__ = ["Data", "Item", "Member", "Refused", "TarOptions"]

Data = bytes | memoryview | range  # a member's bytes; range: the offsets they take, read by offset
Member = tuple[str, Data, int]


class Refused(NamedTuple):
    """A member (``name``; ``None`` for extension headers refused before their member is known, or the shard's
    global records) the walk refused over the limits (``error``) and streamed past; ``offset``: its first
    header's."""

    name: str | None
    error: OverLimitError
    offset: int


Item = Member | Refused


@dataclass(frozen=True)
class TarOptions:
    """How a shard's members are walked: ``want(name)`` false skips a member's data (``None``: every member);
    ``limits`` (default: the configuration file's) bound a member and its extension headers; ``skip_over_limit``
    yields a :class:`Refused` for what is over them and goes on (else it is raised); ``chunk``: bytes walked at a
    time while headers are dense; ``map_file``: a plain local shard's members copied out of a map of it (else read
    with ``pread``)."""

    want: Callable[[str], bool] | None = None
    limits: DecodeLimits | None = None
    skip_over_limit: bool = False
    chunk: int = CHUNK
    map_file: bool = True

    def resolved_limits(self) -> DecodeLimits:
        """The limits in force: the given ones, else the configuration file's."""
        return self.limits or DecodeLimits.of()
