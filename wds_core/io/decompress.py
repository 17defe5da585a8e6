"""Streaming decompression of compressed shards: gzip, bz2 and xz (multi-member), zstd.

:func:`decompressing` wraps a binary stream whose first bytes are given.
gzip, bz2 and xz are decompressed here with the standard library's
incremental decompressors, asking each call for at most the bytes the reader
wants (so a small compressed member never expands into memory at once) and,
when enough compressed input is at hand, returning them in one piece.
Concatenated members (``cat a.gz b.gz``) and zero padding after a gzip member
are read as one stream, as ``gzip``'s own reader does; gzip's CRC and length
trailers are checked.

A stream cut short delivers everything decompressed before its end, then
raises ``EOFError`` on the next read; corrupt data raises ``ValueError`` with
the decompressor's message the same way, after the data before it (errors of
the underlying stream are raised as they are).  zstd goes through the
``zstandard`` package's reader.
"""

from __future__ import annotations

import bz2
import io
import lzma
import zlib
from collections.abc import Callable
from typing import Any, BinaryIO

from ..errors import ShardOpenError
from .streams import ReadStream, Salvaging

__all__ = ["MAGIC", "decompressing", "is_compressed", "open_decompressed"]

_INPUT = 1 << 18  # compressed bytes read at a time
_OUTPUT = 1 << 20  # decompressed at a time at least (what a read does not take waits for the next)


def _gzip() -> Any:
    return zlib.decompressobj(16 + zlib.MAX_WBITS)


class _Decompressing(ReadStream):
    """The decompressed bytes of ``source``, one member after another (see the module doc)."""

    def __init__(self, source: BinaryIO, new: Callable[[], Any], padding: bytes = b"") -> None:
        super().__init__()
        self._source, self._new, self._padding = source, new, padding
        self._d = new()
        self._input = b""  # compressed bytes read but not given to the decompressor yet
        self._out = b""  # decompressed bytes not read yet, from self._pos
        self._pos = 0
        self._done = False
        self._error: BaseException | None = None

    def _more_input(self) -> bool:
        chunk = self._source.read(_INPUT)
        if not chunk:
            return False
        self._input = self._input + chunk if self._input else chunk
        return True

    def _next_member(self) -> bool:
        """After a member's end: start the next one, if any data follows (padding aside)."""
        rest = self._d.unused_data + self._input
        while True:
            if self._padding:
                rest = rest.lstrip(self._padding)
            if rest or not self._more_input():
                break
            rest, self._input = self._input, b""
        if not rest:
            return False
        self._d, self._input = self._new(), rest
        return True

    def _decompress(self, want: int) -> bytes:
        """Up to ``want`` bytes (at least one unless the stream has ended); raises at a premature end."""
        d = self._d
        while True:
            if d.eof:
                if not self._next_member():
                    self._done = True
                    return b""
                d = self._d
            if not self._input and getattr(d, "needs_input", True) and not self._more_input():
                raise EOFError("compressed data ends before the end of its stream")
            data, self._input = self._input, b""
            try:
                out = d.decompress(data, want)
            except (zlib.error, OSError, EOFError, lzma.LZMAError) as exn:  # the data, not the source, is bad
                raise ValueError(f"{type(exn).__name__}: {exn}") from None
            self._input = getattr(d, "unconsumed_tail", b"")
            if out:
                return out

    def read(self, size: int = -1) -> bytes:
        want = size if size >= 0 else 1 << 62
        parts: list[bytes] = []
        got = 0
        while got < want:
            if self._pos < len(self._out):  # what an earlier decompression left
                if self._pos == 0 and len(self._out) <= want - got:
                    piece = self._out
                else:
                    piece = self._out[self._pos : self._pos + want - got]
                self._pos += len(piece)
                parts.append(piece)
                got += len(piece)
                continue
            if self._error is not None:
                if parts:
                    break  # the data before the problem goes first
                error, self._error = self._error, None
                raise error
            if self._done:
                break
            try:
                self._out, self._pos = self._decompress(max(min(want - got, 1 << 30), _OUTPUT)), 0
            except Exception as exn:
                self._error = exn
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._source.close()
        super().close()


def _zstd(stream: BinaryIO) -> BinaryIO:
    try:
        import zstandard
    except ImportError:
        raise ShardOpenError("the shard is zstd-compressed; install the zstandard package to read it") from None
    reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
    return Salvaging(reader)  # type: ignore[return-value]


MAGIC: list[tuple[bytes, Callable[[Any], Any]]] = [
    (b"\x1f\x8b", lambda s: _Decompressing(s, _gzip, padding=b"\x00")),
    (b"BZh", lambda s: _Decompressing(s, bz2.BZ2Decompressor)),
    (b"\xfd7zXZ\x00", lambda s: _Decompressing(s, lzma.LZMADecompressor, padding=b"\x00")),
    (b"\x28\xb5\x2f\xfd", _zstd),
]


def decompressing(head: bytes, stream: BinaryIO) -> BinaryIO | None:
    """A decompressing stream over ``stream`` when ``head`` (its first bytes) names a format, else ``None``."""
    for magic, opener in MAGIC:
        if head.startswith(magic):
            return opener(stream)  # type: ignore[no-any-return]
    return None


def is_compressed(head: bytes) -> bool:
    """Whether a stream's first bytes (six suffice) are those of a compression format wds reads."""
    return any(head.startswith(magic) for magic, _ in MAGIC)


class _Prefixed(ReadStream):
    """A stream whose first bytes were already read: gives them back first."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head = head
        self._rest = rest

    def read(self, size: int = -1) -> bytes:
        if self._head:
            if size < 0:
                data, self._head = self._head + self._rest.read(), b""
                return data
            data, self._head = self._head[:size], self._head[size:]
            return data
        return self._rest.read(size)

    def fileno(self) -> int:  # the file under it, for whoever maps it (io.UnsupportedOperation when none)
        return self._rest.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        """To ``offset`` of the stream under it, the bytes kept passed (absolute positions only)."""
        if whence != 0:
            raise io.UnsupportedOperation("only absolute positions")
        self._head = b""
        return self._rest.seek(offset)


def open_decompressed(stream: BinaryIO) -> tuple[BinaryIO, bool]:
    """Wrap ``stream`` in a decompressor when its first bytes say it is compressed.

    Returns the stream to read and whether it was compressed.  A compressed
    stream cut short gives all it decompressed before its error.
    """
    if hasattr(stream, "read_arrived") and not is_compressed(stream.peek(6)):  # type: ignore[attr-defined]
        return stream, False  # a remote plain tar: read as it is, so that the reader parses ranges as they arrive
    head = stream.read(6)
    prefixed = _Prefixed(head, stream)
    decompressed = decompressing(head, prefixed)  # type: ignore[arg-type]
    if decompressed is not None:
        return decompressed, True
    return prefixed, False  # type: ignore[return-value]
