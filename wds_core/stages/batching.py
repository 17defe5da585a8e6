"""Stages that group and split items: batch (and webdataset's read-ahead batch), unbatch, slice.

Their checkpoints never contain samples: a batch under way is its upstream's state before its first item.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..elastic import WindowProgress, reader_progress
from ..errors import CheckpointError, NotElastic, SpecError
from ..state import Recipe, RunContext, StageIterator, replayed, state_of, state_or_error
from .collate import default_collation_fn
from .shuffle import positive

__all__ = ["Batch", "ReadAheadBatch", "Slice", "Unbatch", "batch_stage_of", "batched_items", "batches_of"]

_READ_AHEAD_SNAPSHOT_EVERY = 1024
_END = object()


def batches_of(items: int, batchsize: int, partial: bool = True) -> int:
    """How many batches of ``batchsize`` ``items`` make: a short last one counts with ``partial``."""
    return -(-items // batchsize) if partial else items // batchsize


class Batch(Recipe):
    """Group ``batchsize`` items into a batch with ``collation_fn``; ``partial`` keeps a short last one."""

    def __init__(
        self,
        batchsize: int = 20,
        collation_fn: Callable[[list[Any]], Any] | None = default_collation_fn,
        partial: bool = True,
    ) -> None:
        self.batchsize = positive("batchsize", batchsize)
        self.collation_fn = collation_fn
        self.partial = partial

    def build(self, src: Any, ctx: RunContext) -> StageIterator:
        return _BatchIterator(src, self)


class _BatchIterator(StageIterator):
    passes_order = True  # between batches nothing is held: its upstream's position is its own

    def __init__(self, src: Any, recipe: Batch) -> None:
        super().__init__(src)
        self.recipe = recipe

    def _run(self) -> Iterator[Any]:
        yield from batched_items(iter(self.src), self.recipe)


def batched_items(items: Iterator[Any], recipe: Batch) -> Iterator[Any]:
    """``items`` in the batches ``recipe`` makes (its size, collation and ``partial``)."""
    size, collate = recipe.batchsize, recipe.collation_fn
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield collate(batch) if collate is not None else batch
            batch = []
    if batch and recipe.partial:
        yield collate(batch) if collate is not None else batch


class ReadAheadBatch(Batch):
    """:class:`Batch` as webdataset batches: a full batch is handed on only once the item after it has come.

    So after ``k`` batches its upstream has made ``k * batchsize + 1`` items, where :class:`Batch` (wds's own,
    which hands a batch on as soon as it is full) asked for ``k * batchsize``.  The trees that stand in for
    webdataset (``install_as_webdataset``) batch with this one: code that stops after ``k`` batches and keeps a
    seeded ``random.Random`` alive across epochs draws exactly as often as under webdataset.  The item read
    ahead is not lost to a checkpoint: the state is the upstream's before it, and a resumed run reads it again.
    """

    def build(self, src: Any, ctx: RunContext) -> StageIterator:
        return _ReadAheadBatchIterator(src, self)


class _ReadAheadBatchIterator(StageIterator):
    """A checkpoint between two batches must give back the item read ahead: it is the upstream's state at a
    snapshot and the items read since to skip.  A snapshot is taken at a batch boundary every
    ``_READ_AHEAD_SNAPSHOT_EVERY`` items or so, and a resumed run reads at most that many items again.  The
    upstream's state can be dear (a shuffle's covers its buffer): of ``shuffle(1000).to_tuple(...).batched(32)``
    on 80,000 small samples, a snapshot every batch cost half the rate, every 64 items a third, every 1,024
    items 6 to 7% (``python benchmarks/bench_adapters.py --rows stages --repeats 5``)."""

    passes_order = False  # it holds the item read ahead: what it delivered is counted by delivered_positions()
    in_order = True  # a ReportsDelivered: what it has delivered is a prefix of what it read

    def __init__(self, src: Any, recipe: Batch) -> None:
        super().__init__(src)
        self.recipe = recipe
        self.skip = 0  # restored: items to read and drop first
        self.snapshot: Any = None  # the upstream's state at the last snapshot (an error if it has none)
        self.since = 0  # items read since that snapshot
        self.holding = False  # whether an item read ahead is held
        self.progress = WindowProgress("batched", keeps_positions=True)
        self.held_progress: Any = None  # in a balanced epoch: the reader's positions delivered before it

    def _take_snapshot(self) -> None:
        self.snapshot = state_or_error(self.src)
        self.since = 0

    def _run(self) -> Iterator[Any]:
        size, collate = self.recipe.batchsize, self.recipe.collation_fn
        src = iter(self.src)
        for _ in replayed(src, self.skip, "batched"):
            pass
        every = -(-_READ_AHEAD_SNAPSHOT_EVERY // size)  # batches between snapshots
        batch: list[Any] = []
        batches = 0
        while True:
            full = len(batch) == size
            if full:
                if batches % every == 0:
                    self._take_snapshot()
                progress = self.progress.at_snapshot(self.src)
            try:
                item = next(src)
            except StopIteration:
                break
            self.since += 1
            if full:
                self.holding, self.held_progress = True, progress
                yield collate(batch) if collate is not None else batch
                self.holding, batch = False, []
                batches += 1
            batch.append(item)
        if batch and (len(batch) == size or self.recipe.partial):
            yield collate(batch) if collate is not None else batch

    def state_dict(self) -> dict[str, Any]:
        if self._gen is None:
            return {"parent": state_of(self.src), "skip": self.skip}
        if not self.holding:
            return {"parent": state_of(self.src), "skip": 0}
        if isinstance(self.snapshot, CheckpointError):
            raise self.snapshot
        return {"parent": self.snapshot, "skip": self.since - 1}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.skip = int(state.get("skip", 0))

    def delivered_positions(self) -> tuple[int, Any]:
        if self._gen is None and self.skip:  # restored, not started: the items to skip were delivered
            at = self.progress.at_snapshot(self.src)
            return self.progress.since(self.src, at, self.skip, (), check=False)
        if not self.holding:
            return reader_progress(self.src)
        if isinstance(self.held_progress, NotElastic):
            raise self.held_progress
        if self.held_progress is None:
            raise NotElastic("batched: its upstream's positions were not taken (not a balanced epoch)")
        return self.held_progress  # type: ignore[no-any-return]


class Unbatch(Recipe):
    """Split batches back into items: tuples, lists and dicts of columns (webdataset's ``unbatched``).

    A ``DataLoader`` hands tuples back as lists, so a list is a batch of
    columns too; ``lists="items"`` (``unlisted()``, the inverse of
    ``listed()``) takes a list for the items themselves.
    """

    def __init__(self, lists: str = "columns") -> None:
        if lists not in ("columns", "items"):
            raise SpecError(f"lists must be 'columns' or 'items', got {lists!r}")
        self.lists = lists

    def build(self, src: Any, ctx: RunContext) -> _UnbatchIterator:
        return _UnbatchIterator(src, self.lists == "items")


def _rows(batch: Any, lists_are_items: bool = False) -> list[Any]:
    if isinstance(batch, dict):
        lengths = {len(v) for v in batch.values()}
        if len(lengths) != 1:
            raise SpecError(f"unbatched: the columns of a dict batch differ in length: {sorted(lengths)}")
        n = lengths.pop()
        return [{k: v[i] for k, v in batch.items()} for i in range(n)]
    if isinstance(batch, list) and lists_are_items:
        return batch
    if isinstance(batch, (tuple, list)):
        if not batch:
            return []
        lengths = {len(column) for column in batch}
        if len(lengths) != 1:
            raise SpecError(f"unbatched: the columns of a batch differ in length: {sorted(lengths)}")
        return [tuple(column[i] for column in batch) for i in range(lengths.pop())]
    raise SpecError(f"unbatched: cannot split a {type(batch).__name__}")


class _UnbatchIterator(StageIterator):
    passes_order = False  # one input item becomes several: positions are not followed

    def __init__(self, src: Any, lists_are_items: bool = False) -> None:
        super().__init__(src)
        self.lists_are_items = lists_are_items
        self.before: Any = None  # upstream state before the current batch
        self.taken = 0  # items of the current batch already yielded
        self.resume: int | None = None

    def _run(self) -> Iterator[Any]:
        src = iter(self.src)
        while True:
            self.before = state_or_error(self.src)
            try:
                batch = next(src)
            except StopIteration:
                return
            rows = _rows(batch, self.lists_are_items)
            start, self.resume = (self.resume or 0), None
            if start > len(rows):
                for _ in replayed(iter(rows), start, "unbatched"):  # says the batch is shorter than it was
                    pass
            for i in range(start, len(rows)):
                self.taken = i + 1
                yield rows[i]

    def state_dict(self) -> dict[str, Any]:
        if self._gen is None or self.before is None:  # nothing taken from upstream yet (iter() alone)
            return {"parent": state_of(self.src), "taken": 0}
        if isinstance(self.before, CheckpointError):
            raise self.before
        return {"parent": self.before, "taken": self.taken}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.resume = int(state["taken"])


class Slice(Recipe):
    """``itertools.islice`` as a stage: ``Slice(stop)`` or ``Slice(start, stop[, step])``."""

    def __init__(self, *args: int | None) -> None:
        bounds = slice(*args)
        self.start = bounds.start or 0
        self.stop = sys.maxsize if bounds.stop is None else bounds.stop
        self.step = bounds.step or 1
        if self.start < 0 or self.stop < 0 or self.step < 1:
            raise SpecError(f"slice bounds must be non-negative with step >= 1, got {args}")

    def build(self, src: Any, ctx: RunContext) -> _SliceIterator:
        return _SliceIterator(src, self)


class _SliceIterator(StageIterator):
    passes_order = True

    def __init__(self, src: Any, recipe: Slice) -> None:
        super().__init__(src)
        self.recipe = recipe
        self.seen = 0

    def _run(self) -> Iterator[Any]:
        start, stop, step = self.recipe.start, self.recipe.stop, self.recipe.step
        if self.seen >= stop:
            return
        for item in iter(self.src):
            index = self.seen
            self.seen += 1
            if index >= start and (index - start) % step == 0:
                yield item
            if self.seen >= stop:
                return

    def _own_state(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.seen = int(state["seen"])


def batch_stage_of(dataset: Any) -> Batch | None:
    """The stage that makes what ``dataset`` (a pipeline, or a stage) hands out batches: its last batching stage
    when no unbatching comes after it (in it or in a pipeline it holds), else ``None``."""
    last = _last_grouping(dataset)
    return last if isinstance(last, Batch) else None


def _last_grouping(dataset: Any) -> Batch | Unbatch | None:
    if isinstance(dataset, (Batch, Unbatch)):
        return dataset
    stages = getattr(dataset, "pipeline", None)
    for stage in reversed(stages if isinstance(stages, list) else []):
        last = _last_grouping(stage)
        if last is not None:
            return last
    return None
