"""Tar headers in, with byte offsets: the project's own streaming tar reader.

:func:`iter_members` walks a tar stream and yields ``(name, data, offset)`` for
every regular file, where ``offset`` is the position of the member's first
header (its GNU long-name or pax header when it has one), and a
:class:`~.members.Refused` for a member it refused over the limits.  It understands
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
from typing import BinaryIO, Literal, overload

from ..io.decompress import open_decompressed
from ..limits import DecodeLimits
from .compiled import compiled_walk
from .headers import BLOCK
from .members import Item, Member, Refused, TarOptions
from .source import CHUNK
from .walk import Walk

__all__ = ["BLOCK", "Refused", "TarOptions", "compiled_walk", "iter_members", "open_decompressed"]


@overload
def iter_members(
    stream: BinaryIO,
    url: object = None,
    *,
    start_offset: int = 0,
    pax_global: dict[str, str] | None = None,
    want: Callable[[str], bool] | None = None,
    limits: DecodeLimits | None = None,
    over_limit: Literal["raise"] = "raise",
    mapped: mmap.mmap | None = None,
    fd: int = -1,
    chunk: int = CHUNK,
    map_file: bool = True,
    options: None = None,
) -> Iterator[Member]: ...


@overload
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
    options: TarOptions | None = None,
) -> Iterator[Item]: ...


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
    options: TarOptions | None = None,
) -> Iterator[Item]:
    """Yield ``(name, data, offset)`` for each regular file in a tar stream, from ``start_offset`` (a header
    boundary of the uncompressed tar: :func:`open_decompressed` first) to the first end-of-archive block.

    ``pax_global``: the global pax records in force there (updated in place).  ``want(name)`` false skips a
    member's data, a megabyte at a time.  ``limits`` (default: the configuration file's, else
    :class:`~wds_core.limits.DecodeLimits`'s) refuses a member, or extension headers, over their limit before
    reading them: an :class:`OverLimitError` raised, or with ``over_limit="skip"`` a
    :class:`~.members.Refused` yielded in its place.  ``options`` (a :class:`~.members.TarOptions`) gives
    ``want``, ``limits``, the choice over a limit, ``chunk`` and ``map_file`` at once, instead of these keywords.
    ``mapped`` (the shard memory-mapped) gives members of ``MAPPED_COPY`` bytes and more as views of the map;
    ``fd`` (a plain local file's descriptor) lets the compiled walk read headers and data from the file itself
    (mapped, or with ``pread`` when ``map_file`` is false); ``chunk`` is how much is walked at a time (small for a
    reader holding many shards open).  A stream that ends early is a :class:`TruncatedShardError`, a corrupt header
    a :class:`TarFormatError`; the members before the problem have all been yielded by then.
    """
    if options is None:
        if over_limit not in ("raise", "skip"):
            raise ValueError(f"over_limit must be 'raise' or 'skip', got {over_limit!r}")
        options = TarOptions(want, limits, over_limit == "skip", chunk, map_file)
    walk = Walk(stream, url, start_offset, pax_global, options, mapped, fd)
    yield from walk.members(options.map_file)
