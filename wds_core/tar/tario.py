"""Tar headers in, with byte offsets: the project's own streaming tar reader.

:func:`iter_members` walks a tar stream and yields ``(name, data, offset)`` for
every regular file, where ``offset`` is the position of the member's first
header (its GNU long-name or pax header when it has one).  It understands
ustar (with the ``prefix`` field), GNU long names and links (``L``/``K``), pax
extended and global headers (``x``/``g``: ``path`` and ``size``), verifies every
header checksum, skips directories, links and devices, and reads gzip, bz2, xz
and zstd compressed shards transparently (detected by their magic bytes).

Why not :mod:`tarfile`: it builds a ``TarInfo`` object per member and reads
through several layers of buffering.  Here headers are parsed straight out of
large aligned blocks and their checksums are verified a block at a time with
numpy, which is what makes small samples fast; large members are read with a
single copy.

Writing is in :mod:`wds_core.tar.tarwrite`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..errors import OverLimitError, ShardOpenError, TarFormatError, TruncatedShardError, WdsError
from ..fieldcodecs.limits import DecodeLimits
from ..io.decompress import decompressing
from ..io.streams import ReadStream
from .headers import (
    BLOCK,
    GNU_LONGNAME,
    PAX,
    PAX_GLOBAL,
    PAX_SOLARIS,
    REGULAR,
    ZERO_BLOCK,
    checksum_ok,
    corrupt_header,
    decode_name,
    first_bad_checksum,
    member_size,
    parse_number,
    special_header,
    ustar_name,
)

__all__ = ["BLOCK", "iter_members", "open_decompressed"]

CHUNK = 1 << 20  # bytes per read while headers are dense
DIRECT = 1 << 16  # members at least this large are read with one copy, header by header
_EXTENSIONS = (GNU_LONGNAME, PAX, PAX_SOLARIS, PAX_GLOBAL)  # headers whose data the next member needs

Member = tuple[str, bytes, int]


# ---------------------------------------------------------------- compression


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


def open_decompressed(stream: BinaryIO) -> tuple[BinaryIO, bool]:
    """Wrap ``stream`` in a decompressor when its first bytes say it is compressed.

    Returns the stream to read and whether it was compressed.  A compressed
    stream cut short gives all it decompressed before its error.
    """
    head = stream.read(6)
    prefixed = _Prefixed(head, stream)
    decompressed = decompressing(head, prefixed)  # type: ignore[arg-type]
    if decompressed is not None:
        return decompressed, True
    return prefixed, False  # type: ignore[return-value]


# ---------------------------------------------------------------- numbers and checksums


# ---------------------------------------------------------------- pax records


# ---------------------------------------------------------------- reading


class _Source:
    """Exact reads from a stream: short only at the end of the data, or before an error.

    When reading fails after part of a read arrived, that part is returned and
    the error is kept in ``pending``: the members before the problem are
    delivered, then the problem is raised (see :meth:`short`).
    """

    __slots__ = ("_read", "url", "pending")

    def __init__(self, stream: BinaryIO, url: object) -> None:
        self._read = stream.read
        self.url = url
        self.pending: Exception | None = None

    def read(self, n: int) -> bytes:
        if self.pending is not None:
            raise self.pending
        parts: list[bytes] = []
        try:
            data = self._read(n)
            if data is None:  # pragma: no cover - non-blocking streams are not supported
                raise ShardOpenError("the stream returned no data (non-blocking?)", url=self.url)
            if len(data) >= n or not data:
                return data
            parts.append(data)
            got = len(data)
            while got < n:
                more = self._read(n - got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            return b"".join(parts)
        except Exception as exn:
            error = self._error(exn)
            if not parts:
                raise error from None
            self.pending = error
            return b"".join(parts)

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

    def short(self, message: str, **where: object) -> Exception:
        """The error for data that ended early: the read error that ended it, if any, else a truncation."""
        return self.pending or TruncatedShardError(message, url=self.url, **where)  # type: ignore[arg-type]


def iter_members(
    stream: BinaryIO,
    url: object = None,
    *,
    start_offset: int = 0,
    pax_global: dict[str, str] | None = None,
    want: Callable[[str], bool] | None = None,
    limits: DecodeLimits | None = None,
) -> Iterator[Member]:
    """Yield ``(name, data, offset)`` for each regular file in a tar stream.

    ``stream`` is positioned at ``start_offset`` of the uncompressed tar (use
    :func:`open_decompressed` first for possibly compressed shards), which must
    be a header boundary.  ``pax_global`` carries the global pax records in force
    there (the reader updates the dict it is given).  ``want(name)`` returning
    ``False`` skips a member's data without yielding it (read and dropped a
    megabyte at a time, so a skipped member costs no memory).

    ``limits`` (default: the configuration file's ``decode_limits``, else the
    defaults of :class:`~wds_core.fieldcodecs.limits.DecodeLimits`) bounds the
    memory one member may take: a member larger than ``field_bytes`` is refused
    with an :class:`OverLimitError` naming it before its data is read, since a small
    compressed shard can inflate to members of any size.

    Ends at the first end-of-archive block.  Raises :class:`TruncatedShardError`
    when the stream ends inside a header or a member or without an end-of-archive
    block, and :class:`TarFormatError` for a corrupt header; members before the
    problem have all been yielded by then.
    """
    src = _Source(stream, url)
    read = src.read
    limits = limits or DecodeLimits.of()
    max_member = limits.field_bytes
    glob = pax_global if pax_global is not None else {}
    buf = b""
    pos = 0
    base = start_offset  # absolute offset of buf[0]
    next_read = CHUNK
    skip = 0  # padding still to skip before the next header
    longname: bytes | None = None
    pax: dict[str, str] | None = None
    start = -1  # offset of the first extension header of the pending member
    seen_any = start_offset > 0

    while True:
        # -- refill: a new aligned block; a header never straddles two blocks
        base += len(buf)
        buf = read(skip + next_read)
        # the padding is skipped by starting the walk past it, not by copying the block
        if len(buf) < skip:
            raise src.short("the shard ends inside a member's padding", offset=base + len(buf))
        origin, skip = skip, 0
        next_read = CHUNK
        pos = origin
        n = len(buf)
        if n - origin < BLOCK:
            here = base + origin
            if n == origin and not seen_any and src.pending is None:
                raise TarFormatError("the shard is empty: expected a tar archive", url=url, offset=here)
            if n == origin:
                raise src.short("the shard ends without an end-of-archive block; it is probably truncated", offset=here)
            raise src.short("the shard ends inside a tar header", offset=here)
        seen_any = True
        out: list[Member] = []
        headers: list[int] = []
        straddle = -1
        ended = False
        refused: OverLimitError | None = None
        while pos + BLOCK <= n:
            if buf[pos] == 0 and buf[pos : pos + BLOCK] == ZERO_BLOCK:
                ended = True
                break
            try:
                size = int(buf[pos + 124 : pos + 135], 8)
            except ValueError:
                try:
                    size = parse_number(buf[pos + 124 : pos + 136], "size")
                except ValueError:
                    size = -1
                if size < 0 or not checksum_ok(buf[pos : pos + BLOCK]):
                    break  # reported below as a corrupt header
            headers.append(pos)
            dpos = pos + BLOCK
            if pax is not None and "size" in pax:
                try:
                    size = int(pax["size"])
                except ValueError:
                    raise TarFormatError("bad size in pax header", url=url, offset=base + pos) from None
            dend = dpos + size
            if dend > n:
                straddle = pos
                break
            kind = buf[pos + 156]
            if kind in REGULAR and longname is None and pax is None and "path" not in glob:
                name = decode_name(ustar_name(buf, pos))
                if want is None or want(name):
                    if size > max_member:
                        refused = _too_big(name, size, limits, url, base + pos)
                        break
                    out.append((name, buf[dpos:dend], base + pos))
            else:
                if start < 0:
                    start = base + pos
                if kind in _EXTENSIONS and size > max_member:
                    refused = _too_big(None, size, limits, url, base + pos)
                    break
                data = buf[dpos:dend]
                special, longname, pax = special_header(buf, pos, kind, data, longname, pax, glob, url, base + pos)
                if special is not None and (want is None or want(special)):
                    if size > max_member:
                        refused = _too_big(special, size, limits, url, start)
                        break
                    out.append((special, data, start))
                if longname is None and pax is None:
                    start = -1
            pos = dpos + ((size + BLOCK - 1) & ~(BLOCK - 1))

        bad = first_bad_checksum(buf, headers, origin)
        if bad >= 0:
            yield from _before(out, base + headers[bad])
            raise corrupt_header(base + headers[bad], url)
        yield from out
        if refused is not None:
            raise refused
        if ended:
            return
        if straddle < 0 and pos < n:
            if pos + BLOCK <= n:  # the walk stopped at a header it could not parse
                raise corrupt_header(base + pos, url)
            raise src.short("the shard ends inside a tar header", offset=base + pos)
        if straddle < 0:
            skip = pos - n
            continue

        # -- a member whose data runs past this block: read the rest directly
        header = buf[straddle : straddle + BLOCK]
        header_offset = base + straddle
        have = buf[straddle + BLOCK :]
        buf = b""
        size = member_size(header, pax, url, header_offset)
        kind = header[156]
        carried = kind in _EXTENSIONS  # a long name or pax records: the data is part of the header
        member: str | None = None
        member_offset = header_offset
        if kind in REGULAR and longname is None and pax is None and "path" not in glob:
            member = decode_name(ustar_name(header, 0))
        elif not carried:
            if start < 0:
                start = header_offset
            member, longname, pax = special_header(header, 0, kind, b"", longname, pax, glob, url, header_offset)
            member_offset = start
            if longname is None and pax is None:
                start = -1
        wanted = carried or (member is not None and (want is None or want(member)))
        if wanted and size > max_member:
            raise _too_big(member, size, limits, url, member_offset)
        if wanted:
            rest = read(size - len(have))
            got = len(have) + len(rest)
        else:
            got = len(have) + _discard(read, size - len(have))
        if got < size:
            raise src.short(
                "the shard ends inside a member",
                member=member or decode_name(longname or ustar_name(header, 0)),
                offset=header_offset + BLOCK + got,
            )
        base = header_offset + BLOCK + size
        skip = (-size) % BLOCK
        if size >= DIRECT:
            next_read = BLOCK  # only the next header: large members tend to follow each other
        if carried:
            if start < 0:
                start = header_offset
            data = have + rest if have else rest
            _, longname, pax = special_header(header, 0, kind, data, longname, pax, glob, url, header_offset)
            if longname is None and pax is None:
                start = -1
        elif wanted:
            yield (member, have + rest if have else rest, member_offset)  # type: ignore[misc]


def _discard(read: Callable[[int], bytes], count: int) -> int:
    """Read and drop ``count`` bytes a chunk at a time: how many there were."""
    got = 0
    while got < count:
        chunk = read(min(CHUNK, count - got))
        if not chunk:
            break
        got += len(chunk)
    return got


def _too_big(member: str | None, size: int, limits: DecodeLimits, url: object, offset: int) -> OverLimitError:
    what = f"member {member!r} is" if member is not None else "a tar extension header is"
    return limits.over(what, size, "field_bytes", "tarfile_to_samples", url=url, member=member, offset=offset)


def _before(out: list[Member], offset: int) -> list[Member]:
    return [m for m in out if m[2] < offset]
