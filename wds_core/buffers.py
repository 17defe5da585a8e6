"""Stages that hold items between input and output: shuffle, batch, unbatch, slice.

Their checkpoints never contain samples.  A shuffle records the upstream state
at a point before the oldest item it still holds, which of the items since then
are still buffered (a compressed bitmap), and its random state; restoring
replays the upstream from that point and keeps exactly those items.
"""

from __future__ import annotations

import base64
import collections
import sys
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from .collate import default_collation_fn
from .dist import node_info, worker_info
from .elastic import WindowProgress
from .errors import CheckpointError, SpecError
from .rng import Rng, derive_seed
from .state import Recipe, RunContext, StageIterator, load_state, state_of

__all__ = ["Batch", "Shuffle", "Slice", "Unbatch"]

_SNAPSHOT_EVERY = 64


def _positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(f"{name} must be an integer >= 1, got {value!r}")
    return value


class Shuffle(Recipe):
    """Shuffle through a buffer of ``bufsize`` items, starting once ``initial`` are held.

    The random stream is derived from ``seed`` (or the pipeline's seed), the
    epoch, the stage's position, the rank and the worker.
    """

    def __init__(self, bufsize: int = 1000, initial: int = 100, seed: int | None = None, **_ignored: Any) -> None:
        self.bufsize = _positive("shuffle bufsize", bufsize)
        self.initial = min(max(1, int(initial)), self.bufsize)
        self.seed = seed

    def build(self, src: Any, ctx: RunContext) -> _ShuffleIterator:
        seed = self.seed if self.seed is not None else ctx.seed
        rank, worker = node_info()[0], worker_info()[0]
        return _ShuffleIterator(src, self, derive_seed(seed, "shuffle", ctx.stage, ctx.epoch, rank, worker))


