"""Shard lists: fixed or resampled, shuffled per epoch, split by node and worker.

Every stream of shards yields webdataset's ``{"url": ...}`` dicts.  A shard
shuffle is a full permutation drawn from ``(seed, epoch)`` alone, so every rank
and worker computes the same order before taking its share of it; without a
seed, one is drawn when the recipe is made (shared by DataLoader workers) and a
multi-rank run falls back to seed 0 so that all ranks still agree.
"""

from __future__ import annotations

import array
import itertools
import os
import random
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..dist import agreed_seed, node_info, worker_info
from ..errors import CheckpointError, SpecError
from ..io.shardnames import PermutedNames, shard_names
from ..rng import Rng, derive_seed, fresh_seed
from ..state import Recipe, RunContext, StageIterator
from .reader import older_state, shard_digest

if TYPE_CHECKING:
    from ..io.storage import Storage

__all__ = [
    "ResampledShards",
    "SimpleShardList",
    "SingleNodeOnly",
    "SplitByNode",
    "SplitByWorker",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
]


class SimpleShardList(Recipe):
    """The shards of a spec, in order or shuffled anew each epoch.

    ``shuffle=True`` turns the per-epoch shuffle on: epoch ``e`` is the list
    shuffled by ``random.Random(seed + e)`` (in epoch 0 exactly webdataset's
    order, a new order each epoch after).  A ``seed`` alone shuffles as
    webdataset's ``SimpleShardList(urls, seed=...)`` does: by
    ``random.Random(seed)``, the same order every epoch (``seed=True``: a seed
    drawn for this run, and a new order each epoch).  Without a seed, one drawn
    when the list is made is used (shared by DataLoader workers, which receive
    the list pickled); on several ranks, where drawn seeds would differ, 0.
    ``seed`` stays what was given (``None`` when nothing was), as in
    webdataset, and is read when iterating, so setting it later takes effect.
    """

    def __init__(self, urls: Any, seed: int | bool | None = None, shuffle: bool | None = None) -> None:
        self.urls = shard_names(urls)  # a brace range of many shards stays a range (io/shardnames.py)
        if seed is True:  # webdataset: a seed drawn from the clock, i.e. shuffled differently in every run
            seed, shuffle = None, True if shuffle is None else shuffle
        self.seed = seed
        self.shuffle = shuffle
        self._drawn_seed = fresh_seed()
        # the last epoch's order of a long list
        self._permuted: tuple[tuple[int, int, int], PermutedNames] | None = None

    #: Whether the reader starts each epoch by checking that its local shards exist (``WebDataset`` with the
    #: default handler sets it: a missing one is then an error before any is read, not after the others were), and
    #: the storage context whose rewrites apply to their URLs.
    check_local = False
    check_local_storage: Storage | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_permuted": None}  # workers compute it (the same) when they need it

    @property
    def seed_given(self) -> bool:
        return self.seed is not None

    def __len__(self) -> int:
        return len(self.urls)

    def build(self, src: Any, ctx: RunContext) -> ShardListIterator:
        return ShardListIterator(self, ctx.epoch)

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self.build(None, RunContext()))

    def order(self, epoch: int) -> Sequence[str]:
        shuffle = self.shuffle if self.shuffle is not None else self.seed is not None
        if not shuffle:
            return self.urls
        seed = self.seed if self.seed is not None else agreed_seed(self._drawn_seed, False)
        if not self.shuffle:
            epoch = 0  # a seed alone: webdataset's one order, whatever the epoch
        if isinstance(self.urls, list):
            urls = list(self.urls)
            random.Random(seed + epoch).shuffle(urls)
            return urls
        # the same permutation, of positions (4 bytes a shard) instead of names: shuffle() draws by length only;
        # kept for the epoch (a long list takes seconds to draw), as every iterator of this list in the epoch uses it
        key = (seed, epoch, id(self.urls))  # the list the cached order permutes is alive: its id is not reused
        if self._permuted is None or self._permuted[0] != key:
            n = len(self.urls)
            positions = array.array("i" if n < 2**31 else "q", range(n))
            random.Random(seed + epoch).shuffle(positions)
            self._permuted = (key, PermutedNames(self.urls, positions))
        return self._permuted[1]


