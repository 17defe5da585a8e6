"""Exact reads from a shard's stream, for the tar walk (:mod:`.tario`).

:class:`ExactSource` reads whole blocks from a local, piped, remote or decompressing stream: short only at the
end of the data or before an error, which it keeps until the members before it are delivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..errors import ShardOpenError, TarFormatError, TruncatedShardError, WdsError
from .headers import BLOCK

__all__ = ["CHUNK", "ByOffset", "ExactSource", "Readable", "Seekable", "discard"]


class Readable(Protocol):
    """What a tar walk reads from: a shard's stream, a map of it, a shard read by offset."""

    def read(self, n: int, /) -> bytes: ...


class Seekable(Readable, Protocol):
    """A stream the walk can also move in (a local file, walked in C and then in Python from where C stopped)."""

    def seek(self, offset: int, /) -> object: ...


CHUNK = 1 << 20  # bytes per read while headers are dense


class ExactSource:
    """Exact reads from a stream: short only at the end of the data, or before an error.

    When reading fails after part of a read arrived, that part is returned and
    the error is kept in ``pending``: the members before the problem are
    delivered, then the problem is raised (see :meth:`short`).
    """

    __slots__ = ("_read", "_arrived", "url", "pending", "carry")

    def __init__(self, stream: Readable, url: object) -> None:
        self._read = stream.read
        # a remote stream hands over the bytes that have arrived without waiting for the rest (RangeStream)
        self._arrived = getattr(stream, "read_arrived", None)
        self.url = url
        self.pending: Exception | None = None
        self.carry = b""  # bytes read past the last whole block of a read_blocks()

    def read_blocks(self, skip: int, n: int) -> bytes:
        """Up to ``skip + n`` bytes: all of them from a local stream; from a remote one, what has arrived, at least
        ``skip`` and one block past it (unless the stream ends), cut to whole blocks after ``skip``, so that
        parsing starts on the first bytes of a range instead of waiting for the next ranges."""
        if self._arrived is None or self.pending is not None:
            return self.read(skip + n)
        parts, self.carry = ([self.carry] if self.carry else []), b""
        data = self._gather(self._arrived, parts, skip + BLOCK, skip + n)
        whole = skip + (max(len(data) - skip, 0) // BLOCK) * BLOCK
        if len(data) >= skip + BLOCK and whole < len(data):
            data, self.carry = data[:whole], data[whole:]
        return data

    def read(self, n: int) -> bytes:
        if self.pending is not None:
            raise self.pending
        if self.carry:
            head, self.carry = self.carry[:n], self.carry[n:]
            return head if len(head) == n else head + self.read(n - len(head))
        return self._gather(self._read, [], n, n)

    def _gather(self, read: Callable[[int], bytes], parts: list[bytes], until: int, want: int) -> bytes:
        """``parts`` and what ``read`` gives after them, until ``until`` bytes are there or the stream ends (each
        read asks for what is missing of ``want``).  A failure after some bytes arrived is kept in ``pending``."""
        got = sum(map(len, parts))
        try:
            while got < until:
                more = read(want - got)
                if more is None:  # pragma: no cover - non-blocking streams are not supported
                    raise ShardOpenError("the stream returned no data (non-blocking?)", url=self.url)
                if not more:
                    break
                parts.append(more)
                got += len(more)
        except Exception as exn:
            error = self._error(exn)
            if not parts:
                raise error from None
            self.pending = error
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _error(self, exn: Exception) -> Exception:
        if isinstance(exn, WdsError):
            return exn
        if isinstance(exn, EOFError):  # a compressed stream that was cut short
            return TruncatedShardError(f"compressed data ends early: {exn}", url=self.url)
        if isinstance(exn, ValueError):  # raised by the decompressors for bad data
            return TarFormatError(f"corrupt compressed data: {exn}", url=self.url)
        if isinstance(exn, OSError):
            return ShardOpenError(f"read failed: {type(exn).__name__}: {exn}", url=self.url)
        return exn

    def short(self, message: str, member: str | None = None, offset: int | None = None) -> Exception:
        """The error for data that ended early: the read error that ended it, if any, else a truncation."""
        return self.pending or TruncatedShardError(message, url=self.url, member=member, offset=offset)


class ByOffset:
    """A shard read by offset (``read_at(offset, n)``, ``size`` bytes), walked as a map is
    (:meth:`.walk.Walk.by_offset`): the walk reads each header with one slice and an extension header's data with
    one more, so only those are read (from a remote shard, through the windows around its headers)."""

    __slots__ = ("read_at", "size", "at")

    def __init__(self, read_at: Callable[[int, int], bytes], size: int) -> None:
        self.read_at, self.size, self.at = read_at, size, 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, span: slice) -> bytes:
        start, stop = span.start, span.stop
        if stop > self.size:
            stop = self.size
        return self.read_at(start, stop - start) if stop > start else b""

    def seek(self, offset: int) -> None:
        self.at = offset

    def read(self, n: int) -> bytes:
        data = self[self.at : self.at + n]
        self.at += len(data)
        return data


def discard(read: Callable[[int], bytes], count: int) -> int:
    """Read and drop ``count`` bytes a chunk at a time: how many there were."""
    got = 0
    while got < count:
        chunk = read(min(CHUNK, count - got))
        if not chunk:
            break
        got += len(chunk)
    return got
