"""Local shards: a path or ``file://`` URL opened unbuffered or memory-mapped, standard input, and the URL of a
shard-list item.  The local backend of :mod:`~wds_core.io.backends` is made of these."""

from __future__ import annotations

import functools
import io
import mmap
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from .._native import load
from ..errors import ShardNotFoundError, ShardOpenError
from .files import open_file
from .streams import ReadStream

__all__ = [
    "RandomAccess",
    "StdinStream",
    "file_descriptor",
    "local_path",
    "local_random_access",
    "map_file",
    "map_whole",
    "not_found",
    "open_local",
    "url_of",
]


def url_of(item: Any) -> str:
    """The URL of a shard-list item: a string, a path, or webdataset's ``{"url": ...}``."""
    if isinstance(item, dict):
        item = item.get("url")
    if isinstance(item, os.PathLike):
        item = os.fspath(item)
    if not isinstance(item, str):
        raise TypeError(f"expected a shard URL, got {type(item).__name__}: {item!r}")
    return item


def local_path(url: str) -> str | None:
    """The filesystem path of a local shard URL, or ``None`` for anything else."""
    if url.startswith("file://"):
        return url[len("file://") :]
    if url == "-" or url.startswith("pipe:") or "://" in url:
        return None
    return url


def not_found(url: str) -> str:
    """What to say of a local shard that is not there: a name with wildcards (``train-*.tar``, quoted so that the
    shell left them) is taken as it is, which the message says."""
    if "*" in url or "?" in url:
        return (
            "shard not found (wildcards are not expanded in a shard spec: name shards with braces, as in "
            "train-{000000..000099}.tar, or let the shell expand them)"
        )
    return "shard not found"


def open_local(path: str, url: str) -> BinaryIO:
    """A local shard file, unbuffered, with wds's errors for a missing or unreadable one."""
    try:
        return open_file(path, "rb", buffering=0)  # type: ignore[no-any-return]  # secure mode: checked on the file
    except FileNotFoundError:
        raise ShardNotFoundError(not_found(url), url=url) from None
    except OSError as exn:
        raise ShardOpenError(f"cannot open shard: {exn.strerror or exn}", url=url) from None


class StdinStream(ReadStream):
    """Standard input, left open when the reader closes the stream."""

    def read(self, size: int = -1) -> bytes:
        return sys.stdin.buffer.read(size)


class RandomAccess:
    """One shard's bytes by offset: ``read_at(offset, n)`` and its ``size``.

    ``walk`` is what a header walk reads through (for a remote shard, windows
    around the headers); ``ranged`` says that every read is a request, so a
    sample's members are best read with one.  ``read_members(rows)`` reads a
    sample's members from their index rows ``(name, header, data, size)`` as
    ``(name, bytes, header)``: for a mapped local shard in one call of the
    compiled helper, else with ``read_at`` each.
    """

    def __init__(
        self,
        url: str,
        size: int,
        read_at: Callable[[int, int], bytes],
        close: Callable[[], None],
        walk: Callable[[int, int], bytes] | None = None,
        ranged: bool = False,
        read_members: Callable[[list[Any]], list[tuple[str, bytes, int]]] | None = None,
    ) -> None:
        self.url, self.size, self.read_at, self.close = url, size, read_at, close
        self.walk = read_at if walk is None else walk
        self.ranged = ranged
        self.read_members = read_members or self._read_members

    def _read_members(self, rows: list[Any]) -> list[tuple[str, bytes, int]]:
        read = self.read_at
        return [(name, read(start, size), header) for name, header, start, size in rows]


def file_descriptor(stream: Any) -> int:
    """The descriptor of an open local file (-1 for anything else: a remote stream, a closed file).  It may be a
    pipe or a device: whoever reads it directly checks that it is a regular file (``iter_members``, ``map_whole``)."""
    if not isinstance(stream, io.FileIO):
        return -1
    try:
        return stream.fileno()
    except ValueError:  # closed
        return -1


def map_whole(stream: Any) -> mmap.mmap | None:
    """An open local shard file memory-mapped whole (read only), or None for anything else (a pipe, a remote
    stream, an empty file)."""
    fd = file_descriptor(stream)
    if fd < 0:
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        return None  # read as a stream then, which reports what is wrong
    return map_file(fd) if stat.S_ISREG(info.st_mode) else None


def map_file(fd: int, at_least: int = 0) -> mmap.mmap | None:
    """The file ``fd`` mapped whole, read only; None when it cannot be mapped (empty, or not a file that maps) or
    is shorter than ``at_least`` bytes (cut since it was measured)."""
    try:
        mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    if len(mapped) < at_least:
        mapped.close()
        return None
    return mapped


def local_random_access(path: str, url: str) -> RandomAccess:
    """A local file read by offset: ``read_at(offset, n)`` gives up to ``n`` bytes, fewer only where the file ends.

    The file is mapped, and the compiled helper ``wds_core._native.mapcopy`` copies each read out of the map (pages
    once mapped stay mapped: 20% faster than ``pread`` for random samples of 10 KB here).  Reading a page of a
    map past the end of a file cut after it was mapped is a ``SIGBUS``, which ends the process; the helper
    guards its copies against it and such a read is then made with ``pread``, which comes back short, and the
    reader reports the cut (with its member and offset).  Without the helper, every read is a ``pread``, each
    sample's members with one (``ranged``).
    """
    stream = open_local(path, url)
    fd = stream.fileno()
    size = os.fstat(fd).st_size

    def read(offset: int, n: int) -> bytes:
        if offset < 0 or n <= 0:
            return b""
        parts, got = [], 0
        while got < n:
            piece = os.pread(fd, n - got, offset + got)
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    helper = _mapped_copy()
    mapped = map_file(fd) if helper is not None and size else None
    if helper is None or mapped is None:
        return RandomAccess(url, size, read, stream.close, ranged=True)  # a sample's members with one read
    copy, read_members = helper

    def read_mapped(offset: int, n: int) -> bytes:
        data = copy(mapped, offset, n) if offset >= 0 else b""
        return read(offset, n) if data is None else data  # None: the file was cut

    def close() -> None:
        mapped.close()
        stream.close()

    # a sample's members in one call: one guarded stretch (entering and leaving it are a system call each)
    members = functools.partial(read_members, mapped, fd)
    return RandomAccess(url, size, read_mapped, close, read_members=members)


def _mapped_copy() -> tuple[Callable[[Any, int, int], bytes | None], Any] | None:
    """The compiled guarded copies out of a map (mapcopy.c: ``copy`` and ``read_members``), if they were built."""
    module = load("mapcopy")
    return None if module is None else (module.copy, module.read_members)
