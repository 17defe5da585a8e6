"""Indexed random access to the same tar shards: ``ShardListDataset`` (the wids capability, framework-free).

``ds = ShardListDataset("dataset.json")`` (a wids v1 descriptor, local or at
any URL), ``ShardListDataset(["a.tar", "b.tar"])`` or a brace spec; ``len(ds)``
and ``ds[i]`` give the *i*-th sample of the concatenated shards, the same dict
streaming gives (``__key__``, ``__url__``, fields without a leading dot as
bytes) plus ``__index__`` (the global index), ``__shard__`` (the shard URL) and
``__shardindex__`` (its position in the list).

* Each shard's offset index (:mod:`wds_core.tar.tarindex`) comes from the sidecar
  ``<shard>.idx`` when there is an up-to-date one, else from ``cache_dir``,
  else it is built by walking the headers (never reading member data) and
  kept in memory and, with ``cache_dir``, on disk.
* Local shards are memory-mapped.  Remote shards (``remote="ranges"``, the
  default) are read by byte ranges: one request per sample, no download; with
  ``remote="download"`` each shard is downloaded once into ``cache_dir``
  (an LRU of ``cache_size`` bytes, atomic) and memory-mapped.
* Compressed shards (``.tgz`` and the like) are decompressed once into
  ``cache_dir``; without one they are a clear error (a compressed stream has
  no offsets to jump to).
* ``decode`` (image spec string, :class:`~wds_core.Decoder` or callable) and
  ``transformations`` (callables, applied in order) run on each sample.
* At most ``max_open`` shards are open at once (least recently used closed).
* ``use_stored_indexes=False`` ignores sidecar and cached indexes and builds
  every index from the shard itself.
* A descriptor is data: a ``pipe:`` shard URL in it is refused unless ``allow_pipe=True``.
* ``limits`` (default: the configuration file's ``decode_limits``) bound what
  a sample may take, as when streaming: a member over ``field_bytes``, or a
  sample whose members pass ``sample_bytes``, is an :class:`OverLimitError`
  naming shard, member and offset, raised before any of it is read; indexes
  are built and checked as the streaming reader reads headers.
"""

from __future__ import annotations

import bisect
import os
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import ShardOpenError, SpecError, TruncatedShardError
from ..io import files
from ..io.cache import ShardCache
from ..io.decompress import is_compressed
from ..io.forklocks import ForkSafeLock
from ..io.remote.retries import DEFAULT_RETRY, RetryPolicy
from ..io.secure import check_allowed
from ..io.storage import RandomAccess, Storage, local_path, local_random_access, storage_argument
from ..io.urls import expand_urls
from ..limits import DecodeLimits
from ..sources.descriptor import load_descriptor
from ..stages.decode import Decoder
from ..tar.grouping import group_members
from ..tar.tarindex import ShardIndex, index_shard
from ..tar.tario import open_decompressed

__all__ = ["ShardListDataset"]


