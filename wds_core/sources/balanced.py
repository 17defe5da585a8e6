"""Balanced epochs: every rank and worker gets exactly the same number of samples.

``WebDataset(urls, balanced="pad" | "drop")`` replaces the shard splitters by
:class:`BalancedSplit`, which works on samples instead of shards.  The epoch's
shard order (shuffled or not, from the seed and the epoch) is laid end to end
as one sequence of ``N`` samples, using each shard's sample count from its
offset index (a ``<shard>.idx`` sidecar when there is one, else a header scan,
:mod:`wds_core.tar.tarindex`).  The ``S = ranks x workers`` readers take
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

``sample_counts=`` (a wids descriptor's path or URL, whose ``shardlist`` gives
each shard's ``nsamples``; a ``wds-counts-1`` counts file, ``*.counts.npz``,
which gives them by position in the spec, :mod:`wds_core.sources.counts`; or a dict
``{url: count}``) gives the counts without touching the shards: each reader then reads the descriptor once and
the offset index of each shard of its own part when it reaches it, instead
of every shard's before its first sample (with 100,000 shards and 512 readers, ~51 million requests before the
first sample otherwise).  A shard the counts do not list, or whose index
disagrees with them, is an error naming it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..dist import node_info, worker_info
from ..errors import CheckpointError, SpecError
from ..intervals import Intervals, complement, decode, encode, length, local_to_global, normalize, runs, take
from ..io.storage import Storage, url_of
from ..state import Recipe, RunContext, StageIterator, load_state
from ..tar.tarindex import index_shard
from .counts import ShardCounts
from .readoptions import ShardReadOptions
from .shardlists import ShardListIterator

__all__ = ["BalancedIterator", "BalancedSplit", "SampleCounts", "plan", "plan_parts"]

_INDEXES: dict[str, Any] = {}  # url -> ShardIndex, per process


def _same_shard(url: str) -> str:
    """``url`` as counts are looked up by: local paths made absolute, URLs as they are."""
    return url if "://" in url or url.startswith("pipe:") else os.path.abspath(url)


class SampleCounts:
    """Shards' sample counts from a wids descriptor (path or URL), a counts file or a dict, read once per process."""

    def __init__(self, source: Any, storage: Storage | None = None) -> None:
        if not isinstance(source, (str, os.PathLike, dict)):
            raise SpecError(f"sample_counts is a descriptor's path or URL or a dict, got {type(source).__name__}")
        self.source = os.fspath(source) if isinstance(source, os.PathLike) else source
        self.storage = storage
        self._counts: dict[str, int] | None = None
        self._sizes: dict[str, int] = {}  # a descriptor's filesize entries: no size request per shard
        self._by_position: ShardCounts | None = None
        self.positional = isinstance(self.source, str) and self.source.endswith(".npz")

    def __getstate__(self) -> dict[str, Any]:  # workers read the descriptor themselves
        return {**self.__dict__, "_counts": None, "_sizes": {}, "_by_position": None}

    def by_position(self, names: Sequence[str]) -> ShardCounts:
        """The counts file, checked to describe ``names`` (the shard list in its spec order)."""
        if self._by_position is None:
            self._by_position = ShardCounts(str(self.source), self.storage)
        self._by_position.check(names)
        return self._by_position

    def where(self) -> str:
        return "the sample_counts dict" if isinstance(self.source, dict) else str(self.source)

    def counts(self) -> dict[str, int]:
        if self._counts is None:
            if isinstance(self.source, dict):
                rows = [{"url": str(url), "nsamples": n} for url, n in self.source.items()]
            else:
                from .descriptor import load_descriptor

                rows = load_descriptor(self.source, self.storage)["shardlist"]
            counts = {}
            for row in rows:
                key, n = _same_shard(row["url"]), row["nsamples"]
                if n is None or int(n) < 0:
                    raise SpecError(f"{self.where()}: no sample count for {row['url']}")
                counts[key] = int(n)
                if isinstance(row.get("filesize"), int) and row["filesize"] > 0:
                    self._sizes[key] = row["filesize"]
            self._counts = counts
        return self._counts

    def of(self, urls: list[str]) -> list[int]:
        known = self.counts()
        keys = [_same_shard(url) for url in urls]
        missing = [url for url, key in zip(urls, keys) if key not in known]
        if missing:
            raise SpecError(
                f"{self.where()} gives no sample count for {len(missing)} of the {len(urls)} shards, e.g. {missing[0]}"
            )
        return [known[key] for key in keys]

    def total(self, urls: list[str]) -> int:
        """The samples of all of ``urls`` (the shard list in its spec order, for a counts file)."""
        if self.positional:
            return int(self.by_position(urls).counts.sum())
        return sum(self.of(urls))

    def size_of(self, url: str) -> int | None:
        """The shard's size in bytes when the descriptor gives it."""
        self.counts()
        return self._sizes.get(_same_shard(url))