def _check_local_shards(urls: list[str], storage: Storage | None) -> None:
    """A :class:`ShardNotFoundError` naming the local shards of ``urls`` that do not exist (a ``stat`` each)."""
    from ..errors import ShardNotFoundError
    from ..io import files
    from ..io.localfiles import local_path, not_found
    from ..io.registry import registered_scheme
    from ..io.secure import check_allowed
    from ..io.storage import Storage

    storage = storage or Storage()
    missing = []
    for url in urls:
        if registered_scheme(url) is not None:
            continue
        target = storage.rewrite(url)
        check_allowed(target)  # secure mode's refusal comes first, as when the shard is opened
        path = local_path(target)
        if path is not None and not files.exists(path):
            missing.append(url)
    if missing:
        named = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        hint = not_found(missing[0])[len("shard not found") :]  # the spelling a wildcard wants, if any
        raise ShardNotFoundError(
            f"{len(missing)} of the {len(urls)} shards of this epoch do not exist (checked before reading any): "
            f"{named}{hint}",
            url=missing[0],
        )


class ShardListIterator(StageIterator):
    passes_order = False  # a shard source

    def __init__(self, recipe: SimpleShardList, epoch: int) -> None:
        super().__init__(None)
        self.recipe = recipe
        self.epoch = epoch
        self.index = 0
        self.checked = False  # check_local_shards ran
        self._order: tuple[int, Sequence[str]] | None = None  # (epoch, its order), drawn once

    def order(self) -> Sequence[str]:
        """The epoch's order of the shards, drawn once for this iterator."""
        if self._order is None or self._order[0] != self.epoch:
            self._order = (self.epoch, self.recipe.order(self.epoch))
        return self._order[1]

    def _run(self) -> Iterator[dict[str, str]]:
        urls = self.order()
        while self.index < len(urls):  # self.index is read anew each time: skip() moves it
            self.index += 1
            yield {"url": urls[self.index - 1]}

    def check_local_shards(self) -> None:
        """When the list asks for it (:attr:`SimpleShardList.check_local`), a :class:`ShardNotFoundError` naming
        the local shards of this epoch that do not exist; a reader calls it before reading its first shard."""
        if self.recipe.check_local and not self.checked:
            self.checked = True
            urls = self.order()
            if isinstance(urls, list):  # not a lazy list of millions of names
                _check_local_shards(urls, getattr(self.recipe, "check_local_storage", None))

    def rest(self) -> list[str]:
        """The URLs of the shards not yielded yet, as if they all were now (one list, named in bulk)."""
        urls = self.order()
        left = urls[self.index :]
        self.index = len(urls)
        return list(left)

    def rest_positions(self) -> tuple[Sequence[str], np.ndarray]:
        """The list's names in spec order and the spec positions of the shards not yielded yet, in the epoch's
        order, as if they all were yielded now (no name is computed)."""
        urls = self.recipe.urls
        order = self.order()
        if isinstance(order, PermutedNames):
            positions = np.asarray(order.positions)[self.index :]
        elif order is urls:  # not shuffled
            positions = np.arange(self.index, len(urls))
        else:  # a shuffled list of names: where each is in the spec (a name listed twice is the same shard)
            where = {name: i for i, name in enumerate(urls)}
            positions = np.array([where[name] for name in order[self.index :]], dtype=np.int64)
        self.index = len(urls)
        return urls, positions

    def skip(self, count: int) -> int:
        """Pass over the next ``count`` shards as if they had been yielded; how many there were.

        Splits by node and worker call this, so a reader's share of a long list costs index arithmetic,
        not a pass over every shard.
        """
        moved = max(0, min(count, len(self.recipe.urls) - self.index))
        self.index += moved
        return moved

    def restart(self, state: dict[str, Any]) -> None:
        """Take ``state`` (checked as any) and start its epoch again from its first shard: a balanced split reads
        the whole epoch's list anew on a restore, its position in it being its own."""
        self._load_own_state(state)
        self.index = 0

    def _own_state(self) -> dict[str, Any]:
        # the shard it gives next ("" at the end): a position that names what is there, checked on restore
        return {"epoch": self.epoch, "index": self.index, "nshards": len(self.recipe.urls), "next": self._next()}

    def _next(self) -> str:
        order = self.order()
        return shard_digest(order[self.index]) if self.index < len(order) else ""

    def _load_own_state(self, state: dict[str, Any]) -> None:
        if state.get("nshards") != len(self.recipe.urls):
            raise CheckpointError(
                f"the checkpoint is for {state.get('nshards')} shards but this shard list has {len(self.recipe.urls)}"
            )
        self.epoch = int(state["epoch"])
        self.index = int(state["index"])
        if not 0 <= self.index <= len(self.recipe.urls):
            raise CheckpointError(f"the checkpoint's position {self.index} is outside the shard list")
        if "next" not in state:
            older_state(f"the shard list's state at position {self.index} does not name the shard there")
        elif self._next() != state["next"]:
            raise CheckpointError(
                f"the checkpoint's position {self.index} in the shard list is not at the shard it names (its digest "
                "differs): the shard list changed since the checkpoint, or the state was edited"
            )


