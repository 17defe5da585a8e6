"""``wids`` (webdataset's indexed-access package, 0.1.11) over wds's indexed engine, for ``import wids``.

This module has the dataset and the shard cache; ``widsdecode`` the decoding, ``widssamplers`` the samplers.
Code written for wids runs unchanged once the switch is on (``install_as_webdataset()``, or
``python -m wds_torch.run``): ``import wids`` gives this module's names, with wids's shapes.

* ``ShardListDataset(shards, cache_dir=, lru_size=, localname=, transformations="PIL", keep=, base=,
  options=, dataset_name=, cache_size=)``: ``shards`` is a wids descriptor (a path or URL of its JSON,
  or an open file) or a list of ``{"url", "nsamples"}`` entries.  A sample is wids's dict: each member
  under its extension *with* the leading dot (``".jpg"``, ``".seg.png"``) as an ``io.BytesIO``, plus
  ``__key__``, ``__dataset__``, ``__index__``, ``__shard__`` and ``__shardindex__`` (the sample's
  position within its shard), then each transformation in turn; the default, ``"PIL"``, is wids's
  :func:`default_decoder` (texts, class numbers, JSON, ``.npy``, msgpack; images as PIL images).
* ``ChunkedSampler``, ``DistributedChunkedSampler``, ``ShardListSampler`` (``ShardedSampler``) give
  the same indexes in the same order as wids's for the same arguments, seed and epoch.

What wds does underneath, and where it differs on purpose: each shard is read through wds's offset
index and memory map (a member cut short, a sample over the decode limits, or a descriptor whose
``nsamples`` no longer matches is an error naming shard, member and offset); local shards are read in
place instead of being copied into the cache; remote ones (any URL wds's storage reads) are
downloaded once to ``localname(url)`` (``cache_dir/<basename>`` with ``cache_dir``, else wids's
``$WIDS_CACHE`` or ``/tmp/_wids_cache`` layout); ``.pkl``/``.pickle`` fields are not unpickled unless
pickles are allowed, and ``.pth`` loads with ``weights_only=True``; ``DistributedChunkedSampler``
uses ``num_replicas``/``rank`` given explicitly even without a process group (wids falls back to one
process).
"""

from __future__ import annotations

import bisect
import os
import types
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from ..errors import SpecError
from ..io.storage import Storage
from ..io.urls import folder_of
from ..sources.descriptor import resolve_descriptor
from . import widsspecs
from .modulespecs import stand_in
from .widsdecode import (
    check_keys,
    decode_all_gz,
    decode_basic,
    decode_images_to_numpy,
    decode_images_to_pil,
    default_decoder,
)
from .widssamplers import (
    ChunkedSampler,
    DistributedChunkedSampler,
    ShardedSampler,
    ShardListSampler,
    intersect_range,
    intersect_ranges,
    iterate_ranges,
    lengths_to_ranges,
)
from .widsshards import (
    CacheLocalname,
    DefaultLocalname,
    IndexedTarSamples,
    LRUShards,
    cache_localname,
    compute_file_md5sum,
    compute_num_samples,
    default_localname,
    get_cache_path,
    group_by_key,
    hash_localname,
    name_hash,
    splitname,
)
from .widsspecs import load_dsdesc_and_resolve, urldir

__all__ = [
    "CacheLocalname",
    "ChunkedSampler",
    "DefaultLocalname",
    "DistributedChunkedSampler",
    "IndexedTarSamples",
    "LRUShards",
    "ShardListDataset",
    "ShardListSampler",
    "ShardedSampler",
    "cache_localname",
    "check_keys",
    "compute_file_md5sum",
    "compute_num_samples",
    "decode_all_gz",
    "decode_basic",
    "decode_images_to_numpy",
    "decode_images_to_pil",
    "default_decoder",
    "default_localname",
    "get_cache_path",
    "group_by_key",
    "hash_dataset_name",
    "hash_localname",
    "interpret_transformations",
    "intersect_range",
    "intersect_ranges",
    "iterate_ranges",
    "lengths_to_ranges",
    "load_dsdesc_and_resolve",
    "splitname",
    "urldir",
]

WIDS_VERSION = "0.1.11"  # the wids release whose names and behaviour this follows

# ---------------------------------------------------------------------------------------------- samples


hash_dataset_name = name_hash  # wids's name: 16 URL-safe characters of a SHA-256