def _index(url: str, reading: ShardReadOptions, size: int | None = None) -> Any:
    index = _INDEXES.get(url)
    if index is None:
        index = _INDEXES[url] = index_shard(url, reading.storage, size=size)
    return index


def plan(sequence: Intervals, readers: int, reader: int, policy: str) -> tuple[Intervals, Intervals]:
    """Reader ``reader``'s part of the positions ``sequence`` enumerates, and what no reader gets (``"drop"``)."""
    size = length(sequence)
    if size == 0:
        return [], []
    each = size // readers if policy == "drop" else -(-size // readers)
    part = take(sequence, reader * each, each)
    excluded = take(sequence, readers * each, size - readers * each) if policy == "drop" else []
    return part, excluded


def plan_parts(counts: list[int], readers: int, reader: int, policy: str) -> list[tuple[int, int, int]]:
    """``(shard position, first sample, count)`` pieces of reader ``reader``'s part (see the module doc)."""
    return pieces(plan([(0, sum(counts))], readers, reader, policy)[0], counts)


def pieces(part: Intervals, counts: Sequence[int] | np.ndarray) -> list[tuple[int, int, int]]:
    """Global position intervals as ``(shard position, first sample, count)`` pieces, in order."""
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    out = []
    for a, b in part:
        while a < b:
            shard = int(np.searchsorted(starts, a, side="right")) - 1
            n = min(b, int(starts[shard + 1])) - a
            out.append((shard, a - int(starts[shard]), n))
            a += n
    return out


class BalancedSplit(Recipe):
    """The stage that gives this rank and worker its equal part of the epoch's samples."""

    per_reader = True
    splits_epoch = True

    def __init__(self, policy: str = "pad", reading: ShardReadOptions | None = None, sample_counts: Any = None) -> None:
        if policy not in ("pad", "drop"):
            raise SpecError(f"balanced must be 'pad' or 'drop', got {policy!r}")
        self.policy, self.reading = policy, reading or ShardReadOptions()
        self.counts: SampleCounts | None = None
        if sample_counts is not None:
            self.counts = (
                sample_counts
                if isinstance(sample_counts, SampleCounts)
                else SampleCounts(sample_counts, self.reading.storage)
            )

    def build(self, src: Any, ctx: RunContext) -> BalancedIterator:
        rank, world = node_info()
        worker, workers = worker_info()
        return BalancedIterator(src, self, rank * workers + worker, world * workers)