class ResampledShards(Recipe):
    """An endless (or ``nshards`` long) stream of shards drawn with replacement.

    The draw depends on ``(seed, epoch, rank, worker)``, so ranks and workers see
    different streams and a restored run sees the same one.  Without a
    ``seed``, the pipeline's seed is used (drawn for each run unless the
    pipeline was given one); ``deterministic=True`` uses seed 0 then, so the
    streams are the same in every run.  ``worker_seed`` (webdataset's: a
    function of no arguments) replaces the rank and worker in the draw with
    what it returns.  ``max_urls`` bounds how many URLs are taken from an
    iterator of URLs; ``empty_check=False`` allows an empty list (nothing is
    drawn).
    """

    per_reader = True

    def __init__(
        self,
        urls: Any,
        nshards: int = sys.maxsize,
        seed: int | None = None,
        worker_seed: Callable[[], Any] | None = None,
        deterministic: bool = False,
        max_urls: int = 10**6,
        empty_check: bool = True,
    ) -> None:
        if not isinstance(urls, (str, list, tuple, os.PathLike)) and isinstance(urls, Iterable):
            urls = list(itertools.islice(urls, max_urls))
        self.urls = shard_names(urls) if (urls or empty_check) else []
        if nshards < 1:
            raise SpecError(f"nshards must be >= 1, got {nshards}")
        if worker_seed is not None and not callable(worker_seed):
            raise TypeError(f"worker_seed must be a function returning a seed, got {type(worker_seed).__name__}")
        self.nshards = nshards
        self.seed = 0 if seed is None and deterministic else seed
        self.worker_seed, self.deterministic = worker_seed, deterministic
        self.epoch = -1  # webdataset's attribute: the epoch last started

    def build(self, src: Any, ctx: RunContext) -> _ResampledIterator:
        self.epoch = ctx.epoch
        seed = self.seed if self.seed is not None else ctx.seed
        who = (self.worker_seed(),) if self.worker_seed is not None else (node_info()[0], worker_info()[0])
        return _ResampledIterator(self, derive_seed(seed, "resample", ctx.epoch, *who))

    def __iter__(self) -> Iterator[dict[str, str]]:
        return iter(self.build(None, RunContext(seed=fresh_seed())))


class _ResampledIterator(StageIterator):
    passes_order = False  # a shard source

    def __init__(self, recipe: ResampledShards, seed: int) -> None:
        super().__init__(None)
        self.recipe = recipe
        self.rng = Rng(seed)
        self.count = 0

    @property
    def endless(self) -> int:
        """How many shards it draws from, when it draws without end (else 0): see ``ShardReader._check_barren``."""
        return len(self.recipe.urls) if self.recipe.nshards == sys.maxsize else 0

    def _run(self) -> Iterator[dict[str, str]]:
        urls, rng = self.recipe.urls, self.rng
        while urls and self.count < self.recipe.nshards:
            self.count += 1
            yield {"url": urls[rng.below(len(urls))]}

    def _own_state(self) -> dict[str, Any]:
        return {"rng": self.rng.state, "count": self.count}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.rng.state = int(state["rng"])
        self.count = int(state["count"])


