"""Who am I: rank and world size of this process, worker index within it; is another process alive.

Learnt, in this order, from an explicit provider registered by a framework
adapter, from the environment variables webdataset users already set (``RANK``,
``WORLD_SIZE``, ``WORKER``, ``NUM_WORKERS``), and from PyTorch when it is
already imported.  Nothing here imports a framework.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .io.processes import process_running
from .rng import derive_seed

if TYPE_CHECKING:
    from .state import RunContext

__all__ = [
    "agreed_seed",
    "as_node",
    "iterate_as_node",
    "node_info",
    "process_running",
    "set_node_info_provider",
    "set_worker_info_provider",
    "stream_seed",
    "worker_info",
]

_node_provider: Callable[[], tuple[int, int] | None] | None = None
_worker_provider: Callable[[], tuple[int, int] | None] | None = None


def set_node_info_provider(fn: Callable[[], tuple[int, int] | None] | None) -> None:
    """Register ``fn() -> (rank, world_size) | None``, asked before anything else."""
    global _node_provider
    _node_provider = fn


def set_worker_info_provider(fn: Callable[[], tuple[int, int] | None] | None) -> None:
    """Register ``fn() -> (worker, num_workers) | None``, asked before anything else."""
    global _worker_provider
    _worker_provider = fn


@contextmanager
def as_node(node: tuple[int, int]) -> Iterator[None]:
    """``node_info()`` answers ``node`` inside the block, and what it answered before after it."""
    global _node_provider
    saved = _node_provider
    _node_provider = lambda: node  # noqa: E731
    try:
        yield
    finally:
        _node_provider = saved


def iterate_as_node(items: Iterable, node: tuple[int, int]) -> Iterator:
    """``items``, each made with ``node_info()`` answering ``node`` (:func:`as_node`): a reader that reads as one
    rank of several, told so by its caller (JAX's ``process_index``), without saying so to the whole process."""
    with as_node(node):
        it = iter(items)
    while True:
        with as_node(node):
            try:
                item = next(it)
            except StopIteration:
                return
        yield item


def _env_pair(first: str, second: str) -> tuple[int, int] | None:
    if first in os.environ and second in os.environ:
        return int(os.environ[first]), int(os.environ[second])
    return None


def node_info() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` when not distributed."""
    if _node_provider is not None:
        found = _node_provider()
        if found is not None:
            return found
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return _env_pair("RANK", "WORLD_SIZE") or (0, 1)


def worker_info() -> tuple[int, int]:
    """``(worker, num_workers)`` of this process within its rank; ``(0, 1)`` outside workers."""
    if _worker_provider is not None:
        found = _worker_provider()
        if found is not None:
            return found
    data = sys.modules.get("torch.utils.data")
    if data is not None:
        info = data.get_worker_info()
        if info is not None:
            return info.id, info.num_workers
    return _env_pair("WORKER", "NUM_WORKERS") or (0, 1)


def agreed_seed(seed: int, given: bool) -> int:
    """``seed`` if the user chose it, else one every rank agrees on without talking (0) when there are several.

    A seed drawn at random when a pipeline is made is shared by its DataLoader
    workers (it travels with the pickled pipeline) but differs between ranks.
    """
    if not given and node_info()[1] > 1:
        return 0
    return seed


def stream_seed(seed: int | None, ctx: RunContext, label: str) -> int:
    """The seed of a stage's random stream: ``seed`` (or the pipeline's), ``label``, the stage and the epoch.

    Before any splitter (``ctx.per_reader`` false) every rank and worker must
    make the same choices, so that they then split the same stream; after it,
    the rank and the worker are mixed in so that readers make different ones.
    """
    base = seed if seed is not None else ctx.seed
    if not ctx.per_reader:
        return derive_seed(agreed_seed(base, seed is not None or ctx.seed_given), label, ctx.stage, ctx.epoch)
    return derive_seed(base, label, ctx.stage, ctx.epoch, node_info()[0], worker_info()[0])