class BalancedIterator(StageIterator):
    """Reader ``reader`` of ``readers``: its part of the epoch as reading tasks ``{url, offset, count, sample}``.

    It is the :class:`~wds_core.state.BalancedPart` of elastic resume.
    """

    passes_order = False  # its items are reading tasks, not samples

    def __init__(self, src: Any, recipe: BalancedSplit, reader: int, readers: int) -> None:
        super().__init__(src)
        self.recipe, self.reader, self.readers = recipe, reader, readers
        self.done = 0  # tasks handed downstream
        self.handed = 0  # samples in them
        self.elastic: dict[str, Any] | None = None  # the merged state this epoch resumes from, if any
        self.total = 0  # samples in the epoch
        self.settled: Intervals = []  # positions no reader of this layout reads: consumed before, or dropped
        self._plan: tuple[Intervals, list[dict[str, Any]]] | None = None
        self._encoded_part: str | None = None

    def _planned(self) -> tuple[Intervals, list[dict[str, Any]]]:
        if self._plan is None:
            counts, url_at, sizes = self._epoch_counts()
            self.total = int(np.sum(counts))
            sequence = [(0, self.total)]
            before: Intervals = []
            if self.elastic is not None:
                if self.elastic["total"] != self.total:
                    raise CheckpointError(
                        f"the elastic state counts {self.elastic['total']} samples in epoch; these shards have "
                        f"{self.total} (the shards changed since the checkpoint)"
                    )
                before = decode(self.elastic["consumed"])
                sequence = complement(before, self.total)
            part, excluded = plan(sequence, self.readers, self.reader, self.recipe.policy)
            self.settled = normalize(before + excluded)
            tasks = []
            for shard, first, count in pieces(part, counts):
                tasks.append({"url": url_at(shard), "count": count, "sample": first, "nsamples": int(counts[shard])})
                if sizes is not None:
                    tasks[-1]["size"] = int(sizes[shard])
            self._plan = (part, tasks)
        return self._plan

    def _epoch_counts(self) -> tuple[Any, Callable[[int], str], Any]:
        """The sample counts of the epoch's shards in its order, the URL of the i-th, their sizes (or None)."""
        given = self.recipe.counts
        if given is not None and given.positional:  # counts by spec position: no shard is named but ours
            names, positions = self._epoch_positions()
            stored = given.by_position(names)
            sizes = None if stored.sizes is None else stored.sizes[positions]
            return stored.counts[positions], lambda shard: names[int(positions[shard])], sizes
        # the whole epoch's shards: named in bulk when the source is a shard list
        urls = self.src.rest() if isinstance(self.src, ShardListIterator) else [url_of(i) for i in self.src]
        if given is not None:
            counts = given.of(urls)  # the offset indexes of this reader's shards only, when reached
        else:
            counts = [len(_index(url, self.recipe.reading)) for url in urls]
        return counts, urls.__getitem__, None

    def _epoch_positions(self) -> tuple[Sequence[str], np.ndarray]:
        """The shard list in spec order and the spec positions of this epoch's shards, in the epoch's order."""
        if isinstance(self.src, ShardListIterator):
            return self.src.rest_positions()
        urls = [url_of(item) for item in self.src]  # another source: its order must be the spec's
        return urls, np.arange(len(urls))

    def _located(self, task: dict[str, Any]) -> dict[str, Any]:
        """``task`` with the byte offset of its first sample, from the shard's index (read when it is reached)."""
        given = self.recipe.counts
        size = task.get("size") or (given.size_of(task["url"]) if given is not None else None)
        index = _index(task["url"], self.recipe.reading, size)
        if len(index) != task["nsamples"]:
            raise SpecError(
                f"{task['url']} holds {len(index)} samples; {given.where() if given else 'its index'} "
                f"says {task['nsamples']} (rebuild the counts after changing shards)"
            )
        offset = index.members[index.starts[task["sample"]]][1]
        return {"url": task["url"], "offset": offset, "count": task["count"], "sample": task["sample"]}

    def part(self) -> Intervals:
        """This reader's global positions, in reading order."""
        return self._planned()[0]

    def samples_handed(self) -> int:
        """Samples in the tasks handed downstream so far (read or being read)."""
        return self.handed

    def summarize(self, prefix: int, extra: Any) -> dict[str, Any]:
        """The ``"position"`` entry of a state: this reader's part and what of it was delivered."""
        part = self.part()
        consumed, scattered = local_to_global(part, prefix, extra)
        if self._encoded_part is None:
            self._encoded_part = encode(normalize(part))
        position = {
            "reader": [self.reader, self.readers],
            "total": self.total,
            "policy": self.recipe.policy,
            "consumed": encode(normalize(self.settled + consumed)),
            "part": self._encoded_part,
        }
        if len(scattered):  # delivered out of order past the prefix (shuffle buffers)
            position["scattered"] = encode(runs(scattered))
        return position

    def resume_elastic(self, elastic: dict[str, Any]) -> None:
        """Take this reader's share of the positions a merged state left (before the epoch starts)."""
        if self._plan is not None or self.done:
            raise CheckpointError("an elastic state is loaded before the epoch starts")
        self.elastic = elastic

    def _run(self) -> Iterator[dict[str, Any]]:
        for task in self._planned()[1][self.done :]:
            located = self._located(task)
            self.done += 1
            self.handed += task["count"]
            yield located

    def _own_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"done": self.done, "handed": self.handed, "reader": [self.reader, self.readers]}
        if self.elastic is not None:
            state["elastic"] = self.elastic
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # the shard list is read again from the start of the epoch (same order: same seed and epoch)
        self.done, self.handed = int(state["done"]), int(state.get("handed", 0))
        self.elastic = state.get("elastic")
        if state.get("reader") not in (None, [self.reader, self.readers]):
            raise SpecError(
                f"this checkpoint was taken by reader {state['reader'][0]} of {state['reader'][1]}; "
                f"this is reader {self.reader} of {self.readers} (to resume on another number of ranks or "
                "workers, merge the states of all readers with wds_core.merge_states())"
            )
        if isinstance(self.src, ShardListIterator) and "parent" in state:
            self.src.restart(state["parent"])  # the shard list from its start again
        elif self.src is not None and "parent" in state:
            load_state(self.src, {**state["parent"], "index": 0})