class _Split(Recipe):
    """Keep every ``n``-th item starting at ``k``, where ``(k, n)`` comes from ``who()``."""

    per_reader = True

    def who(self) -> tuple[int, int]:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def build(self, src: Any, ctx: RunContext) -> _SplitIterator:
        index, count = self.who()
        return _SplitIterator(src, index, count)


class _SplitIterator(StageIterator):
    passes_order = False  # shards, not samples

    def __init__(self, src: Any, index: int, count: int) -> None:
        super().__init__(src)
        self.index, self.count = index, count
        self.seen = 0

    def _run(self) -> Iterator[Any]:
        index, count, src = self.index, self.count, self.src
        skips = _skips(src)  # a shard list, or a split of one: jump to our next item
        items = iter(src)
        while True:
            ahead = (index - self.seen) % count
            if ahead and skips:
                self.seen += src.skip(ahead)
            try:
                item = next(items)
            except StopIteration:
                return
            self.seen += 1
            if (self.seen - 1) % count == index:
                yield item

    def skip(self, count: int) -> int:
        """Pass over the next ``count`` items this split would yield, as if they had been yielded; how many."""
        if count <= 0:
            return 0
        wanted = (self.index - self.seen) % self.count + (count - 1) * self.count + 1  # source items to pass
        if _skips(self.src):
            passed = self.src.skip(wanted)
        else:
            passed = sum(1 for _ in itertools.islice(self.src, wanted))
        before = self._mine_below(self.seen)
        self.seen += passed
        return self._mine_below(self.seen) - before

    def _mine_below(self, seen: int) -> int:
        """How many of the first ``seen`` items of the source are this split's."""
        return 0 if seen <= self.index else (seen - self.index - 1) // self.count + 1

    def _own_state(self) -> dict[str, Any]:
        return {"seen": self.seen, "split": [self.index, self.count]}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        taken = state.get("split")
        if taken is not None and list(taken) != [self.index, self.count]:
            raise CheckpointError(
                f"this checkpoint was taken by reader {taken[0]} of {taken[1]} (rank or worker), and this is reader "
                f"{self.index} of {self.count}: each reads its own share of the shards; resume on as many ranks and "
                "workers, or read a balanced epoch (balanced='pad') and load wds_core.merge_states(states) of them all"
            )
        self.seen = int(state["seen"])


def _skips(src: Any) -> bool:
    """Whether ``src`` can pass over items without producing them (a shard list, or a split of one)."""
    return callable(getattr(src, "skip", None))


def _group_node_info(group: Any) -> tuple[int, int]:
    """Rank and size within a ``torch.distributed`` process group (the group was made by torch, so it is imported)."""
    dist = sys.modules["torch.distributed"]
    return dist.get_rank(group=group), dist.get_world_size(group=group)


class SplitByNode(_Split):
    """Each rank keeps its share of the shards (``rank::world_size``), of the process ``group`` when given."""

    def __init__(self, group: Any = None) -> None:
        self.group = group

    def who(self) -> tuple[int, int]:
        return node_info() if self.group is None else _group_node_info(self.group)

    def __call__(self, src: Any, group: Any = None) -> StageIterator:
        """webdataset's ``split_by_node(src, group=None)``."""
        recipe = self if group is None else type(self)(group)
        return recipe.build(src, RunContext())


class SplitByWorker(_Split):
    """Each DataLoader/Loader worker keeps its share of the shards."""

    def who(self) -> tuple[int, int]:
        return worker_info()


split_by_node = SplitByNode()
split_by_worker = SplitByWorker()


class SingleNodeOnly(SplitByNode):
    """A check, not a split: the pipeline runs on one rank (an error on several)."""

    def who(self) -> tuple[int, int]:
        rank, world = super().who()
        if world > 1:
            raise SpecError(
                "this pipeline runs on several ranks but has no node splitter; add split_by_node "
                "(or use WebDataset's default nodesplitter)"
            )
        return 0, 1


single_node_only = SingleNodeOnly()
