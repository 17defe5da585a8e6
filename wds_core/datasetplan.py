"""What a :class:`~wds_core.dataset.WebDataset` is built from: a :class:`Plan`.

The native constructor and its classmethods make a plan from a few named options; webdataset's 26 keywords (the
drop-in's signature, and native code written for webdataset) are translated into the same plan by
:func:`webdataset_plan`, which names each keyword's native spelling.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .io.cache import ShardCache
from .io.storage import STORAGE_SPELLING, Storage
from .sources.readoptions import ShardReadOptions
from .sources.shardlists import split_by_node, split_by_worker

__all__ = ["NATIVE_KEYWORDS", "NATIVE_SPELLING", "Plan", "Split", "reading_of", "splitters_of", "webdataset_plan"]

Split = bool | tuple[Callable | None, Callable | None]


@dataclass(frozen=True)
class Plan:
    """One construction of a ``WebDataset``: ``kind`` is ``"list"`` (a shard list, a spec file, a folder or a dataset
    of shards, told apart by ``urls``), ``"spec"``, ``"folder"``, ``"resampled"`` or ``"balanced"``."""

    urls: Any
    kind: str = "list"
    reading: ShardReadOptions = field(default_factory=lambda: reading_of(None, None))
    shuffle: bool = False
    seed: int | None = None
    splitters: tuple[Callable | None, Callable | None] = (split_by_node, split_by_worker)
    sample_counts: Any = None
    empty_check: bool = True
    interleave: int | None = None
    balance: str | None = None  # "pad" or "drop", for kind "balanced"
    folder_mode: str | None = None  # what becomes of a folder's shards once read (None: "resample")
    allow_pipe: bool = False
    repeat: bool = False


def reading_of(storage: Storage | dict | None, reading: ShardReadOptions | None) -> ShardReadOptions:
    """``reading`` (default: wds's, with ``__local_path__``) with ``storage`` (a context or storage options) as its
    storage when given."""
    if reading is not None and not isinstance(reading, ShardReadOptions):
        raise TypeError(f"reading must be a ShardReadOptions, got {type(reading).__name__}")
    base = reading if reading is not None else ShardReadOptions()
    if base.local_path is None:
        base = replace(base, local_path=True)
    return base if storage is None else base.with_storage(Storage.of(storage))


def splitters_of(split: Split) -> tuple[Callable | None, Callable | None]:
    """``split=True``: by node, then by worker; ``False``: every reader reads every shard; a pair: these."""
    if split is True:
        return (split_by_node, split_by_worker)
    if split is False:
        return (None, None)
    if isinstance(split, tuple) and len(split) == 2 and all(s is None or callable(s) for s in split):
        return split
    raise TypeError(f"split must be True, False or a pair (node splitter, worker splitter), got {split!r}")


NATIVE_KEYWORDS = ("storage", "reading", "shuffle", "seed", "split", "sample_counts", "empty_check", "interleave")

# webdataset's keyword -> its native spelling (the DeprecationWarning's words)
NATIVE_SPELLING = {
    "handler": "reading=ShardReadOptions(handler=...)",
    "select_files": "reading=ShardReadOptions(select_files=...)",
    "rename_files": "reading=ShardReadOptions(rename_files=...)",
    "zero_copy": "reading=ShardReadOptions(zero_copy=True)",
    "storage_options": STORAGE_SPELLING,
    "retry": "storage=Storage(options, retry=...)",
    "read_ahead": "storage=Storage(options, read_ahead=...)",
    "cache_dir": "storage=Storage(options, cache=ShardCache(cache_dir, ...))",
    "cache_size": "storage=Storage(options, cache=ShardCache(cache_dir, cache_size))",
    "cache_local": "storage=Storage(options, cache=ShardCache(cache_dir, cache_local=True))",
    "url_to_name": "storage=Storage(options, cache=ShardCache(cache_dir, url_to_name=...))",
    "verbose": "storage=Storage(options, cache=ShardCache(cache_dir, verbose=True))",
    "shardshuffle": "shuffle=True (the whole shard list is permuted each epoch)",
    "detshuffle": "nothing (the shard order is always a function of the seed and the epoch)",
    "nodesplitter": "split=(node splitter, worker splitter)",
    "workersplitter": "split=(node splitter, worker splitter)",
    "resampled": "WebDataset.resampled(urls, ...)",
    "mode": "WebDataset.resampled(urls) or WebDataset.from_folder(folder, mode=...)",
    "balanced": 'WebDataset.balanced(urls, "pad" or "drop", ...)',
    "allow_pipe": "WebDataset.from_spec(spec, allow_pipe=True)",
    "repeat": "WebDataset(...).repeat()",
}

_CACHE = ("cache_dir", "cache_size", "cache_local", "url_to_name", "verbose")
_STORAGE = ("storage_options", "retry", "read_ahead", *_CACHE)
_READING = ("handler", "select_files", "rename_files", "zero_copy")


def warn_webdataset_keywords(keywords: dict[str, Any], stacklevel: int = 4) -> None:
    """The ``DeprecationWarning`` for native code that passes webdataset's keywords, naming the new spellings."""
    known = [name for name in keywords if name in NATIVE_SPELLING]
    if known:
        spelled = "; ".join(f"{name}= -> {NATIVE_SPELLING[name]}" for name in known)
        message = f"wds_core.WebDataset: webdataset's keywords are deprecated here (the drop-in keeps them): {spelled}"
        warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def webdataset_plan(urls: Any, native: dict[str, Any], keywords: dict[str, Any]) -> Plan:
    """The plan of ``WebDataset(urls, **native, **keywords)``: ``native`` the native arguments (their defaults when
    not given), ``keywords`` webdataset's (and wds's former) spellings over them, or none: the native plan."""
    unknown = sorted(set(keywords) - set(NATIVE_SPELLING))
    if unknown:
        raise TypeError(f"WebDataset() got an unexpected keyword argument {unknown[0]!r}")
    given = {name: value for name, value in keywords.items() if name != "detshuffle"}
    storage = _storage(native.get("storage"), given)
    reading = reading_of(storage, native.get("reading"))
    reading = replace(reading, **{name: given[name] for name in _READING if name in given})
    node, worker = splitters_of(native.get("split", True))
    kind, balance, mode = _kind(given)
    return Plan(
        urls,
        kind,
        reading,
        shuffle=bool(given.get("shardshuffle", native.get("shuffle", False))),
        seed=native.get("seed"),
        splitters=(given.get("nodesplitter", node), given.get("workersplitter", worker)),
        sample_counts=native.get("sample_counts"),
        empty_check=native.get("empty_check", True),
        interleave=native.get("interleave"),
        balance=balance,
        folder_mode=mode,
        allow_pipe=bool(given.get("allow_pipe", False)),
        repeat=bool(given.get("repeat", False)),
    )


def _storage(native: Storage | dict | None, given: dict[str, Any]) -> Storage | dict | None:
    if not any(name in given for name in _STORAGE):
        return native
    if native is not None and "storage_options" in given:
        raise TypeError("WebDataset() got both storage= and storage_options=: pass one")
    cache = None
    if given.get("cache_dir") is not None:
        cache = ShardCache(
            given["cache_dir"],
            given.get("cache_size", -1),
            cache_local=given.get("cache_local", False),
            url_to_name=given.get("url_to_name"),
            verbose=given.get("verbose", False),
        )
    options = native if native is not None else given.get("storage_options")
    return Storage.of(options, cache=cache, retry=given.get("retry"), read_ahead=given.get("read_ahead"))


def _kind(given: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(kind, balance, folder mode) from webdataset's ``resampled``, ``mode`` and wds's ``balanced``."""
    mode, balance = given.get("mode"), given.get("balanced")
    if given.get("resampled") or mode == "resampled":
        return "resampled", balance, None
    return ("list" if balance is None else "balanced"), balance, mode