class _ShuffleIterator(StageIterator):
    def __init__(self, src: Any, recipe: Shuffle, seed: int) -> None:
        super().__init__(src)
        self.recipe = recipe
        self.rng = Rng(seed)
        self.buf: list[tuple[int, Any]] = []  # (arrival number, item), in arrival order
        self.arrivals = 0
        self.exhausted = False
        self.snapshots: collections.deque[tuple[int, Any, Any]] = collections.deque()
        self.progress = WindowProgress("shuffle")
        self.snapshot_error: CheckpointError | None = None
        self.replay: tuple[int, set[int]] | None = None
        self.restored: dict[str, Any] | None = None

    def _snapshot(self) -> None:
        if self.snapshot_error is not None:
            return
        try:
            state = state_of(self.src)
        except CheckpointError as exn:
            self.snapshot_error = exn
            return
        oldest = self.buf[0][0] if self.buf else self.arrivals
        while len(self.snapshots) > 1 and self.snapshots[1][0] <= oldest:
            self.snapshots.popleft()
        self.snapshots.append((self.arrivals, state, self.progress.at_snapshot(self.src)))

    def _window(self) -> tuple[int, Any, Any]:
        """The latest snapshot ``(arrival number, upstream state, reader progress)`` before every buffered item."""
        oldest = self.buf[0][0] if self.buf else self.arrivals
        chosen = self.snapshots[0]
        for snapshot in self.snapshots:
            if snapshot[0] <= oldest:
                chosen = snapshot
        return chosen

    def elastic_progress(self) -> tuple[int, Any]:
        if self.replay is not None:  # restored, not started: the replay window is still to be read
            count, kept = self.replay
            at = self.progress.at_snapshot(self.src)
            return self.progress.since(self.src, at, count, sorted(kept), check=False)
        if not self.snapshots:
            self._snapshot()
        base, _, progress = self._window()
        held = [arrival - base for arrival, _ in self.buf]
        return self.progress.since(self.src, progress, self.arrivals - base, held)

    def _run(self) -> Iterator[Any]:
        src = iter(self.src)
        buf, rng = self.buf, self.rng
        bufsize, initial = self.recipe.bufsize, self.recipe.initial
        if self.replay is not None:
            self.snapshots = collections.deque([(0, self.snapshots[0][1], self.progress.at_snapshot(self.src))])
            count, kept = self.replay
            for i in range(count):
                item = next(src)
                if i in kept:
                    buf.append((i, item))
            self.arrivals = count
            self.replay = None

        def pull() -> bool:
            if self.arrivals % _SNAPSHOT_EVERY == 0:
                self._snapshot()
            try:
                item = next(src)
            except StopIteration:
                self.exhausted = True
                return False
            buf.append((self.arrivals, item))
            self.arrivals += 1
            return True

        while not self.exhausted:
            if not pull():
                break
            if len(buf) < bufsize:
                pull()
            if len(buf) >= initial:
                yield buf.pop(rng.below(len(buf)))[1]
        while buf:
            yield buf.pop(rng.below(len(buf)))[1]

    def state_dict(self) -> dict[str, Any]:
        if self._gen is None and self.restored is not None:
            return self.restored
        if self.snapshot_error is not None:
            raise self.snapshot_error
        if not self.snapshots:  # nothing pulled yet (iteration may have been set up, not started)
            self._snapshot()
            if self.snapshot_error is not None:
                raise self.snapshot_error
        base, parent, _ = self._window()
        count = self.arrivals - base
        bits = bytearray((count + 7) // 8)
        for arrival, _ in self.buf:
            r = arrival - base
            bits[r >> 3] |= 1 << (r & 7)
        return {
            "parent": parent,
            "replay": count,
            "kept": base64.b64encode(zlib.compress(bytes(bits))).decode("ascii"),
            "rng": self.rng.state,
            "exhausted": self.exhausted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._gen is not None:
            raise CheckpointError("shuffle: load_state_dict() must come before iteration starts")
        load_state(self.src, state["parent"])
        count = int(state["replay"])
        bits = zlib.decompress(base64.b64decode(state["kept"]))
        kept = {i for i in range(count) if bits[i >> 3] >> (i & 7) & 1}
        self.replay = (count, kept)
        self.rng.state = int(state["rng"])
        self.exhausted = bool(state["exhausted"])
        self.snapshots = collections.deque([(0, state["parent"], None)])
        self.restored = state


class Batch(Recipe):
    """Group ``batchsize`` items into a batch with ``collation_fn``; ``partial`` keeps a short last one."""

    def __init__(
        self,
        batchsize: int = 20,
        collation_fn: Callable[[list[Any]], Any] | None = default_collation_fn,
        partial: bool = True,
    ) -> None:
        self.batchsize = _positive("batchsize", batchsize)
        self.collation_fn = collation_fn
        self.partial = partial

    def build(self, src: Any, ctx: RunContext) -> _BatchIterator:
        return _BatchIterator(src, self)


class _BatchIterator(StageIterator):
    keeps_order = True  # between batches nothing is held: its upstream's position is its own

    def __init__(self, src: Any, recipe: Batch) -> None:
        super().__init__(src)
        self.recipe = recipe

    def _run(self) -> Iterator[Any]:
        size, collate = self.recipe.batchsize, self.recipe.collation_fn
        batch: list[Any] = []
        for item in iter(self.src):
            batch.append(item)
            if len(batch) == size:
                yield collate(batch) if collate is not None else batch
                batch = []
        if batch and self.recipe.partial:
            yield collate(batch) if collate is not None else batch


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
    def __init__(self, src: Any, lists_are_items: bool = False) -> None:
        super().__init__(src)
        self.lists_are_items = lists_are_items
        self.before: Any = None  # upstream state before the current batch
        self.taken = 0  # items of the current batch already yielded
        self.resume: int | None = None

    def _run(self) -> Iterator[Any]:
        src = iter(self.src)
        while True:
            try:
                self.before = state_of(self.src)
            except CheckpointError as exn:
                self.before = exn
            try:
                batch = next(src)
            except StopIteration:
                return
            rows = _rows(batch, self.lists_are_items)
            start, self.resume = (self.resume or 0), None
            for i in range(start, len(rows)):
                self.taken = i + 1
                yield rows[i]

    def state_dict(self) -> dict[str, Any]:
        if self._gen is None:
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
    keeps_order = True

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
