"""wids's shards: one shard's samples by index (:class:`IndexedTarSamples`), where a remote shard's local copy goes
(:class:`CacheLocalname`, :class:`DefaultLocalname`, :func:`hash_localname`) and the least-recently-used set of
open shards (:class:`LRUShards`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlparse

from ..errors import ShardOpenError, SpecError, redact_url
from ..indexed.dataset import ShardListDataset as _Reader
from ..io import files
from ..io.secure import check_allowed
from ..io.storage import Storage, local_path

__all__ = [
    "CacheLocalname",
    "DefaultLocalname",
    "IndexedTarSamples",
    "LRUShards",
    "group_by_key",
    "cache_localname",
    "compute_file_md5sum",
    "compute_num_samples",
    "default_localname",
    "get_cache_path",
    "hash_localname",
    "splitname",
]


class CacheLocalname:
    """A remote shard's local name: its file name in ``cachedir``."""

    def __init__(self, cachedir: str) -> None:
        self._cachedir = cachedir

    def __call__(self, shard: str) -> str:
        return os.path.join(self._cachedir, os.path.basename(urlparse(shard).path))


class DefaultLocalname:
    """A remote shard's local name: its whole URL, quoted, in ``dldir``."""

    def __init__(self, dldir: str = "/tmp/_wids_cache") -> None:
        self._dldir = dldir

    def __call__(self, shard: str) -> str:
        return os.path.join(self._dldir, quote(shard, safe="+-"))


def default_localname(dldir: str = "/tmp/_wids_cache") -> Callable[[str], str]:
    """wids 0.1.x's earlier name: the folder made, and :class:`DefaultLocalname` of it (the whole URL, quoted)."""
    files.makedirs(dldir)
    return DefaultLocalname(os.fspath(dldir))


def cache_localname(cachedir: str) -> Callable[[str], str]:
    """wids 0.1.x's earlier name: the folder made, and :class:`CacheLocalname` of it (the URL's file name)."""
    files.makedirs(cachedir)
    return CacheLocalname(os.fspath(cachedir))


def get_cache_path(shard: str, cachedir: str) -> str:
    """wids 0.1.x's: where ``shard`` goes in ``cachedir`` (its URL's file name)."""
    return CacheLocalname(cachedir)(shard)


def compute_file_md5sum(fname: Any, chunksize: int = 1000000) -> str:
    """The MD5 of a file (a path, or an open binary file read from its start), read ``chunksize`` bytes at a time."""
    digest = hashlib.md5()
    if isinstance(fname, (str, os.PathLike)):
        with files.open_file(fname, "rb") as stream:
            while chunk := stream.read(chunksize):
                digest.update(chunk)
    else:
        fname.seek(0)
        while chunk := fname.read(chunksize):
            digest.update(chunk)
    return digest.hexdigest()


def compute_num_samples(fname: str) -> int:
    """How many samples the local tar ``fname`` holds."""
    return len(IndexedTarSamples(path=fname))


def hash_localname(dldir: str = "/tmp/_wids_cache") -> Callable[[str], str]:
    """Local names in ``dldir`` that keep shards of different folders (or ``pipe:`` commands) apart: a hash of
    the folder (of the whole command) with the file name."""
    files.makedirs(dldir)

    def localname(shard: str) -> str:
        if shard.startswith("pipe:"):
            return os.path.join(dldir, "pipe__" + name_hash(shard) * 2)
        parsed = urlparse(shard)
        folder = parsed._replace(path=os.path.dirname(parsed.path)).geturl()
        return os.path.join(dldir, f"data__{name_hash(folder)}__{os.path.basename(parsed.path)}")

    return localname