class ShardListDataset:
    """Random access to the samples of a list of shards (see the module doc).

    ``source`` is a descriptor (a ``.json`` path or URL, its parsed dict, or an
    open file of it), a brace spec, or a list of shard URLs or entries.
    ``ShardListDataset[T]`` may be used in annotations, as wids' class can.
    """

    def __class_getitem__(cls, item: Any) -> types.GenericAlias:
        return types.GenericAlias(cls, item)

    def __init__(
        self,
        source: str | dict[str, Any] | Iterable[Any],
        *,
        cache_dir: str | os.PathLike | None = None,
        cache_size: int | None = None,
        storage: Storage | dict | None = None,
        remote: str = "ranges",
        decode: Any = None,
        transformations: Iterable[Callable[[dict], Any]] = (),
        max_open: int = 16,
        retry: RetryPolicy = DEFAULT_RETRY,
        use_stored_indexes: bool = True,
        limits: Any = None,
        allow_pipe: bool = False,
        storage_options: Storage | dict | None = None,
    ) -> None:
        storage = storage_argument("ShardListDataset", storage, storage_options)
        if remote not in ("ranges", "download"):
            raise SpecError(f"remote must be 'ranges' or 'download', got {remote!r}")
        if remote == "download" and cache_dir is None:
            raise SpecError("remote='download' needs a cache_dir to download the shards into")
        self.storage, self.remote = Storage.of(storage, retry=retry), remote
        self.cache_dir = None if cache_dir is None else os.path.abspath(os.fspath(cache_dir))
        self.cache = None if self.cache_dir is None else ShardCache(self.cache_dir, cache_size)
        self.decoder = Decoder(decode) if isinstance(decode, str) else decode
        self.transformations = list(transformations)
        self.max_open = max(1, int(max_open))
        self.use_stored_indexes = use_stored_indexes
        self.limits = DecodeLimits.of(limits)
        self.shards = self._shardlist(source, allow_pipe)
        self._indexes: dict[str, ShardIndex] = {}
        self._open: OrderedDict[str, RandomAccess] = OrderedDict()
        self._lock = ForkSafeLock()
        counts = [shard["nsamples"] for shard in self.shards]
        for i, count in enumerate(counts):
            if count is None:  # not in the descriptor: the index says
                counts[i] = len(self._index_of(i))
                self.shards[i]["nsamples"] = counts[i]
        self.cumulative = [0]
        for count in counts:
            self.cumulative.append(self.cumulative[-1] + count)

    @property
    def storage_options(self) -> dict | None:
        """The explicit storage options (of the storage context, ``storage``)."""
        return self.storage.options

    # -------------------------------------------------------------- the shard list

    def _shardlist(self, source: Any, allow_pipe: bool) -> list[dict[str, Any]]:
        if isinstance(source, dict) or hasattr(source, "read"):  # a descriptor, parsed or as an open file
            return load_descriptor(source, self.storage, allow_pipe)["shardlist"]
        if isinstance(source, (str, os.PathLike)):
            text = os.fspath(source)
            if text.endswith(".json"):
                return load_descriptor(text, self.storage, allow_pipe)["shardlist"]
            source = expand_urls(text)
        shards = []
        for item in source:
            entry = dict(item) if isinstance(item, dict) else {"url": os.fspath(item)}
            entry.setdefault("nsamples", None)
            shards.append(entry)
        if not shards:
            raise SpecError("ShardListDataset needs at least one shard")
        return shards

    def __len__(self) -> int:
        return self.cumulative[-1]

    def shard_of(self, index: int) -> tuple[int, int]:
        """``(shard number, sample number within it)`` of global ``index``."""
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"sample index {index} out of range for {len(self)} samples")
        shard = bisect.bisect_right(self.cumulative, index) - 1
        return shard, index - self.cumulative[shard]

    # -------------------------------------------------------------- opening shards

    def _open_shard(self, number: int) -> RandomAccess:
        entry = self.shards[number]
        url = entry["url"]
        with self._lock:
            shard = self._open.get(url)
            if shard is not None:
                self._open.move_to_end(url)
                return shard
            shard = self._new_shard(url, entry.get("filesize"))
            self._open[url] = shard
            while len(self._open) > self.max_open:
                _, old = self._open.popitem(last=False)
                old.close()
            return shard

    def _new_shard(self, url: str, filesize: int | None) -> RandomAccess:
        target = self.storage.rewrite(url)
        path = local_path(target)
        if path is None and self.remote == "download":
            path = self._download(url, target)
        if path is not None:
            shard = local_random_access(path, url)
            if is_compressed(shard.read_at(0, 6)):
                shard.close()
                shard = local_random_access(self._decompressed(path, url), url)
            return shard
        shard = self.storage.random_access(url, filesize)
        if is_compressed(shard.walk(0, 6)):
            raise ShardOpenError(
                "the shard is compressed: random access needs an uncompressed tar; give cache_dir with "
                "remote='download' to decompress it once into the cache",
                url=url,
            )
        return shard

    def _download(self, url: str, target: str) -> str:
        assert self.cache is not None
        path = self.cache.path_for(url)
        if not files.exists(path):
            check_allowed(target)
            backend = self.storage.backend(target)
            with self.cache.open(url, lambda: backend.open(target, self.storage)) as stream:
                while stream.read(1 << 22):
                    pass
        if not files.exists(path):
            raise ShardOpenError(f"could not keep a downloaded copy in {self.cache_dir}", url=url)
        return path

    def _decompressed(self, path: str, url: str) -> str:
        if self.cache is None:
            raise ShardOpenError(
                "the shard is compressed: random access needs an uncompressed tar; give cache_dir to "
                "decompress it once into the cache",
                url=url,
            )
        out = self.cache.path_for(url) + ".decompressed.tar"
        if not files.exists(out):
            files.makedirs(os.path.dirname(out))
            with files.open_file(path, "rb") as raw:
                stream, _ = open_decompressed(raw)
                try:
                    files.copy_stream(stream, out)
                except EOFError:
                    raise TruncatedShardError("compressed data ends early", url=url) from None
        return out

    # -------------------------------------------------------------- indexes

    def _index_of(self, number: int) -> ShardIndex:
        url = self.shards[number]["url"]
        index = self._indexes.get(url)
        if index is not None:
            return index
        cached = None if self.cache is None else self.cache.path_for(url) + ".idx"
        shard = self._open_shard(number)
        index = index_shard(
            url, self.storage, fresh=not self.use_stored_indexes, shard=shard, cache_path=cached,
            limits=self.limits,
        )  # fmt: skip
        expected = self.shards[number].get("nsamples")
        if expected is not None and expected != len(index):
            raise SpecError(
                f"the descriptor says {url} has {expected} samples, its index finds {len(index)}; "
                "the descriptor is out of date"
            )
        self._indexes[url] = index
        return index

    # -------------------------------------------------------------- samples

    def __getitem__(self, index: int) -> Any:
        number, within = self.shard_of(int(index))
        url, rows = self.sample_rows(number, within)
        sample = next(group_members(iter(rows), url, path=local_path(url)))
        sample["__index__"] = index if index >= 0 else index + len(self)
        sample["__shard__"] = url
        sample["__shardindex__"] = number
        if self.decoder is not None:
            sample = self.decoder(sample)
        for transform in self.transformations:
            sample = transform(sample)
        return sample

    def sample_rows(self, number: int, within: int) -> tuple[str, list[tuple[str, Any, int]]]:
        """``(url, [(member name, data, header offset), ...])`` of sample ``within`` of shard ``number``, read
        whole (a member cut short is a :class:`TruncatedShardError`) and within the limits."""
        shard_index = self._index_of(number)
        shard = self._open_shard(number)
        members = shard_index.sample_members(within)
        url = self.shards[number]["url"]
        self._check_limits(url, members)
        if shard.ranged and members:
            first, last = members[0][2], members[-1][2] + members[-1][3]
            block = shard.read_at(first, last - first)
            rows = [(name, block[d - first : d - first + s], h) for name, h, d, s in members]
        else:
            rows = shard.read_members(members)
        for (name, data, _), (_, _, start, size) in zip(rows, members):
            if len(data) != size:  # the shard was cut (or changed) after it was indexed: never a short member
                raise TruncatedShardError(
                    f"the shard ends {size - len(data)} bytes before the end of the member its index gives",
                    url=url,
                    member=name,
                    offset=start + len(data),
                )
        return url, rows

    def _check_limits(self, url: str, members: list[tuple[str, int, int, int]]) -> None:
        """Refuse a sample whose members are over the limits before reading any of it."""
        limits, total = self.limits, 0
        for name, header, _, size in members:
            total += size
            if size > limits.field_bytes:
                what = f"member {name!r} is"
                raise limits.over(what, size, "field_bytes", "ShardListDataset", url=url, member=name, offset=header)
            if total > limits.sample_bytes:
                what = f"the members of the sample with {name!r} add up to"
                raise limits.over(what, total, "sample_bytes", "ShardListDataset", url=url, member=name, offset=header)

    def close(self) -> None:
        with self._lock:
            for shard in self._open.values():
                shard.close()
            self._open.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"], state["_lock"] = OrderedDict(), None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = ForkSafeLock()

    def __repr__(self) -> str:
        return f"ShardListDataset({len(self.shards)} shards, {len(self)} samples)"
