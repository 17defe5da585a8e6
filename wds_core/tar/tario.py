"""Tar headers in, with byte offsets: the project's own streaming tar reader.

:func:`iter_members` walks a tar stream and yields ``(name, data, offset)`` for
every regular file, where ``offset`` is the position of the member's first
header (its GNU long-name or pax header when it has one).  It understands
ustar (with the ``prefix`` field), GNU long names and links (``L``/``K``), pax
extended and global headers (``x``/``g``: ``path`` and ``size``), verifies every
header checksum, skips directories, links and devices, and reads gzip, bz2, xz
and zstd compressed shards transparently (detected by their magic bytes:
:func:`~wds_core.io.decompress.open_decompressed`, also importable from here).

Why not :mod:`tarfile`: it builds a ``TarInfo`` object per member and reads
through several layers of buffering.  Here headers are parsed straight out of
large aligned blocks and their checksums are verified a block at a time with
numpy, which is what makes small samples fast; large members are read with a
single copy.

Writing is in :mod:`wds_core.tar.tarwrite`.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..errors import OverLimitError, TarFormatError, WdsError
from ..io.decompress import open_decompressed
from ..limits import DecodeLimits
from . import compiled
from .compiled import compiled_walk, file_size, mapped_file, walk_file
from .headers import (
    BLOCK,
    EMPTY,
    ENDS_IN_HEADER,
    ENDS_IN_MEMBER,
    ENDS_IN_PADDING,
    ENDS_UNMARKED,
    EXTENSIONS,
    GNU_LONGLINK,
    REGULAR,
    ZERO_BLOCK,
    Extensions,
    checksum_ok,
    corrupt_header,
    decode_name,
    first_bad_checksum,
    parse_number,
    pax_number,
    ustar_name,
)
from .source import CHUNK, ExactSource, discard

__all__ = ["BLOCK", "compiled_walk", "iter_members", "open_decompressed"]

DIRECT = 1 << 16  # members at least this large are read with one copy, header by header
MAPPED_SPAN = 64 << 20  # a mapped shard's window takes in large members up to this span
# a mapped shard's members smaller than this are copied as bytes, not viewed: a view saves next to nothing there,
# and the first read of a page of the map is a page fault that costs more than copying a few kilobytes
MAPPED_COPY = 16 << 10

Member = tuple[str, bytes, int]


def iter_members(
    stream: BinaryIO,
    url: object = None,
    *,
    start_offset: int = 0,
    pax_global: dict[str, str] | None = None,
    want: Callable[[str], bool] | None = None,
    limits: DecodeLimits | None = None,
    over_limit: str = "raise",
    mapped: mmap.mmap | None = None,
    fd: int = -1,
    chunk: int = CHUNK,
    map_file: bool = True,
) -> Iterator[Member]:
    """Yield ``(name, data, offset)`` for each regular file in a tar stream.

    ``stream`` is positioned at ``start_offset`` of the uncompressed tar (use
    :func:`open_decompressed` first for possibly compressed shards), which must
    be a header boundary.  ``pax_global`` carries the global pax records in force
    there (the reader updates the dict it is given).  ``want(name)`` returning
    ``False`` skips a member's data without yielding it (read and dropped a
    megabyte at a time, so a skipped member costs no memory).

    ``limits`` (default: the configuration file's ``decode_limits``, else the
    defaults of :class:`~wds_core.limits.DecodeLimits`) bounds the
    memory a member may take, since a small compressed shard can inflate to
    members of any size: a member larger than ``field_bytes``, or whose
    extension headers (GNU long name, pax records) hold more than
    ``header_bytes``, is refused before its data is read, with an
    :class:`OverLimitError` naming it; so are global pax records passing
    ``header_bytes`` together.  ``over_limit="raise"`` (the default) raises the
    refusal; ``over_limit="skip"`` yields ``(name, error, offset)`` in place of
    the member (the error where the data would be; ``name`` is ``None`` for
    global records), streams past its data and goes on.

    ``mapped`` is the whole (uncompressed) shard memory-mapped, ``stream``
    being positioned at ``start_offset`` of it: the data of members of
    ``MAPPED_COPY`` bytes (16 KiB) and more are then ``memoryview`` slices of
    the map, nothing copied (the map stays open while any of them lives);
    smaller ones are ``bytes``, which cost less than the page fault of a view's
    first read.  Headers are read from the file with the compiled walk, from the
    map without it.

    ``fd`` is the descriptor of the local file ``stream`` reads, when the
    shard is plain (uncompressed) and ``stream`` can be positioned with
    ``seek``: the compiled walk then reads plain members' headers and data from
    the file itself, each member with a single copy (out of a map of the file, or
    with ``pread`` when ``map_file`` is false: :func:`.compiled.walk_file`).

    ``chunk`` is how many bytes are read (or walked, in a file or a map) at a
    time while headers are dense: the members of a chunk are parsed together
    and held until they are taken.  A reader of many shards at once
    (:mod:`wds_core.sources.interleave`) reads small chunks, so that each shard it
    holds open holds little more than one sample.

    Ends at the first end-of-archive block.  Raises :class:`TruncatedShardError`
    when the stream ends inside a header or a member or without an end-of-archive
    block, and :class:`TarFormatError` for a corrupt header or a size that is not
    a number (never negative); members before the problem have all been yielded
    by then.
    """
    if over_limit not in ("raise", "skip"):
        raise ValueError(f"over_limit must be 'raise' or 'skip', got {over_limit!r}")
    walk = _Walk(stream, url, start_offset, pax_global, want, limits, over_limit == "skip", mapped, fd, chunk)
    while True:
        if walk.size_of_file >= 0 and walk.ext.plain and walk.src.pending is None:
            yield from walk.from_file(stream, map_file)
        origin, n = walk.next_window()
        out, headers, pos, n, straddle, ended, problem = walk.walk(origin, n)
        bad = first_bad_checksum(walk.buf, headers, origin)
        if bad >= 0:
            yield from _before(out, walk.base + headers[bad])
            raise corrupt_header(walk.base + headers[bad], url)
        yield from out
        if problem is not None:
            raise problem
        if ended:
            return
        if straddle < 0 and pos < n:
            if pos + BLOCK <= n:  # pragma: no cover - every stop of the walk above is reported already
                raise corrupt_header(walk.base + pos, url)
            raise walk.src.short(ENDS_IN_HEADER, offset=walk.base + pos)
        if straddle < 0:
            walk.skip = pos - n
            continue
        yield from walk.straddling(straddle, n)


class _Walk:
    """One walk of a tar stream, a window of blocks at a time (:func:`iter_members`): the source it reads
    (a stream, a map, or a local file in C), the extension headers pending, and where it is."""

    def __init__(
        self,
        stream: BinaryIO,
        url: object,
        start_offset: int,
        pax_global: dict[str, str] | None,
        want: Callable[[str], bool] | None,
        limits: DecodeLimits | None,
        skipping: bool,
        mapped: mmap.mmap | None,
        fd: int,
        chunk: int,
    ) -> None:
        self.url, self.want, self.skipping, self.mapped, self.fd = url, want, skipping, mapped, fd
        self.src = ExactSource(stream if mapped is None else mapped, url)  # type: ignore[arg-type]
        self.limits = limits = limits or DecodeLimits.of()
        self.max_member = limits.field_bytes
        self.ext = Extensions(url, limits, pax_global)
        self.buf: bytes = b""
        self.body: bytes | memoryview = self.buf  # what members' data are sliced from: buf, or a view of the map
        self.end = 0  # the end of the map's current window
        if mapped is not None:  # the walk goes window by window through the map itself: offsets are absolute
            self.buf, self.body, self.end = mapped, memoryview(mapped), start_offset  # type: ignore[assignment]
        self.base = start_offset  # absolute offset of buf[0]
        self.chunk = max(int(chunk) // BLOCK, 1) * BLOCK  # whole blocks: a window never ends inside a header
        self.next_read = self.chunk
        self.skip = 0  # padding still to skip before the next header
        self.seen_any = start_offset > 0
        self.size = 0  # the size of the last header read
        # the common case in C: it leaves every other header to the walk
        self.scan = compiled.SCAN if want is None else None
        self.size_of_file = file_size(fd) if self.scan is not None and mapped is None else -1  # the file walk's end
        # where scan reads the headers of a map from (buf is the map from the file's start then; else buf is a chunk)
        self.header_fd = mapped_file(stream, mapped) if self.scan is not None and mapped is not None else -1
        self.copy_below = MAPPED_COPY if mapped is not None else 0  # members as bytes sliced from buf, not views

    def from_file(self, stream: BinaryIO, map_file: bool) -> Iterator[Member]:
        """Plain members of a local file, in C straight from the file (a chunk's worth at a time), up to what
        stops it (an extension header, a bad header, the end), which the walk then goes on from."""
        at = self.base + len(self.buf) + self.skip  # the next header
        moved = yield from walk_file(self.scan, self.fd, at, self.size_of_file, self.max_member, self.chunk, map_file)  # type: ignore[arg-type]
        if moved != at:
            self.seen_any = True
            stream.seek(moved)
            self.base, self.buf, self.skip = moved, b"", 0

    def next_window(self) -> tuple[int, int]:
        """The next window of blocks (a header never straddles two): ``(origin, n)``, the walk's first header
        and the window's end in ``buf``."""
        mapped, skip = self.mapped, self.skip
        if mapped is None:
            self.base += len(self.buf)
            self.buf = self.body = self.src.read_blocks(skip, self.next_read)
            # the padding is skipped by starting the walk past it, not by copying the block
            if len(self.buf) < skip:
                raise self.src.short(ENDS_IN_PADDING, offset=self.base + len(self.buf))
            origin, n = skip, len(self.buf)
        else:  # the next window of the map; base stays 0
            self.base = 0
            origin = self.end + skip
            if origin > len(mapped):
                raise self.src.short(ENDS_IN_PADDING, offset=len(mapped))
            n = self.end = min(len(mapped), origin + self.next_read)
        self.skip, self.next_read = 0, self.chunk
        if n - origin < BLOCK:
            here = self.base + origin
            if n == origin and not self.seen_any and self.src.pending is None:
                raise TarFormatError(EMPTY, url=self.url, offset=here)
            raise self.src.short(ENDS_UNMARKED if n == origin else ENDS_IN_HEADER, offset=here)
        self.seen_any = True
        return origin, n

    def walk(self, origin: int, n: int) -> tuple[list[Member], list[int], int, int, int, bool, WdsError | None]:
        """The members whose headers and data lie in ``buf[origin:n]``: ``(members, header positions, where the
        walk stopped, the window's end (a map's window takes in a large member), the header whose data runs past
        it or -1, whether the archive ended, a problem to raise after the members)``.

        The hot loop of a shard read in Python (95 lines, measured: its state lives in locals, written back once,
        and it is called once a window, not once a member)."""
        buf, body, base, url, ext, want = self.buf, self.body, self.base, self.url, self.ext, self.want
        mapped, scan, max_member, copy_below, skipping = (
            self.mapped,
            self.scan,
            self.max_member,
            self.copy_below,
            self.skipping,
        )
        plain, size, pos = ext.plain, self.size, origin
        out: list[Member] = []
        headers: list[int] = []
        straddle = -1
        ended = False
        problem: WdsError | None = None  # a refusal (raise mode) or a bad header value, after the members before it
        try:
            while pos + BLOCK <= n:
                if scan is not None and plain:
                    pos = scan(buf, body, pos, n, base, max_member, out, self.header_fd, copy_below)
                    if pos + BLOCK > n:
                        break
                if buf[pos] == 0 and buf[pos : pos + BLOCK] == ZERO_BLOCK:
                    ended = True
                    break
                field = buf[pos + 124 : pos + 135]
                try:  # the common case: eleven octal digits (an 8 or a 9 raises)
                    size = int(field, 8) if field.isdigit() else parse_number(buf[pos + 124 : pos + 136], "size")
                except ValueError as exn:
                    problem = _bad_size(buf, pos, exn, url, base)
                    break
                headers.append(pos)
                dpos = pos + BLOCK
                kind = buf[pos + 156]
                if not plain and kind not in EXTENSIONS and ext.pax is not None and "size" in ext.pax:
                    size = pax_number(ext.pax["size"], "size", url, ext.first(base + pos))
                dend = dpos + size
                if dend > n:
                    if mapped is None or dend > len(mapped):
                        straddle = pos
                        break
                    # mapped: the data is there; the window takes it in, and a chunk of headers after it while it
                    # spans less than MAPPED_SPAN (its headers' checksums are checked together, after the walk).
                    # It ends on a block boundary: a window ending inside the header after the data would take
                    # that header for a cut shard
                    after = dend + (-size) % BLOCK
                    n = self.end = min(len(mapped), after + self.chunk if dend - origin < MAPPED_SPAN else after)
                if plain and kind in REGULAR:
                    name = decode_name(ustar_name(buf, pos))
                    if want is None or want(name):
                        if size <= max_member:
                            data = (buf if size < copy_below else body)[dpos:dend]
                            out.append((name, data, base + pos))  # type: ignore[arg-type]
                        elif skipping:
                            out.append((name, _too_big(name, size, self.limits, url, base + pos), base + pos))  # type: ignore[arg-type]
                        else:
                            problem = _too_big(name, size, self.limits, url, base + pos)
                            break
                elif kind in EXTENSIONS:
                    refused = None
                    if ext.fits(kind, size):
                        ext.extend(kind, buf[dpos:dend], base + pos)
                    else:
                        refused = ext.skip(kind, size, base + pos) or ext.early()  # at once, not after the rest
                    plain = ext.plain
                    if refused is not None:
                        if not skipping:
                            problem = refused
                            break
                        out.append((None, refused, base + pos))  # type: ignore[arg-type]
                else:
                    if not plain and not checksum_ok(buf[pos : pos + BLOCK]):
                        # a member named by extension headers is yielded at the offset of the first of them: it
                        # must not be yielded when its own header is corrupt (the walk checks the others later)
                        problem = corrupt_header(base + pos, url)
                        break
                    item = _member(ext, buf, pos, kind, size, base + pos, want, max_member)
                    plain = ext.plain
                    if item is not None:
                        if item[1].__class__ is OverLimitError and not skipping:
                            problem = item[1]  # type: ignore[assignment]
                            break
                        refused_item = item[1].__class__ is OverLimitError
                        data = (buf if size < copy_below else body)[dpos:dend]
                        out.append(item if refused_item else (item[0], data, item[2]))  # type: ignore[arg-type]
                pos = dpos + ((size + BLOCK - 1) & ~(BLOCK - 1))
        except TarFormatError as exn:  # a pax size that is not a number, a malformed pax record
            problem = exn
        self.size = size
        return out, headers, pos, n, straddle, ended, problem

    def straddling(self, straddle: int, n: int) -> Iterator[Member]:
        """The member (or extension header) at ``buf[straddle]``, whose data runs past the window: the rest read
        directly (or dropped: a refused or unwanted member), then the walk goes on after it."""
        ext, skipping, size = self.ext, self.skipping, self.size
        header = self.buf[straddle : straddle + BLOCK]
        header_offset = self.base + straddle
        have = self.buf[straddle + BLOCK : n]
        if self.mapped is not None:  # a member running past the end of the mapped file: the rest is read from there
            self.mapped.seek(n)
        self.buf = b""
        read = self.src.read
        kind = header[156]
        taken: bytes | None = None  # the data, when it is read
        yielded: Member | None = None
        label: str | None = None  # what a truncation names
        if kind in EXTENSIONS:
            if ext.fits(kind, size) and kind != GNU_LONGLINK:
                taken = have + read(size - len(have))
            else:
                refused = ext.skip(kind, size, header_offset) or ext.early() if kind != GNU_LONGLINK else None
                if refused is not None:
                    if not skipping:
                        raise refused
                    yielded = (None, refused, header_offset)  # type: ignore[assignment]
            label = decode_name(ustar_name(header, 0))
        else:
            item = _member(ext, header, 0, kind, size, header_offset, self.want, self.max_member)
            if item is not None:
                label = item[0]
                if item[1].__class__ is OverLimitError:
                    if not skipping:
                        raise item[1]  # type: ignore[misc]
                    yielded = item  # type: ignore[assignment]
                else:
                    taken = have + read(size - len(have))
                    yielded = (item[0], taken, item[2])
            if label is None:
                label = decode_name(ustar_name(header, 0))
        if taken is None:
            if yielded is not None:  # the refusal first: the consumer may stop before the data is streamed past
                yield yielded
                yielded = None
            got = len(have) + discard(read, size - len(have))
        else:
            got = len(taken)
        if got < size:
            raise self.src.short(ENDS_IN_MEMBER, member=label, offset=header_offset + BLOCK + got)
        self.base = header_offset + BLOCK + size
        self.skip = (-size) % BLOCK
        if size >= DIRECT:
            self.next_read = BLOCK  # only the next header: large members tend to follow each other
        if kind in EXTENSIONS:
            if taken is not None:
                ext.extend(kind, taken, header_offset)
            elif kind == GNU_LONGLINK:
                ext.extend(kind, b"", header_offset)
        elif yielded is not None:
            yield yielded


def _member(
    ext: Extensions,
    buf: bytes,
    pos: int,
    kind: int,
    size: int,
    offset: int,
    want: Callable[[str], bool] | None,
    max_member: int,
) -> tuple[str, object, int] | None:
    """A member header after extensions (or of another kind) at ``buf[pos]``: ``(name, True, start)`` for a
    wanted regular member, ``(name, OverLimitError, start)`` for a refused one, else ``None``; the pending
    extensions are done with."""
    name = ext.name(buf, pos, kind, offset)
    start = ext.first(offset)
    refused = ext.refusal(name) if name is not None else None
    ext.done()
    if name is None or not (want is None or want(name)):
        return None
    if refused is None and size > max_member:
        refused = _too_big(name, size, ext.limits, ext.url, start)
    return (name, True if refused is None else refused, start)


def _bad_size(buf: bytes, pos: int, exn: Exception, url: object, base: int) -> TarFormatError:
    """A header whose size field is not a number: a bad value when its checksum holds, else a corrupt header."""
    if checksum_ok(buf[pos : pos + BLOCK]):
        return TarFormatError(f"bad member size in tar header ({exn})", url=url, offset=base + pos)
    return corrupt_header(base + pos, url)


def _too_big(member: str | None, size: int, limits: DecodeLimits, url: object, offset: int) -> OverLimitError:
    what = f"member {member!r} is" if member is not None else "a tar extension header is"
    return limits.over(what, size, "field_bytes", "tarfile_to_samples", url=url, member=member, offset=offset)


def _before(out: list[Member], offset: int) -> list[Member]:
    return [m for m in out if m[2] < offset]
