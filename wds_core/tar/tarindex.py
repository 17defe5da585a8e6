"""Per-shard offset indexes: where every sample's members are, found by walking headers only.

Format (``wds-index-1``), a JSON file usually stored next to its shard as
``<shard>.idx`` (``shard-000.tar.idx``)::

    {"format": "wds-index-1",
     "size": 1048576000,            # bytes of the shard the index describes
     "members": [[name, header, data, size], ...]}

One row per regular member in archive order (metadata members ``__*__`` and
members without a key are left out): ``name`` as the streaming reader reports
it (GNU long names and pax ``path`` resolved), ``header`` the offset of its
first header (its long-name or pax header when it has one), ``data`` the
offset of its bytes and ``size`` their length.  Samples are the runs of
consecutive members with the same key, exactly as when streaming, so sample
``i`` of the index is the ``i``-th sample streaming yields.  An index whose
``size`` differs from the shard's is stale and is not used.

Building one reads only the headers: each header says how many bytes of data
follow, which are skipped with a seek (local shards are memory-mapped;
remote ones are read through windows around the headers).
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..errors import ShardNotFoundError, ShardOpenError, TarFormatError
from ..io import files
from ..io.decompress import is_compressed
from ..io.remote.rangestream import RetryPolicy
from ..io.storage import RandomAccess, Storage
from ..limits import DecodeLimits
from .headers import BLOCK, EMPTY
from .keys import is_meta, split_key
from .members import Refused
from .source import ByOffset
from .walk import Walk

__all__ = ["INDEX_FORMAT", "ShardIndex", "index_shard", "stored_index", "walk_headers"]

INDEX_FORMAT = "wds-index-1"

ReadAt = Callable[[int, int], bytes]


def walk_headers(
    read_at: ReadAt, size: int, url: object = None, limits: DecodeLimits | None = None
) -> Iterator[tuple[str, int, int, int]]:
    """``(name, header offset, data offset, data size)`` of every regular member, reading headers only.

    ``read_at(offset, n)`` returns up to ``n`` bytes at ``offset`` of the
    uncompressed tar, ``size`` is its length.  It is the streaming reader's
    walk (:meth:`~.walk.Walk.by_offset`), reading the headers and extension
    headers alone: the same names, offsets and errors (a size that is not a
    number or runs past the end names the offset; extension headers over
    ``limits.header_bytes`` are refused, an :class:`OverLimitError`, before
    their data is read), and every header's checksum is checked.
    """
    for item in Walk.by_offset(ByOffset(read_at, size), url, limits).members():
        span = item[1]
        if isinstance(item, Refused) or not isinstance(span, range):  # pragma: no cover - a walk by offset raises
            raise TypeError(f"a walk by offset gave {item!r}")  # its refusals and gives each member's offsets
        yield item[0], item[2], span.start, len(span)


@dataclass
class ShardIndex:
    """The members of one shard and where its samples start (see the module doc)."""

    size: int
    members: list[tuple[str, int, int, int]]
    starts: list[int] = field(default_factory=list)  # member row where each sample starts, plus the end

    def __post_init__(self) -> None:
        if not self.starts:
            self.starts = _sample_starts(self.members)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def sample_members(self, i: int) -> list[tuple[str, int, int, int]]:
        return self.members[self.starts[i] : self.starts[i + 1]]

    @classmethod
    def build(cls, read_at: ReadAt, size: int, url: object = None, limits: DecodeLimits | None = None) -> ShardIndex:
        """Walk the headers (:func:`walk_headers`, held to ``limits``) of a tar of ``size`` bytes."""
        rows = []
        for name, header, data, length in walk_headers(read_at, size, url, limits):
            if name[:1] == "_" and is_meta(name):
                continue
            if split_key(name)[0] is None:
                continue
            rows.append((name, header, data, length))
        return cls(size, rows)

    @classmethod
    def build_local(cls, path: str, url: object = None) -> ShardIndex:
        with files.open_file(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                raise TarFormatError(EMPTY, url=url or path, offset=0)
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
                return cls.build(lambda offset, n: view[offset : offset + n], size, url or path)

    def to_json(self) -> str:
        body = {"format": INDEX_FORMAT, "size": self.size, "members": [list(row) for row in self.members]}
        return json.dumps(body, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, where: object = None) -> ShardIndex:
        """An index read back; its rows must describe a tar of ``size`` bytes (a sidecar may come from anywhere:
        offsets that go backwards or past the end, or negative sizes, are refused)."""
        try:
            body = json.loads(text)
            if body.get("format") != INDEX_FORMAT:
                raise ValueError(f"format {body.get('format')!r}, expected {INDEX_FORMAT!r}")
            size = int(body["size"])
            rows = [(str(n), int(h), int(d), int(s)) for n, h, d, s in body["members"]]
            _check_rows(rows, size)
            return cls(size, rows)
        except (ValueError, KeyError, TypeError, AttributeError) as exn:
            raise TarFormatError(f"not a usable shard index: {exn}", url=where) from None

    def save(self, path: str, storage: Storage | None = None) -> None:
        """Write to a local path or any URL the storage layer writes (through ``storage``), atomically (never half
        an index)."""
        (storage or Storage()).write_bytes(path, self.to_json().encode())


def _check_rows(rows: list[tuple[str, int, int, int]], size: int) -> None:
    """Rows in archive order, each member's header before its data and its data inside the shard."""
    if size < 0:
        raise ValueError(f"a negative shard size {size}")
    end = 0
    for name, header, data, length in rows:
        if not (end <= header and header + BLOCK <= data and length >= 0 and data + length <= size):
            raise ValueError(
                f"member {name!r} at {header} (data {data}, {length} bytes) does not fit a {size}-byte tar"
            )
        end = data + length


