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
single copy.  The walk itself, window by window, is :mod:`.walk`.

Writing is in :mod:`wds_core.tar.tarwrite`.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..io.decompress import open_decompressed
from ..limits import DecodeLimits
from .compiled import compiled_walk
from .headers import (
    BLOCK,
    ENDS_IN_HEADER,
    corrupt_header,
    first_bad_checksum,
)
from .source import CHUNK
from .walk import Member, Walk, members_before

__all__ = ["BLOCK", "compiled_walk", "iter_members", "open_decompressed"]


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
    walk = Walk(stream, url, start_offset, pax_global, want, limits, over_limit == "skip", mapped, fd, chunk)
    while True:
        if walk.size_of_file >= 0 and walk.ext.plain and walk.src.pending is None:
            yield from walk.from_file(stream, map_file)
        origin, n = walk.next_window()
        out, headers, pos, n, straddle, ended, problem = walk.walk(origin, n)
        bad = first_bad_checksum(walk.buf, headers, origin)
        if bad >= 0:
            yield from members_before(out, walk.base + headers[bad])
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
