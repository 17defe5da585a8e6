"""Shard lists: fixed or resampled, shuffled per epoch, split by node and worker.

Every stream of shards yields webdataset's ``{"url": ...}`` dicts.  A shard
shuffle is a full permutation drawn from ``(seed, epoch)`` alone, so every rank
and worker computes the same order before taking its share of it; without a
seed, one is drawn when the recipe is made (shared by DataLoader workers) and a
multi-rank run falls back to seed 0 so that all ranks still agree.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from .dist import node_info, worker_info
from .errors import CheckpointError, SpecError
from .rng import Rng, derive_seed, fresh_seed
from .state import Recipe, RunContext, StageIterator
from .urls import expand_urls

__all__ = [
    "ResampledShards",
    "SimpleShardList",
    "SplitByNode",
    "SplitByWorker",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]


class SimpleShardList(Recipe):
    """The shards of a spec, in order or shuffled anew each epoch.

    ``shuffle`` turns the per-epoch permutation on; giving a ``seed`` alone
    also shuffles, as webdataset's ``SimpleShardList(urls, seed=...)`` does.
    """

    def __init__(self, urls: Any, seed: int | None = None, shuffle: bool | None = None) -> None:
        self.urls = expand_urls(urls)
        self.shuffle = bool(shuffle) if shuffle is not None else seed is not None
        self.seed = seed if seed is not None else fresh_seed()
        self.seed_given = seed is not None

    def __len__(self) -> int:
        return len(self.urls)

    def build(self, src: Any, ctx: RunContext) -> _ShardListIterator:
        return _ShardListIterator(self, ctx.epoch)

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self.build(None, RunContext()))

    def order(self, epoch: int) -> list[str]:
        if not self.shuffle:
            return list(self.urls)
        seed = self.seed
        if not self.seed_given and node_info()[1] > 1:
            seed = 0  # ranks cannot agree on a random seed without talking; they can on this one
        perm = Rng(derive_seed(seed, "shards", epoch)).permutation(len(self.urls))
        return [self.urls[i] for i in perm]


class _ShardListIterator(StageIterator):
    def __init__(self, recipe: SimpleShardList, epoch: int) -> None:
        super().__init__(None)
        self.recipe = recipe
        self.epoch = epoch
        self.index = 0

    def _run(self) -> Iterator[dict[str, str]]:
        urls = self.recipe.order(self.epoch)
        while self.index < len(urls):
            self.index += 1
            yield {"url": urls[self.index - 1]}

    def _own_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index, "nshards": len(self.recipe.urls)}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        if state.get("nshards") != len(self.recipe.urls):
            raise CheckpointError(
                f"the checkpoint is for {state.get('nshards')} shards but this shard list has {len(self.recipe.urls)}"
            )
        self.epoch = int(state["epoch"])
        self.index = int(state["index"])


class ResampledShards(Recipe):
    """An endless (or ``nshards`` long) stream of shards drawn with replacement.

    The draw depends on ``(seed, epoch, rank, worker)``, so ranks and workers see
    different streams and a restored run sees the same one.
    """

    def __init__(
        self,
        urls: Any,
        nshards: int = sys.maxsize,
        seed: int | None = None,
        worker_seed: Any = None,
        deterministic: bool = False,
    ) -> None:
        self.urls = expand_urls(urls)
        if nshards < 1:
            raise SpecError(f"nshards must be >= 1, got {nshards}")
        self.nshards = nshards
        self.seed = seed

    def build(self, src: Any, ctx: RunContext) -> _ResampledIterator:
        rank, _ = node_info()
        worker, _ = worker_info()
        seed = self.seed if self.seed is not None else ctx.seed
        return _ResampledIterator(self, derive_seed(seed, "resample", ctx.epoch, rank, worker))

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self.build(None, RunContext(seed=fresh_seed())))


class _ResampledIterator(StageIterator):
    def __init__(self, recipe: ResampledShards, seed: int) -> None:
        super().__init__(None)
        self.recipe = recipe
        self.rng = Rng(seed)
        self.count = 0

    def _run(self) -> Iterator[dict[str, str]]:
        urls, rng = self.recipe.urls, self.rng
        while self.count < self.recipe.nshards:
            self.count += 1
            yield {"url": urls[rng.below(len(urls))]}

    def _own_state(self) -> dict[str, Any]:
        return {"rng": self.rng.state, "count": self.count}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.rng.state = int(state["rng"])
        self.count = int(state["count"])


class _Split(Recipe):
    """Keep every ``n``-th item starting at ``k``, where ``(k, n)`` comes from ``who()``."""

    def who(self) -> tuple[int, int]:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def build(self, src: Any, ctx: RunContext) -> _SplitIterator:
        index, count = self.who()
        return _SplitIterator(src, index, count)


class _SplitIterator(StageIterator):
    def __init__(self, src: Any, index: int, count: int) -> None:
        super().__init__(src)
        self.index, self.count = index, count
        self.seen = 0

    def _run(self) -> Iterator[Any]:
        index, count = self.index, self.count
        for item in self.src:
            self.seen += 1
            if (self.seen - 1) % count == index:
                yield item

    def _own_state(self) -> dict[str, Any]:
        return {"seen": self.seen, "split": [self.index, self.count]}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.seen = int(state["seen"])


class SplitByNode(_Split):
    """Each rank keeps its share of the shards (``rank::world_size``)."""

    def who(self) -> tuple[int, int]:
        return node_info()


class SplitByWorker(_Split):
    """Each DataLoader/Loader worker keeps its share of the shards."""

    def who(self) -> tuple[int, int]:
        return worker_info()


split_by_node = SplitByNode()
split_by_worker = SplitByWorker()


class _SingleNodeOnly(_Split):
    def who(self) -> tuple[int, int]:
        rank, world = node_info()
        if world > 1:
            raise SpecError(
                "this pipeline runs on several ranks but has no node splitter; add split_by_node "
                "(or use WebDataset's default nodesplitter)"
            )
        return 0, 1


single_node_only = _SingleNodeOnly()
