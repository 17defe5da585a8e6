"""The optional compiled tar walk (``tarscan.c``), and the files it reads from.

``setup.py`` builds ``wds_core._native.tarscan`` when a C compiler is there; :mod:`.tario` hands it the common
case, runs of plain regular members, and walks everything else in Python (with the same results:
tests/core/test_fuzz.py compares them).  ``WDS_TARSCAN=python`` leaves it unused.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Callable, Generator

from .._native import load
from ..io.localfiles import map_file as map_local_file
from .source import CHUNK

__all__ = ["MAP_FILES", "SCAN", "compiled_walk", "file_size", "mapped_file", "walk_file"]


def _load() -> Callable[..., int] | None:
    """The C walk of plain regular members (tarscan.c), unless it was not built or ``WDS_TARSCAN=python``."""
    module = load("tarscan")
    return None if module is None else module.scan


SCAN = _load()  # what tario calls (read at each walk: tests set it to None for the Python walk alone)


def compiled_walk() -> bool:
    """Whether the compiled helper walks plain members here (else every header is parsed in Python)."""
    return SCAN is not None


def file_size(fd: int) -> int:
    """The size of the regular file ``fd`` (-1 for none, or anything else)."""
    if fd < 0:
        return -1
    try:
        info = os.fstat(fd)
    except OSError:
        return -1
    return info.st_size if stat.S_ISREG(info.st_mode) else -1


def mapped_file(stream: object, mapped: mmap.mmap | None) -> int:
    """The descriptor of the file ``mapped`` maps, when ``stream`` is that file (-1 otherwise): the compiled walk
    reads headers from it, leaving the map's pages to whoever reads the members' data (tarscan.c says why)."""
    fileno = getattr(stream, "fileno", None)
    if mapped is None or fileno is None:
        return -1
    try:
        fd = fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return -1
    return fd if file_size(fd) == len(mapped) else -1


MAP_FILES = True  # walk_file copies members out of a map of the file (tests set it to False for plain reads)
RELEASE_EVERY = 16 << 20  # bytes of a mapped file walked past before their pages are let go from the map


def walk_file(
    scan: Callable[..., int], fd: int, at: int, size: int, max_member: int, chunk: int = CHUNK, map_file: bool = True
) -> Generator[tuple[str, bytes, int], None, int]:
    """Plain members of the local file ``fd`` (``size`` bytes) from the header at ``at``, each copied once
    into a ``bytes`` of its own, ``chunk`` bytes' worth at a time (at least a member); returns where it stopped:
    at what the Python walk is to go on with (an extension header, a member over ``max_member``, the end of the
    archive, a cut or a damaged header).

    The members are copied out of a map of the file: on this machine a copy from a fresh map (a page fault maps
    16 pages of the page cache) costs 10% less a sample than reading them with ``pread``, whose every page is
    looked up apart.  tarscan.c guards those copies against the file being cut while it is mapped (SIGBUS): the
    walk then stops before the member and the Python walk reports the cut.  The pages walked past are let go
    every ``RELEASE_EVERY`` bytes, so that a shard of gigabytes does not stay in the process's resident memory
    while it is read.  Without a map (``map_file`` false, or a file that cannot be mapped), each member is read
    with ``pread``: a reader of many shards at once reads them so, or each would keep the part of its shard read
    so far in the process's resident memory until the shard ends."""
    mapped = map_local_file(fd, size) if map_file and MAP_FILES else None
    if mapped is None:
        while True:
            taken: list[tuple[str, bytes, int]] = []
            stop = scan(None, None, at, size, 0, max_member, taken, fd, 0, chunk)
            if stop == at:
                return at
            at = stop
            yield from taken
    size, released = len(mapped), at - at % mmap.PAGESIZE
    try:
        while True:
            taken = []
            stop = scan(mapped, mapped, at, size, 0, max_member, taken, -1, size + 1, chunk)
            if stop > size and stop != at:  # the file ends inside the last member's padding: the Python walk reports it
                stop = taken.pop()[2]
            if stop == at:
                return at
            at = stop
            if at - released >= RELEASE_EVERY and hasattr(mapped, "madvise"):  # not on Windows
                done = at - at % mmap.PAGESIZE
                mapped.madvise(mmap.MADV_DONTNEED, released, done - released)
                released = done
            yield from taken
    finally:
        mapped.close()
