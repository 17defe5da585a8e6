"""``webdataset.shardlists``: shard lists and splitters by their webdataset names.

``split_by_node``/``split_by_worker`` are wds's splitters (also callable as
``split_by_node(src, group=None)``), ``SimpleShardList``/``ResampledShards``
wds's shard lists (a shard shuffle happens *before* the split, identically in
every reader), ``expand_urls`` wds's spec expansion (braces, ``::``,
``${NAME}`` from ``WDS_NAME``).
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

from ..io.urls import expand_env, expand_urls
from ..sources.dirshards import DirectoryShardList, MultiShardSample
from ..sources.shardlists import ResampledShards, SimpleShardList, single_node_only, split_by_node, split_by_worker
from ..stages.mapping import NonEmpty
from ..stages.sampling import Resample
from .utils import is_iterable

__all__ = [
    "DirectoryShardList",
    "MultiShardSample",
    "ResampledShardList",
    "ResampledShards",
    "SimpleShardList",
    "envlookup",
    "envsubst",
    "expand",
    "expand_source",
    "expand_urls",
    "non_empty",
    "resampled",
    "shardspec",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]

ResampledShardList = ResampledShards
resampled = Resample
non_empty = NonEmpty()


def envlookup(match: re.Match[str]) -> str:
    """The value of ``WDS_<name>`` for a ``${name}`` match (an error when it is not set)."""
    return expand_env(match.group(0))


def envsubst(spec: str) -> str:
    """``spec`` with each ``${NAME}`` replaced by ``WDS_NAME`` from the environment."""
    return expand_env(spec)


def expand(spec: str) -> str:
    """``~`` and ``$VARIABLES`` expanded, as in a shell."""
    return os.path.expanduser(os.path.expandvars(spec))


def expand_source(source: Any, max_urls: int = 10**9) -> list[str]:
    """A spec string expanded, a list as it is, any other iterable's first ``max_urls`` items."""
    if isinstance(source, str):
        return expand_urls(source)
    if isinstance(source, list):
        return source
    if is_iterable(source):
        return list(itertools.islice(source, max_urls))
    raise ValueError(f"cannot make a shard list from a {type(source).__name__}")


def shardspec(spec: str) -> Any:
    """A ``.yaml`` spec as a :class:`MultiShardSample`, anything else as a :class:`SimpleShardList`."""
    if spec.endswith((".yaml", ".yml")):
        return MultiShardSample(spec)
    return SimpleShardList(spec)


def without_last_extension(fname: str) -> str:
    return re.sub(r"\.[^.]*$", "", fname)


def get_pid_from_filename(fname: str) -> int | None:
    match = re.match(r"^(.*)\._(\d+)_$", fname)
    return int(match.group(2)) if match else None
