"""The one walk of tar headers (:class:`Walk`), one window of blocks at a time: behind the streaming reader
(:func:`~.tario.iter_members`) and the offset index (:func:`~.tarindex.walk_headers`).

A window is read from the stream (or is the next span of a memory-mapped shard); its headers are parsed and its
members sliced out together (the compiled scan takes the plain ones, :mod:`.compiled`); a member whose data runs
past the window is read (or dropped) on its own; plain members of a local file are walked in C straight from the
file.  Extension headers (GNU long names, pax records) are gathered by :class:`~.headers.Extensions`.  A shard read
by offset (:class:`~.source.ByOffset`, for the index) is walked as a map whose members are sliced as ranges of
offsets: its headers alone are read.
"""

from __future__ import annotations

import mmap
import sys
from collections.abc import Callable, Iterator
from typing import cast

from ..errors import OverLimitError, TarFormatError
from ..limits import DecodeLimits
from . import compiled
from .compiled import file_size, mapped_file, walk_file
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
from .members import Data, Item, Member, Refused, TarOptions
from .source import ByOffset, ExactSource, Readable, Seekable, discard

__all__ = ["DIRECT", "MAPPED_COPY", "MAPPED_SPAN", "Member", "Walk", "members_before"]


DIRECT = 1 << 16  # members at least this large are read with one copy, header by header


MAPPED_SPAN = 64 << 20  # a mapped shard's window takes in large members up to this span


BY_OFFSET = 1 << 20  # a shard read by offset is walked this many bytes at a time (its headers checked together)


# a mapped shard's members smaller than this are copied as bytes, not viewed: a view saves next to nothing there,
# and the first read of a page of the map is a page fault that costs more than copying a few kilobytes
MAPPED_COPY = 16 << 10


Blocks = bytes | mmap.mmap | ByOffset  # what a window's headers are sliced from