def interpret_transformations(given: Any) -> list[Callable[[dict[str, Any]], Any]]:
    """wids's ``transformations=``: a callable or a list of them, ``"PIL"``/``"numpy"`` (deprecated) for
    :func:`default_decoder` in that format."""
    return _transformations(given)


def _transformations(given: Any) -> list[Callable[[dict[str, Any]], Any]]:
    items = given if isinstance(given, list) else [given]
    result = []
    for item in items:
        if isinstance(item, str) and item.lower() in ("pil", "numpy"):
            warnings.warn(
                "String specifications for transformations are deprecated. Use functions instead.", stacklevel=3
            )
            item = partial(default_decoder, format=item)
        elif not callable(item):
            raise SpecError(f"a transformation is a callable, 'PIL' or 'numpy', got {item!r}")
        result.append(item)
    return result


# ---------------------------------------------------------------------------------------------- the dataset


class ShardListDataset:
    """wids's ``ShardListDataset`` (see the module doc): ``len(ds)``, ``ds[i]``, ``add_transform(f)``."""

    def __class_getitem__(cls, item: Any) -> Any:
        return types.GenericAlias(cls, item)

    def __init__(
        self,
        shards: Any,
        *,
        cache_size: int = int(1e12),
        cache_dir: str | None = None,
        lru_size: int = 10,
        dataset_name: str | None = None,
        localname: Callable[[str], str] | None = None,
        transformations: Any = "PIL",
        keep: bool = False,
        base: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        options = dict(options or {})
        storage = Storage.of(None)
        if isinstance(shards, (str, os.PathLike)) or hasattr(shards, "read"):
            if isinstance(shards, (str, os.PathLike)) and base is None:
                base = folder_of(os.fspath(shards))
            self.base = base
            self.spec = self._descriptor(shards, options, base, storage)
            self.shards = self.spec.get("shardlist", [])
            self.dataset_name = self.spec.get("name") or name_hash(str(shards))
        else:
            self.base = None
            self.spec = options
            self.shards = [dict(s) if isinstance(s, dict) else {"url": os.fspath(s)} for s in shards]
            self.dataset_name = dataset_name or name_hash(str(shards))
        if not self.shards:
            raise SpecError("ShardListDataset needs at least one shard")
        self.cache_size = cache_size
        if cache_dir is not None:  # remote shards go into that folder under their own names
            self.cache_dir: str | None = cache_dir
            self.localname = localname if localname is not None else CacheLocalname(cache_dir)
        elif localname is not None:
            self.cache_dir, self.localname = None, localname
        else:
            self.cache_dir = os.environ.get("WIDS_CACHE", "/tmp/_wids_cache")
            self.localname = DefaultLocalname(self.cache_dir)
        self.transformations = _transformations(transformations)
        if lru_size > 200:
            warnings.warn(
                "LRU size is very large; consider reducing it to avoid running out of file descriptors", stacklevel=2
            )
        self.cache = LRUShards(lru_size, keep=keep, localname=self.localname, storage=storage)
        for shard in self.shards:  # wids needs every count; wds counts a shard that has none by indexing it
            if shard.get("nsamples") is None:
                shard["nsamples"] = len(self.cache.get_shard(shard["url"]))
        self.cache.reset_stats()
        self.lengths = [int(shard["nsamples"]) for shard in self.shards]
        self.cum_lengths = np.cumsum(self.lengths)
        self.total_length = int(self.cum_lengths[-1])

    @staticmethod
    def _descriptor(source: Any, options: dict[str, Any], base: str | None, storage: Storage) -> dict[str, Any]:
        """The descriptor resolved as wids resolves it: ``options`` laid over it, shard URLs against ``base``;
        its own shards carry its ``name`` and no ``dataset``, a nested dataset's carry that one's name."""
        import json

        where = getattr(source, "name", None) if hasattr(source, "read") else os.fspath(source)
        try:
            body = json.loads(source.read() if hasattr(source, "read") else storage.read_bytes(os.fspath(source)))
        except (OSError, ValueError) as exn:
            raise SpecError(f"{where}: cannot read the dataset descriptor: {exn}") from None
        if not isinstance(body, dict):
            raise SpecError(f"{where}: a descriptor is a JSON object, got {type(body).__name__}")
        body = dict(body, **options)
        name = body.pop("name", None)
        location = None if base is None else base.rstrip("/") + "/dataset.json"
        resolved = resolve_descriptor(body, location, storage)
        own = len(body.get("shardlist", []))
        for shard in resolved["shardlist"][:own]:
            shard.setdefault("name", name)
        resolved["name"] = name
        return resolved

    def add_transform(self, transform: Callable[[dict[str, Any]], Any]) -> ShardListDataset:
        """Add ``transform`` after the others; returns the dataset."""
        self.transformations.append(transform)
        return self

    def __len__(self) -> int:
        return self.total_length

    def get_stats(self) -> tuple[int, int]:
        """``(accesses, misses)`` of the open-shard cache."""
        return self.cache.accesses, self.cache.misses

    def check_cache_misses(self) -> None:
        """Warn once when over 30% of more than 100 accesses opened a shard (a sampler without locality)."""
        accesses, misses = self.get_stats()
        if accesses > 100 and misses / accesses > 0.3:
            self.check_cache_misses = lambda: None  # type: ignore[method-assign]
            warnings.warn(f"ShardListDataset has a cache miss rate of {misses / accesses:.1%}", stacklevel=3)

    def get_shard(self, index: int) -> tuple[IndexedTarSamples, int, dict[str, Any]]:
        """``(shard, position within it, its shardlist entry)`` of global ``index``."""
        index = int(index)
        if not 0 <= index < self.total_length:
            raise IndexError(f"sample index {index} out of range for {self.total_length} samples")
        number = bisect.bisect_right(self.cum_lengths.tolist(), index)
        within = index - (int(self.cum_lengths[number - 1]) if number else 0)
        desc = self.shards[number]
        return self.cache.get_shard(desc["url"], desc.get("nsamples")), within, desc

    def __getitem__(self, index: int) -> Any:
        shard, within, desc = self.get_shard(index)
        sample: Any = shard[within]
        self.check_cache_misses()
        sample["__dataset__"] = desc.get("dataset")
        sample["__index__"] = index
        sample["__shard__"] = desc["url"]
        sample["__shardindex__"] = within
        for transform in self.transformations:
            sample = transform(sample)
        return sample

    def close(self) -> None:
        self.cache.clear()

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers: each opens its own shards
        state = self.__dict__.copy()
        state["cache"] = LRUShards(self.cache.lru.capacity, self.cache.keep, self.localname, self.cache.storage)
        return state

    def __repr__(self) -> str:
        return f"ShardListDataset({len(self.shards)} shards, {self.total_length} samples; wids)"


# ---------------------------------------------------------------------------------------------- the modules

_TOP = ("ChunkedSampler", "DistributedChunkedSampler", "ShardedSampler", "ShardListDataset")
_DECODE = ("check_keys", "decode_all_gz", "decode_basic", "decode_images_to_numpy", "decode_images_to_pil")


def wids_modules(flavour: str, classes: dict[str, Any] | None = None) -> dict[str, types.ModuleType]:
    """``wids``, ``wids.wids`` and ``wids.wids_decode`` as modules of this one's names, with ``classes`` (an
    adapter's: PyTorch ``Dataset`` and ``Sampler`` subclasses) in place of the framework-free ones."""
    from . import widsdecode

    names = {name: globals()[name] for name in __all__}
    names.update(classes or {})
    inner = stand_in("wids.wids", {**names, "__wds__": flavour, "__all__": sorted(names)}, __file__, doc=__doc__)
    decoding = stand_in(
        "wids.wids_decode", {**{name: names[name] for name in (*_DECODE, "default_decoder")}, "__wds__": flavour},
        widsdecode.__file__, doc="wids's sample decoding, over wds's field decoders",
    )  # fmt: skip
    specs = stand_in(
        "wids.wids_specs", {**{name: getattr(widsspecs, name) for name in widsspecs.__all__}, "__wds__": flavour,
                            "__all__": list(widsspecs.__all__)}, widsspecs.__file__, doc=widsspecs.__doc__,
    )  # fmt: skip
    top_names = {name: names[name] for name in _TOP}
    top_names.update(__version__=WIDS_VERSION, __wds__=flavour, __all__=sorted(_TOP), wids=inner,
                     wids_decode=decoding, wids_specs=specs)  # fmt: skip
    top = stand_in("wids", top_names, __file__, package=True, doc=f"wds's stand-in for wids {WIDS_VERSION} ({flavour})")
    return {"wids": top, "wids.wids": inner, "wids.wids_decode": decoding, "wids.wids_specs": specs}