class _Capacity(OrderedDict):  # type: ignore[type-arg]
    """The open shards, least recently used first, with wids's ``capacity`` attribute."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity


class LRUShards:
    """The ``lru_size`` shards last used, open; a remote shard is downloaded once to ``localname(url)``."""

    def __init__(
        self,
        lru_size: int,
        keep: bool = False,
        localname: Callable[[str], str] | None = None,
        storage: Storage | None = None,
    ) -> None:
        self.localname = localname or DefaultLocalname(os.environ.get("WIDS_CACHE", "/tmp/_wids_cache"))
        self.keep = keep  # downloaded shards are kept (wids 0.1.11 keeps them too, whatever keep says)
        self.storage = storage or Storage.of(None)
        self.lru = _Capacity(max(1, int(lru_size)))
        self.reset_stats()

    def reset_stats(self) -> None:
        self.accesses = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self.lru)

    def clear(self) -> None:
        while self.lru:
            _, shard = self.lru.popitem(last=False)
            shard.close()

    def get_shard(self, url: str, nsamples: int | None = None) -> IndexedTarSamples:
        if not isinstance(url, str):
            raise TypeError(f"a shard URL is a string, got {type(url).__name__}")
        self.accesses += 1
        shard = self.lru.get(url)
        self.last_missed = shard is None
        if shard is not None:
            self.lru.move_to_end(url)
            return shard  # type: ignore[no-any-return]
        self.misses += 1
        shard = IndexedTarSamples(path=self._local(url), expected_size=nsamples, url=url)
        self.lru[url] = shard
        while len(self.lru) > self.lru.capacity:
            _, old = self.lru.popitem(last=False)
            old.close()
        return shard

    def _local(self, url: str) -> str:
        target = self.storage.rewrite(url)
        path = local_path(target)
        if path is not None:
            check_allowed(target)
            return path
        local = self.localname(url)
        if not files.exists(local):  # the download lands where a shard could be read from (secure mode's roots)
            check_allowed(target)
            files.makedirs(os.path.dirname(local) or ".")
            with self.storage.open(target) as stream:
                files.copy_stream(stream, local)
        return local


def splitname(fname: str) -> tuple[str, str]:
    """``(key, extension)`` of a member name as wids splits it: at the first dot of the file name, the dot
    going with the extension (``"a/b.seg.png"`` -> ``("a/b", ".seg.png")``)."""
    folder, _, name = fname.rpartition("/")
    if "." not in name:
        raise ValueError(f"the member name {fname!r} has no extension")
    stem, _, rest = name.partition(".")
    return (f"{folder}/{stem}" if folder else stem), "." + rest


def group_by_key(names: list[str]) -> list[list[int]]:
    """The positions of ``names`` grouped into samples: runs of consecutive names with one key (names
    without an extension are left out, as wids does)."""
    groups: list[list[int]] = []
    last = None
    for i, name in enumerate(names):
        if "." not in name.rpartition("/")[2]:
            continue
        key = splitname(name)[0]
        if key != last or not groups:
            groups.append([])
            last = key
        groups[-1].append(i)
    return groups


class IndexedTarSamples:
    """One shard's samples by position, as wids's dicts (``{".ext": io.BytesIO, "__key__": key}``).

    ``path`` is a local tar file (``stream``, an open file of one, is taken for its name); ``md5sum`` is
    checked first and ``expected_size`` (the number of samples) against the index.
    """

    def __init__(
        self,
        *,
        path: str | None = None,
        stream: Any = None,
        md5sum: str | None = None,
        expected_size: int | None = None,
        use_mmap: bool = True,
        index_file: Any = None,
        url: str | None = None,
    ) -> None:
        if path is None:
            path = getattr(stream, "name", None)
            if not isinstance(path, str) or not files.isfile(path):
                raise SpecError("IndexedTarSamples needs path= or a stream opened on a local file")
        self.path, self.url = path, url or path
        if md5sum is not None:
            with files.open_file(path, "rb") as f:
                got = hashlib.file_digest(f, "md5").hexdigest()
            if got != md5sum:
                raise ShardOpenError(f"MD5 sum mismatch: expected {md5sum}, got {got}", url=self.url)
        self._reader = _Reader([{"url": path, "nsamples": expected_size}], max_open=1)
        self.samples = len(self._reader)

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.samples:
            raise IndexError(f"sample {index} of a shard of {self.samples} ({redact_url(self.url)})")
        _, rows = self._reader.sample_rows(0, int(index))
        sample: dict[str, Any] = {}
        key = None
        for name, data, _ in rows:
            if "." not in name.rpartition("/")[2]:
                continue
            key, extension = splitname(name)
            sample[extension] = io.BytesIO(bytes(data))
        sample["__key__"] = key
        return sample

    def close(self) -> None:
        self._reader.close()

    def __repr__(self) -> str:
        return f"<IndexedTarSamples {self.path} ({self.samples} samples)>"


def name_hash(text: str) -> str:
    """A short name made of ``text`` (16 URL-safe characters of its SHA-256), as wids names datasets and the local
    copies of ``pipe:`` shards."""
    return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest())[:16].decode("ascii")
