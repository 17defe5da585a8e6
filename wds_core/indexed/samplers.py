"""Index samplers for :class:`~wds_core.indexed.dataset.ShardListDataset`: shuffled, yet local.

Reading samples in a fully random order jumps between shards at every step;
these samplers cut the index range into chunks of consecutive samples
(``chunksize``, a few thousand: a shard or two), visit the chunks in a random
order and shuffle inside each chunk, so only a couple of shards are open at a
time while every epoch still sees a new order.  The order is a pure function
of ``(seed, epoch)``; ``set_epoch(n)`` selects the epoch (as with PyTorch's
``DistributedSampler``).  Framework-free; ``wds_torch`` has the same classes as
``torch.utils.data.Sampler`` subclasses.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import dist
from ..errors import SpecError
from ..rng import derive_seed

__all__ = ["ChunkedSampler", "DistributedChunkedSampler"]


def _length(dataset_or_len: Any) -> int:
    return int(dataset_or_len) if isinstance(dataset_or_len, (int, np.integer)) else len(dataset_or_len)


def chunked_order(start: int, stop: int, chunksize: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """``range(start, stop)`` with chunk order and order within chunks shuffled by ``(seed, epoch)``."""
    indexes = np.arange(start, stop, dtype=np.int64)
    if not shuffle or len(indexes) == 0:
        return indexes
    rng = np.random.default_rng(derive_seed("chunked-sampler", seed, epoch))
    chunks = [indexes[i : i + chunksize] for i in range(0, len(indexes), chunksize)]
    order = rng.permutation(len(chunks))
    return np.concatenate([rng.permutation(chunks[c]) for c in order])


class ChunkedSampler:
    """All indexes of a dataset (or ``range(start, stop)`` of it), chunk-shuffled per epoch."""

    def __init__(
        self,
        dataset_or_len: Any,
        *,
        chunksize: int = 2000,
        shuffle: bool = True,
        seed: int = 0,
        start: int = 0,
        stop: int | None = None,
    ) -> None:
        if chunksize < 1:
            raise SpecError(f"chunksize must be >= 1, got {chunksize}")
        total = _length(dataset_or_len)
        self.start, self.stop = start, total if stop is None else min(stop, total)
        self.chunksize, self.shuffle, self.seed, self.epoch = chunksize, shuffle, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return max(0, self.stop - self.start)

    def __iter__(self) -> Iterator[int]:
        order = chunked_order(self.start, self.stop, self.chunksize, self.shuffle, self.seed, self.epoch)
        return iter(order.tolist())


class DistributedChunkedSampler:
    """This rank's share of the indexes, chunk-shuffled per epoch; every rank gets the same count.

    Rank ``r`` of ``R`` takes the ``r``-th contiguous part of the (shuffled by
    chunk) index list.  ``rank``/``num_replicas`` given explicitly are always
    used; otherwise they come from ``torch.distributed`` or ``RANK``/
    ``WORLD_SIZE``.  When the count does not divide evenly, ``drop_last=False``
    (default) repeats indexes from the start of the epoch's order so every rank
    has ``ceil(n / R)``; ``drop_last=True`` drops the last ``n % R`` instead.
    """

    def __init__(
        self,
        dataset_or_len: Any,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        chunksize: int = 1000,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if (rank is None) != (num_replicas is None):
            found_rank, found_world = dist.node_info()
            rank = found_rank if rank is None else rank
            num_replicas = found_world if num_replicas is None else num_replicas
        elif rank is None:
            rank, num_replicas = dist.node_info()
        assert num_replicas is not None
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise SpecError(f"rank {rank} is not in range for {num_replicas} replicas")
        if chunksize < 1:
            raise SpecError(f"chunksize must be >= 1, got {chunksize}")
        self.total = _length(dataset_or_len)
        self.rank, self.num_replicas = int(rank), int(num_replicas)
        self.chunksize, self.shuffle, self.seed, self.drop_last = chunksize, shuffle, seed, drop_last
        self.epoch = 0
        if drop_last:
            self.per_rank = self.total // self.num_replicas
        else:
            self.per_rank = -(-self.total // self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.per_rank

    def __iter__(self) -> Iterator[int]:
        order = chunked_order(0, self.total, self.chunksize, self.shuffle, self.seed, self.epoch)
        needed = self.per_rank * self.num_replicas
        if needed > len(order) and len(order) > 0:
            order = np.concatenate([order, np.resize(order, needed - len(order))])
        mine = order[self.rank * self.per_rank : (self.rank + 1) * self.per_rank]
        return iter(mine.tolist())
