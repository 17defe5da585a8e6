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
import random
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from ..io.processes import process_running
from ..io.urls import expand_env, expand_urls
from ..sources import shardlists as _core
from ..sources.dirshards import DirectoryShardList, MultiShardSample
from ..sources.shardlists import ResampledShards, SimpleShardList
from ..stages.mapping import NonEmpty
from ..stages.sampling import Resample
from . import hooks, utils  # noqa: F401 - utils: webdataset's module imports it, and code reaches it here
from .filters import pipelinefilter  # noqa: F401 - webdataset's import
from .pytorch import IterableDataset  # noqa: F401 - PyTorch's with wds_torch
from .utils import is_iterable, obsolete  # noqa: F401

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


def _replaced_info(group: Any) -> tuple[int, int, int, int] | None:
    """``utils.pytorch_worker_info(group=group)`` when code replaced it (webdataset's splitters call it), else
    ``None``."""
    info = hooks.replacement("utils", "pytorch_worker_info")
    return None if info is None else tuple(info(group=group))  # type: ignore[return-value]


class SplitByNode(_core.SplitByNode):
    """wds's node splitter; the rank and world size come from a replaced ``utils.pytorch_worker_info``."""

    def who(self) -> tuple[int, int]:
        info = _replaced_info(self.group)
        return super().who() if info is None else (info[0], info[1])


class SplitByWorker(_core.SplitByWorker):
    """wds's worker splitter; the worker and worker count come from a replaced ``utils.pytorch_worker_info``."""

    def who(self) -> tuple[int, int]:
        info = _replaced_info(None)
        return super().who() if info is None else (info[2], info[3])


class SingleNodeOnly(_core.SingleNodeOnly, SplitByNode):
    """wds's check that one rank runs, asking a replaced ``utils.pytorch_worker_info`` too."""


split_by_node = SplitByNode()
split_by_worker = SplitByWorker()
single_node_only = SingleNodeOnly()
# the drop-in's splitter for each of wds's (a WebDataset's defaults are wds's)
SPLITTERS = {id(_core.split_by_node): split_by_node, id(_core.split_by_worker): split_by_worker,
             id(_core.single_node_only): single_node_only}  # fmt: skip

ResampledShardList = ResampledShards
resampled = Resample


def resampled_(src: Any, n: int = sys.maxsize) -> Any:
    """webdataset's function behind ``resampled``: every item of ``src``, then ``n`` drawn with replacement."""
    return Resample(n)(src)


#: webdataset's module-level random generator (its shard lists draw from their own: so do wds's)
default_rng = random.Random()


@dataclass
class MSSource:
    """webdataset's description of one source of a ``MultiShardSample`` spec."""

    name: str = ""
    perepoch: int = -1
    resample: bool = False
    urls: list[str] = field(default_factory=list)


def check_pid_is_running(pid: int) -> bool:
    """webdataset's: whether process ``pid`` exists."""
    return process_running(pid)


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