def _sample_starts(members: list[tuple[str, int, int, int]]) -> list[int]:
    starts = []
    key = None
    for row, (name, _, _, _) in enumerate(members):
        k = split_key(name)[0]
        if k != key or row == 0:
            starts.append(row)
            key = k
    starts.append(len(members))
    return starts


def stored_index(
    url: str, size: int, storage: Storage | None = None, cache_path: str | None = None
) -> ShardIndex | None:
    """An up-to-date stored index of the shard (``size`` bytes): its ``<url>.idx`` sidecar, else ``cache_path``."""
    for where in (url + ".idx", cache_path):
        if where is None:
            continue
        try:
            text = (storage or Storage()).read_bytes(where)
        except (OSError, ShardNotFoundError, ShardOpenError):
            continue
        index = ShardIndex.from_json(text, where)
        if index.size == size:
            return index
    return None


def index_shard(
    url: str,
    storage: Storage | None = None,
    *,
    fresh: bool = False,
    shard: RandomAccess | None = None,
    cache_path: str | None = None,
    retry: RetryPolicy | None = None,
    size: int | None = None,
    limits: DecodeLimits | None = None,
) -> ShardIndex:
    """The offset index of one shard: an up-to-date stored one (see :func:`stored_index`), or built.

    ``storage`` is the storage context of the shard and its sidecar (``retry``, when given, replaces its retry
    policy).  ``size``, when known (a descriptor's ``filesize``), saves asking a remote
    store for it, and an up-to-date sidecar is then all that is read (one request).
    ``fresh`` always builds it.  ``shard`` is the shard already open for random
    access (:func:`~wds_core.io.storage.open_random_access`), else it is opened
    here, and a compressed shard is refused (it has no offsets to index).  A
    built index is saved at ``cache_path`` when given (an unwritable cache only
    costs building it again).
    """
    storage = Storage.of(storage, retry=retry)
    if size is not None and shard is None and not fresh:
        index = stored_index(url, size, storage, cache_path)
        if index is not None:  # built from this very shard, so not a compressed one
            return index
        fresh = True  # nothing stored: not asked for twice
    opened = shard is None
    if shard is None:
        shard = storage.random_access(url, size)
    try:
        if opened and is_compressed(shard.walk(0, 6)):
            raise ShardOpenError("the shard is compressed: an offset index needs an uncompressed tar", url=url)
        index = None if fresh else stored_index(url, shard.size, storage, cache_path)
        if index is None:
            index = ShardIndex.build(shard.walk, shard.size, url, limits)
            if cache_path is not None:
                try:
                    files.makedirs(os.path.dirname(cache_path))
                    index.save(cache_path)
                except OSError:
                    pass
        return index
    finally:
        if opened:
            shard.close()
