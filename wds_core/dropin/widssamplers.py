"""wids's index samplers (``ChunkedSampler``, ``DistributedChunkedSampler``, ``ShardListSampler``): the same
indexes in the same order as wids 0.1.11's for the same arguments, seed and epoch; see :mod:`wds_core.dropin.wids`.
"""

from __future__ import annotations

import math
import random
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import SpecError

__all__ = [
    "ChunkedSampler",
    "DistributedChunkedSampler",
    "ShardListSampler",
    "ShardedSampler",
    "distributed_chunked_sampler",
    "intersect_range",
    "intersect_ranges",
    "iterate_ranges",
    "lengths_to_ranges",
]

_EPOCH_STEP = 1289738273  # wids seeds epoch e of seed s with random.Random(s + e * this): same orders


def lengths_to_ranges(lengths: list[int]) -> list[tuple[int, int]]:
    """Consecutive half-open ranges of the given lengths, from 0."""
    ends = np.cumsum([0, *lengths]).tolist()
    return list(zip(ends[:-1], ends[1:]))


def intersect_range(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    """The intersection of two half-open integer intervals, or ``None`` when it is empty."""
    low, high = max(a[0], b[0]), min(a[1], b[1])
    return (low, high) if low < high else None


def intersect_ranges(ranges: list[tuple[int, int]], r: tuple[int, int]) -> list[tuple[int, int]]:
    """The non-empty intersections of ``r`` with each interval of ``ranges``, in order."""
    return [common for a in ranges if (common := intersect_range(a, r)) is not None]


def iterate_ranges(
    ranges: list[tuple[int, int]], rng: random.Random, indexshuffle: bool = True, shardshuffle: bool = True
) -> Iterator[int]:
    """The indexes of ``ranges``, the ranges in an order ``rng`` shuffles (``shardshuffle``), each range's
    indexes shuffled by ``rng`` too (``indexshuffle``): both draws in wids's sequence."""
    visit = list(range(len(ranges)))
    if shardshuffle:
        rng.shuffle(visit)
    for number in visit:
        lo, hi = ranges[number]
        indexes = list(range(lo, hi))
        if indexshuffle:
            rng.shuffle(indexes)
        yield from indexes


class ShardListSampler:
    """Shard by shard in a shuffled order, each shard's samples shuffled; the shard order is kept in the first
    epoch unless ``shufflefirst``.  Each full pass moves on to the next epoch."""

    def __init__(self, dataset: Any, *, lengths: list[int] | None = None, seed: int = 0, shufflefirst: bool = False):
        self.ranges = lengths_to_ranges(list(dataset.lengths) if lengths is None else list(lengths))
        self.seed, self.shufflefirst, self.epoch = seed, shufflefirst, 0

    def __len__(self) -> int:
        return self.ranges[-1][1] - self.ranges[0][0] if self.ranges else 0

    def __iter__(self) -> Iterator[int]:
        self.rng = random.Random(self.seed + _EPOCH_STEP * self.epoch)
        yield from iterate_ranges(self.ranges, self.rng, shardshuffle=self.shufflefirst or self.epoch > 0)
        self.epoch += 1


ShardedSampler = ShardListSampler


class ChunkedSampler:
    """Indexes ``[lo, hi)`` (``num_samples``: ``None`` for the whole dataset, a count, or a pair) in chunks of
    ``chunksize``, chunks and the indexes inside each shuffled as wids's are; ``set_epoch`` picks the epoch,
    and a full pass moves on to the next."""

    def __init__(
        self,
        dataset: Any,
        *,
        dslength_per_replica: int = -1,
        num_samples: int | tuple[int, int] | None = None,
        chunksize: int = 2000,
        seed: int = 0,
        shuffle: bool = True,
        shufflefirst: bool = False,
    ) -> None:
        if chunksize < 1:
            raise SpecError(f"chunksize must be >= 1, got {chunksize}")
        if num_samples is None:
            lo, hi = 0, len(dataset)
        elif isinstance(num_samples, (int, np.integer)):
            lo, hi = 0, int(num_samples)
        else:
            lo, hi = (int(x) for x in num_samples)
        self.dslength_per_replica = dslength_per_replica if dslength_per_replica > 0 else hi - lo
        self.ranges = [(start, min(start + chunksize, hi)) for start in range(lo, hi, chunksize)]
        self.seed, self.shuffle, self.shufflefirst, self.epoch = seed, shuffle, shufflefirst, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        self.rng = random.Random(self.seed + _EPOCH_STEP * self.epoch)
        shuffle_chunks = self.shuffle and (self.shufflefirst or self.epoch > 0)
        yield from iterate_ranges(self.ranges, self.rng, indexshuffle=self.shuffle, shardshuffle=shuffle_chunks)
        self.epoch += 1

    def __len__(self) -> int:
        return self.dslength_per_replica


def distributed_chunked_sampler(chunked: type[ChunkedSampler]) -> Callable[..., ChunkedSampler]:
    """wids's ``DistributedChunkedSampler`` function, making samplers of class ``chunked``."""

    def DistributedChunkedSampler(  # noqa: N802 - wids's name
        dataset: Any,
        *,
        num_replicas: int | None = None,
        num_samples: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        shufflefirst: bool = False,
        seed: int = 0,
        drop_last: bool | None = None,
        chunksize: int = 1000000,
    ) -> ChunkedSampler:
        """This rank's contiguous share of ``num_samples`` (all by default), as a :class:`ChunkedSampler`."""
        if drop_last is not None:
            warnings.warn("DistributedChunkedSampler does not support drop_last, thus it will be ignored", stacklevel=2)
        torch = sys.modules.get("torch")
        group = getattr(torch, "distributed", None) if torch is not None else None
        if group is not None and group.is_available() and group.is_initialized():
            num_replicas = num_replicas or group.get_world_size()
            rank = group.get_rank() if rank is None else rank
        elif num_replicas is None or rank is None:
            warnings.warn(
                "DistributedChunkedSampler is called without distributed initialized; assuming single process",
                stacklevel=2,
            )
            num_replicas, rank = 1, 0
        if not 0 <= rank < num_replicas:
            raise SpecError(f"rank {rank} is not in range for {num_replicas} replicas")
        total = len(dataset)
        per_replica = math.ceil(total / num_replicas) if num_replicas > 1 else total
        count = num_samples or total
        share = -(-count // num_replicas)
        start = rank * share
        return chunked(
            dataset,
            dslength_per_replica=per_replica,
            num_samples=(start, min(start + share, count)),
            chunksize=chunksize,
            seed=seed,
            shuffle=shuffle,
            shufflefirst=shufflefirst,
        )

    return DistributedChunkedSampler


DistributedChunkedSampler = distributed_chunked_sampler(ChunkedSampler)
