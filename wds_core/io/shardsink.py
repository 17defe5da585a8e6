"""``ShardSink``: what every destination a shard is written to answers (:mod:`~wds_core.io.destinations` makes them)."""

from __future__ import annotations

from typing import Any

__all__ = ["ShardSink"]


class ShardSink:
    """A destination being written; ``commit()`` or ``abort()`` ends it.

    ``rewindable``: a ``write`` that raised left none of its bytes, and writing may go on (local
    files); otherwise the destination may hold part of them and can only be aborted.
    """

    url: str
    rewindable = False

    def write(self, data: Any) -> None:  # pragma: no cover - every sink defines it
        raise NotImplementedError

    def commit(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def abort(self) -> None:  # pragma: no cover
        raise NotImplementedError