class Walk:
    """One walk of a tar stream, a window of blocks at a time (:func:`iter_members`): the source it reads
    (a stream, a map, or a local file in C), the extension headers pending, and where it is."""

    def __init__(
        self,
        stream: Readable,
        url: object,
        start_offset: int,
        pax_global: dict[str, str] | None,
        options: TarOptions,
        mapped: mmap.mmap | ByOffset | None,
        fd: int,
    ) -> None:
        want = options.want
        self.url, self.want, self.skipping, self.mapped, self.fd = url, want, options.skip_over_limit, mapped, fd
        self.src = ExactSource(stream if mapped is None else mapped, url)
        self.limits = limits = options.resolved_limits()
        self.max_member = limits.field_bytes
        self.ext = Extensions(url, limits, pax_global)
        self.buf: Blocks = b""
        self.body: bytes | memoryview | range = b""  # what members' data are sliced from: buf, or a view of the map
        self.end = 0  # the end of the map's current window
        if mapped is not None:  # the walk goes window by window through the map itself: offsets are absolute
            self.buf, self.end = mapped, start_offset
            # a shard read by offset gives each member's data as the range of offsets it takes (sliced in C)
            self.body = range(len(mapped)) if isinstance(mapped, ByOffset) else memoryview(mapped)
        self.base = start_offset  # absolute offset of buf[0]
        self.chunk = max(int(options.chunk) // BLOCK, 1) * BLOCK  # whole blocks: a window never ends inside a header
        self.next_read = self.chunk
        self.skip = 0  # padding still to skip before the next header
        self.seen_any = start_offset > 0
        self.size = 0  # the size of the last header read
        # the common case in C: it leaves every other header to the walk
        self.scan = compiled.SCAN if want is None else None
        self.size_of_file = file_size(fd) if self.scan is not None and mapped is None else -1  # the file walk's end
        # where scan reads the headers of a map from (buf is the map from the file's start then; else buf is a chunk)
        header_map = mapped if isinstance(mapped, mmap.mmap) else None
        self.header_fd = mapped_file(stream, header_map) if self.scan is not None and header_map is not None else -1
        self.copy_below = MAPPED_COPY if mapped is not None else 0  # members as bytes sliced from buf, not views
        self.stream, self.span = stream, MAPPED_SPAN
        self.blocks: list[bytes] | None = None  # read by offset: the window's headers, for the batch check

    @classmethod
    def by_offset(cls, shard: ByOffset, url: object, limits: DecodeLimits | None) -> Walk:
        """A walk of a shard read by offset that reads its headers alone: each member's data is the ``range`` of
        offsets it takes, never read, and no member is too large (:func:`~.tarindex.walk_headers`)."""
        walk = cls(shard, url, 0, None, TarOptions(limits=limits, chunk=BY_OFFSET), shard, -1)
        walk.max_member, walk.scan, walk.copy_below, walk.header_fd = sys.maxsize, None, 0, -1
        walk.span, walk.blocks = 0, []  # a window ends after a member that crosses it; its headers kept apart
        return walk

    def members(self, map_file: bool = True) -> Iterator[Item]:
        """The walk, window after window: every member to the end-of-archive block, or up to a problem, then the
        problem (:func:`~.tario.iter_members`)."""
        while True:
            if self.size_of_file >= 0 and self.ext.plain and self.src.pending is None:
                yield from self.from_file(map_file)
            origin, n = self.next_window()
            out, headers, pos, n, straddle, ended, problem = self.walk(origin, n)
            buf = self.buf
            if not isinstance(buf, ByOffset):
                bad = first_bad_checksum(buf, headers, origin)
            else:  # the headers read by offset, one after the other
                blocks = self.blocks or []
                bad = first_bad_checksum(b"".join(blocks), list(range(0, BLOCK * len(headers), BLOCK)))
                blocks.clear()
            if bad >= 0:
                yield from members_before(out, self.base + headers[bad])
                raise corrupt_header(self.base + headers[bad], self.url)
            yield from out
            if problem is not None:
                raise problem
            if ended:
                return
            if straddle < 0 and pos < n:
                if pos + BLOCK <= n:  # pragma: no cover - every stop of the walk above is reported already
                    raise corrupt_header(self.base + pos, self.url)
                raise self.src.short(ENDS_IN_HEADER, offset=self.base + pos)
            if straddle < 0:
                self.skip = pos - n
            elif self.blocks is not None:  # read by offset: the member runs past the end of the shard
                raise self.cut_short(straddle)
            else:
                yield from self.straddling(straddle, n)

    def cut_short(self, straddle: int) -> Exception:
        """The error for the member at ``buf[straddle]`` whose data runs past the end of the shard."""
        header = self.buf[straddle : straddle + BLOCK]
        kind = header[156]
        name = None if kind in EXTENSIONS else self.ext.name(header, 0, kind, self.base + straddle)
        label = name or decode_name(ustar_name(header, 0))
        return self.src.short(ENDS_IN_MEMBER, member=label, offset=len(self.buf))

    def from_file(self, map_file: bool) -> Iterator[Member]:
        """Plain members of a local file, in C straight from the file (a chunk's worth at a time), up to what
        stops it (an extension header, a bad header, the end), which the walk then goes on from."""
        scan, at = self.scan, self.base + len(self.buf) + self.skip  # the next header
        if scan is None:  # pragma: no cover - the file walk is set up only with the compiled scan
            return
        moved = yield from walk_file(scan, self.fd, at, self.size_of_file, self.max_member, self.chunk, map_file)
        if moved != at:
            self.seen_any = True
            cast(Seekable, self.stream).seek(moved)  # the file walk is a local file's
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

    def walk(self, origin: int, n: int) -> tuple[list[Item], list[int], int, int, int, bool, Exception | None]:
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
        plain, size, pos, blocks, span = ext.plain, self.size, origin, self.blocks, self.span
        out: list[Item] = []
        headers: list[int] = []
        straddle = -1
        ended = False
        problem: Exception | None = None  # a refusal (raise mode) or a bad header value, after the members before it
        try:
            while pos + BLOCK <= n:
                if scan is not None and plain:
                    pos = scan(buf, body, pos, n, base, max_member, out, self.header_fd, copy_below)
                    if pos + BLOCK > n:
                        break
                header = buf[pos : pos + BLOCK]  # read once: from a shard read by offset, one read a header
                if header[0] == 0 and header == ZERO_BLOCK:
                    ended = True
                    break
                field = header[124:135]
                try:  # the common case: eleven octal digits (an 8 or a 9 raises)
                    size = int(field, 8) if field.isdigit() else parse_number(header[124:136], "size")
                except ValueError as exn:
                    problem = _bad_size(header, exn, url, base + pos)
                    break
                headers.append(pos)
                if blocks is not None:
                    blocks.append(header)
                dpos = pos + BLOCK
                kind = header[156]
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
                    n = self.end = min(len(mapped), after + self.chunk if dend - origin < span else after)
                if plain and kind in REGULAR:
                    name = decode_name(ustar_name(header, 0))
                    if want is None or want(name):
                        if size <= max_member:
                            data: Data = (buf if size < copy_below else body)[dpos:dend]
                            out.append((name, data, base + pos))
                        elif skipping:
                            out.append(Refused(name, _too_big(name, size, self.limits, url, base + pos), base + pos))
                        else:
                            problem = _too_big(name, size, self.limits, url, base + pos)
                            break
                elif kind in EXTENSIONS:
                    refused = None
                    if ext.fits(kind, size):  # a link's target is not read: nothing needs it, and fits() holds no bound
                        ext.extend(kind, buf[dpos:dend] if kind != GNU_LONGLINK else b"", base + pos)
                    else:
                        refused = ext.skip(kind, size, base + pos) or ext.early()  # at once, not after the rest
                    plain = ext.plain
                    if refused is not None:
                        if not skipping:
                            problem = refused
                            break
                        out.append(Refused(None, refused, base + pos))
                else:
                    if not plain and not checksum_ok(header):
                        # a member named by extension headers is yielded at the offset of the first of them: it
                        # must not be yielded when its own header is corrupt (the walk checks the others later)
                        problem = corrupt_header(base + pos, url)
                        break
                    item = _member(ext, header, kind, size, base + pos, want, max_member)
                    plain = ext.plain
                    if isinstance(item, Refused):
                        if not skipping:
                            problem = item.error
                            break
                        out.append(item)
                    elif item is not None:
                        out.append((item[0], (buf if size < copy_below else body)[dpos:dend], item[1]))
                pos = dpos + ((size + BLOCK - 1) & ~(BLOCK - 1))
        except TarFormatError as exn:  # a pax size that is not a number, a malformed pax record
            problem = exn
        self.size = size
        return out, headers, pos, n, straddle, ended, problem

    def straddling(self, straddle: int, n: int) -> Iterator[Item]:
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
        yielded: Item | None = None
        label: str | None = None  # what a truncation names
        if kind in EXTENSIONS:
            if ext.fits(kind, size) and kind != GNU_LONGLINK:
                taken = have + read(size - len(have))
            else:
                refused = ext.skip(kind, size, header_offset) or ext.early() if kind != GNU_LONGLINK else None
                if refused is not None:
                    if not skipping:
                        raise refused
                    yielded = Refused(None, refused, header_offset)
            label = decode_name(ustar_name(header, 0))
        else:
            item = _member(ext, header, kind, size, header_offset, self.want, self.max_member)
            if isinstance(item, Refused):
                label = item.name
                if not skipping:
                    raise item.error
                yielded = item
            elif item is not None:
                label = item[0]
                taken = have + read(size - len(have))
                yielded = (item[0], taken, item[1])
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
    header: bytes,
    kind: int,
    size: int,
    offset: int,
    want: Callable[[str], bool] | None,
    max_member: int,
) -> tuple[str, int] | Refused | None:
    """A member ``header`` after extensions (or of another kind): ``(name, start)`` for a wanted regular member, a
    :class:`Refused` for a refused one, else ``None``; the pending extensions are done with."""
    name = ext.name(header, 0, kind, offset)
    start = ext.first(offset)
    refused = ext.refusal(name) if name is not None else None
    ext.done()
    if name is None or not (want is None or want(name)):
        return None
    if refused is None and size > max_member:
        refused = _too_big(name, size, ext.limits, ext.url, start)
    return (name, start) if refused is None else Refused(name, refused, start)


def _bad_size(header: bytes, exn: Exception, url: object, offset: int) -> TarFormatError:
    """A header whose size field is not a number: a bad value when its checksum holds, else a corrupt header."""
    if checksum_ok(header):
        return TarFormatError(f"bad member size in tar header ({exn})", url=url, offset=offset)
    return corrupt_header(offset, url)


def _too_big(member: str | None, size: int, limits: DecodeLimits, url: object, offset: int) -> OverLimitError:
    what = f"member {member!r} is" if member is not None else "a tar extension header is"
    return limits.over(what, size, "field_bytes", "tarfile_to_samples", url=url, member=member, offset=offset)


def members_before(out: list[Item], offset: int) -> list[Item]:
    """The members of ``out`` that start before ``offset`` (those before a corrupt header)."""
    return [m for m in out if m[2] < offset]
