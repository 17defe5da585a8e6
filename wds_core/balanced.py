"""Balanced epochs: every rank and worker gets exactly the same number of samples.

``WebDataset(urls, balanced="pad" | "drop")`` replaces the shard splitters by
:class:`BalancedSplit`, which works on samples instead of shards.  The epoch's
shard order (shuffled or not, from the seed and the epoch) is laid end to end
as one sequence of ``N`` samples, using each shard's sample count from its
offset index (a ``<shard>.idx`` sidecar when there is one, else a header scan,
:mod:`wds_core.tarindex`).  The ``S = ranks x workers`` readers take
consecutive equal parts of that sequence, rank by rank (rank ``r``'s workers
share the ``r``-th part), so every sample is read at most once per epoch and
every rank yields the same number of samples, hence of batches: no rank waits
at the end of an epoch for one that has more.

* ``"drop"``: each reader takes ``N // S`` samples; the last ``N % S`` of the
  epoch's order are not used this epoch (they differ from epoch to epoch when
  shards are shuffled).
* ``"pad"``: each reader takes ``ceil(N / S)`` samples; the ``S - N % S``
  missing ones repeat samples from the start of the epoch's order.

A reader's part starts inside a shard at a sample boundary: the tar reader
seeks to that sample's byte offset and stops after its count.  Checkpoints
record the task being read, where in it, and how many samples are left.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .dist import node_info, worker_info
from .errors import SpecError
from .state import Recipe, RunContext, StageIterator, load_state
from .storage import url_of

__all__ = ["BalancedSplit", "plan_parts"]

_INDEXES: dict[str, Any] = {}  # url -> ShardIndex, per process


def _index(url: str, storage_options: dict | None) -> Any:
    from .indexed import index_shard

    index = _INDEXES.get(url)
    if index is None:
        index = _INDEXES[url] = index_shard(url, storage_options)
    return index


def plan_parts(counts: list[int], readers: int, reader: int, policy: str) -> list[tuple[int, int, int]]:
    """``(shard position, first sample, count)`` pieces of reader ``reader``'s part (see the module doc)."""
    total = sum(counts)
    if total == 0:
        return []
    each = total // readers if policy == "drop" else -(-total // readers)
    start = reader * each
    pieces: list[tuple[int, int, int]] = []
    position = start % total if policy == "pad" else start
    left = each
    while left > 0:
        base = 0
        for shard, count in enumerate(counts):
            if position < base + count:
                first = position - base
                take = min(count - first, left)
                pieces.append((shard, first, take))
                left -= take
                position = (position + take) % total
                break
            base += count
        else:  # pragma: no cover - position is always inside the sequence
            raise AssertionError("position past the end")
    return pieces


class BalancedSplit(Recipe):
    """The stage that gives this rank and worker its equal part of the epoch's samples."""

    def __init__(self, policy: str = "pad", storage_options: dict | None = None) -> None:
        if policy not in ("pad", "drop"):
            raise SpecError(f"balanced must be 'pad' or 'drop', got {policy!r}")
        self.policy, self.storage_options = policy, storage_options

    def build(self, src: Any, ctx: RunContext) -> _BalancedIterator:
        rank, world = node_info()
        worker, workers = worker_info()
        return _BalancedIterator(src, self, rank * workers + worker, world * workers)


class _BalancedIterator(StageIterator):
    def __init__(self, src: Any, recipe: BalancedSplit, reader: int, readers: int) -> None:
        super().__init__(src)
        self.recipe, self.reader, self.readers = recipe, reader, readers
        self.done = 0  # tasks handed downstream

    def _tasks(self) -> list[dict[str, Any]]:
        urls = [url_of(item) for item in self.src]
        indexes = [_index(url, self.recipe.storage_options) for url in urls]
        pieces = plan_parts([len(index) for index in indexes], self.readers, self.reader, self.recipe.policy)
        tasks = []
        for shard, first, count in pieces:
            index = indexes[shard]
            offset = index.members[index.starts[first]][1]
            tasks.append({"url": urls[shard], "offset": offset, "count": count, "sample": first})
        return tasks

    def _run(self) -> Iterator[dict[str, Any]]:
        for task in self._tasks()[self.done :]:
            self.done += 1
            yield task

    def _own_state(self) -> dict[str, Any]:
        return {"done": self.done, "reader": [self.reader, self.readers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # the shard list is read again from the start of the epoch (same order: same seed and epoch)
        self.done = int(state["done"])
        if state.get("reader") not in (None, [self.reader, self.readers]):
            raise SpecError(
                f"this checkpoint was taken by reader {state['reader'][0]} of {state['reader'][1]}; "
                f"this is reader {self.reader} of {self.readers}"
            )
        if self.src is not None and "parent" in state:
            load_state(self.src, {**state["parent"], "index": 0})  # the shard list from its start again
