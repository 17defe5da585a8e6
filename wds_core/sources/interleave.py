"""Reading many shards at once, each next sample from one of them at random: ``WebDataset(..., interleave=K)``.

A streaming shuffle mixes only what its buffer holds.  With shards stored in order (a class, a source, a crawl
date per shard) and 100 samples a shard, ``shardshuffle=True`` and ``shuffle(1000)`` give a batch of 256 a
quarter of the distinct shards a global shuffle gives (``wds stats --shuffle``): the buffer holds about ten
shards.  Here the reader keeps ``K`` shards open (its *lanes*) and takes each next sample from a lane drawn
uniformly at random; a lane whose shard ends takes the next shard of the list.  A batch of ``b`` then comes
from about ``K (1 - (1 - 1/K)^b)`` shards, what a global shuffle of ``K`` shards gives, while each lane holds
one sample ahead and at most :data:`LANE_CHUNK` bytes read past it (and, for a remote shard, at most
``ReadAhead.window_bytes`` requested ahead).  A ``shuffle(B)`` after it mixes the samples each lane gives in
storage order; it holds ``B`` samples, so the pipeline holds ``B + K``.

Reading is what a single-shard reader does, lane by lane: each lane is the tar reader of
:mod:`wds_core.sources.reader` given one shard (or one reading task of a balanced epoch), with its errors,
limits, handler and byte-offset checkpoints.  The handler's ``False`` about any shard ends the whole stream,
as it does for one shard at a time.  The remote lanes share one :class:`~wds_core.io.readahead.Allowance`:
``in_flight`` requests and ``budget`` bytes for all of them, each shard at most ``window_bytes`` ahead; the
shards next in the list are opened and requested ahead (``shards_ahead``) so that a lane that takes one
does not wait for its first range.

The draws are a pure function of the seed, the epoch and (after a splitter) the rank and the worker.  The state
is the shard list's, each lane's shard and byte offset, and the random state: a restore reopens every lane at its
offset and draws on exactly as before.  Which samples of a balanced epoch were delivered is not followed through
the lanes: elastic resume through this reader is refused (:class:`~wds_core.errors.NotElastic`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from ..dist import stream_seed
from ..errors import SpecError
from ..io.engine import POOL_WORKERS
from ..io.readahead import Allowance, ReadAhead
from ..io.storage import Storage, remote_url, url_of
from ..rng import Rng
from ..state import Recipe, RunContext, StageIterator
from .lists import ListSource
from .reader import ShardReader
from .reading import ShardReadOptions
from .tarsamples import TarfileToSamples

__all__ = ["LANE_CHUNK", "LANE_RANGE", "InterleaveShards", "lane_ranges", "lane_read_ahead", "lanes_allowance"]

LANE_CHUNK = 4096  # bytes a lane reads (or walks) at a time past its next sample: small members come together
LANE_RANGE = 256 << 10  # the smallest range a remote lane requests (many lanes split the budget into these)
_END = object()


def lane_ranges(plan: ReadAhead, lanes: int) -> int:
    """The range a remote lane requests: up to a quarter of its part of the budget (so that it keeps four in flight),
    at least ``LANE_RANGE`` and at most the plan's ranges.  Few lanes read as one shard does (4 lanes of the default
    64 MiB budget: 2 MiB ranges); many lanes split the budget into small ranges (200 lanes: 256 KiB)."""
    return min(plan.range_bytes, max(LANE_RANGE, plan.budget // max(lanes, 1) // 4))


def lane_read_ahead(plan: ReadAhead, lanes: int) -> ReadAhead:
    """The read-ahead of each of ``lanes`` remote shards read at once: :func:`lane_ranges`, and an equal part of the
    budget requested ahead of each shard (at least one range), the budget shared.

    Each lane used to keep two ranges of 256 KiB in flight whatever the budget, so that a few lanes left most of it
    idle: 16 shards of 16 MB from a server at 40 ms and 40 MB/s a connection read at 21 MB/s with 2 lanes, 38 with
    4 and 104 with 16, against 399 one shard after another (``python benchmarks/bench_store.py --rows shaped
    --interleave 2,4,8,16``)."""
    ranges = lane_ranges(plan, lanes)
    window = max(plan.budget // max(lanes, 1), ranges)
    return dataclasses.replace(
        plan, range_bytes=ranges, first_range=min(plan.first_range, ranges), window_bytes=window, ramp=0
    )


def lanes_allowance(plan: ReadAhead, lanes: int) -> ReadAhead:
    """What the lanes request together: the budget of ``plan``, and as many requests at once as keep as many bytes
    in flight with the lanes' ranges (up to the I/O pool's threads)."""
    ranges = lane_ranges(plan, lanes)
    in_flight = min(POOL_WORKERS, max(plan.in_flight, plan.in_flight * plan.range_bytes // ranges))
    return dataclasses.replace(plan, in_flight=in_flight)


class InterleaveShards(Recipe):
    """Stage: a stream of shards to a stream of samples, reading ``lanes`` shards at once (see the module doc).

    In place of ``tarfile_to_samples()`` in a pipeline::

        DataPipeline(SimpleShardList(urls, seed=7), split_by_node, split_by_worker, InterleaveShards(64), shuffle(936))

    ``options`` say how shards are opened and read (:class:`~wds_core.sources.reading.ShardReadOptions`: handler,
    member selection, storage, cache, retries, limits, read-ahead; the defaults of ``tarfile_to_samples()``
    without); ``seed`` (default: the pipeline's) with the epoch, the stage and, after a splitter, the rank and
    worker, makes the draws.
    """

    def __init__(self, lanes: int, options: ShardReadOptions | None = None, seed: int | None = None) -> None:
        if not isinstance(lanes, int) or isinstance(lanes, bool) or lanes < 1:
            raise SpecError(f"interleave must be an integer >= 1 (shards read at once), got {lanes!r}")
        options = options or ShardReadOptions()
        self.lanes = lanes
        self.seed = seed
        self.plan = options.storage.read_ahead
        lanes_storage = Storage.of(options.storage, read_ahead=lane_read_ahead(self.plan, lanes))
        self.reader = TarfileToSamples.from_options(options.with_storage(lanes_storage))

    def stage_name(self) -> str:
        return "tarfile_to_samples"

    def build(self, src: Any, ctx: RunContext) -> _InterleaveIterator:
        return _InterleaveIterator(src, self, Rng(stream_seed(self.seed, ctx, "interleave")))


class _InterleaveIterator(StageIterator):
    passes_order = False  # samples of several shards; not a ReportsDelivered: elastic resume is refused through it

    def __init__(self, src: Any, recipe: InterleaveShards, rng: Rng) -> None:
        super().__init__(src)
        self.recipe = recipe
        self.rng = rng
        self.lanes: list[ShardReader] = []
        self.items: list[Any] = []  # the shard (or reading task) of each lane
        # each lane's part of the state, kept until the lane moves on (a shuffle after this reader asks for the
        # state every 64 samples: building all of it again would cost 2 us a lane each time)
        self.states: list[dict[str, Any] | None] = []
        self.restored: list[dict[str, Any]] | None = None  # the lanes of a checkpoint, until the run starts
        self.bytes_done = 0  # read by lanes that are finished
        self.allowance = Allowance(lanes_allowance(recipe.plan, recipe.lanes))  # the remote lanes' requests, together
        self.ahead: list[tuple[Any, Any]] = []  # (item, stream opened and requested ahead) for the next lanes

    def report(self) -> dict[str, Any]:
        report = super().report()
        report["bytes"] = self.bytes_done + sum(int(lane.report()["bytes"]) for lane in self.lanes)
        return report

    def _lane(self, item: Any, state: dict[str, Any] | None = None, stream: Any = None) -> ShardReader:
        """A reader of the one shard ``item``: from its start, or where ``state`` says; ``stream`` is the shard
        opened ahead."""
        lane = self.recipe.reader.build(ListSource([item]), RunContext())
        lane.chunk = LANE_CHUNK
        lane.map_files = False  # a map would keep what a lane has read of its shard resident until the shard ends
        lane.share_requests(self.allowance)
        if state is not None:
            lane.load_state_dict(state)
        if stream is not None:
            lane.opened_ahead(url_of(item), stream)
        return lane

    def _next_item(self, source: Iterator[Any]) -> tuple[Any, Any]:
        """The next shard of the list (``_END`` at its end) and its stream when it was opened ahead."""
        while len(self.ahead) < self.recipe.plan.shards_ahead + 1:
            item = next(source, _END)
            if item is _END:
                break
            self.ahead.append((item, self._open_ahead(item)))
        return self.ahead.pop(0) if self.ahead else (_END, None)

    def _open_ahead(self, item: Any) -> Any:
        """A remote shard's stream, opened and its first ranges requested within the lanes' allowance."""
        url = url_of(item)
        if not remote_url(url) or (isinstance(item, dict) and int(item.get("offset", 0))):
            return None
        try:
            stream = self.recipe.reader.open(url)
        except Exception:  # opened again by its lane, which reports it through the handler
            return None
        if not hasattr(stream, "attach"):
            stream.close()
            return None
        stream.attach(self.allowance, first=False)
        stream.prefetch()
        return stream

    def _run(self) -> Iterator[Any]:
        source = iter(self.src)
        lanes, items, states = self.lanes, self.items, self.states
        if self.restored is not None:
            items[:] = [lane["item"] for lane in self.restored]
            lanes[:] = [self._lane(lane["item"], lane["reader"]) for lane in self.restored]
            states[:] = list(self.restored)
            self.restored = None
        iterators = [iter(lane) for lane in lanes]
        try:
            while len(lanes) < self.recipe.lanes:
                item, stream = self._next_item(source)
                if item is _END:
                    break
                items.append(item)
                lanes.append(self._lane(item, stream=stream))
                states.append(None)
                iterators.append(iter(lanes[-1]))
            below = self.rng.below
            while lanes:
                chosen = below(len(lanes))
                sample = next(iterators[chosen], _END)
                states[chosen] = None
                if sample is not _END:
                    yield sample
                    continue
                finished = lanes[chosen]
                self.bytes_done += int(finished.report()["bytes"])
                if finished.ended_by_handler:
                    return
                item, stream = self._next_item(source)
                if item is _END:
                    del lanes[chosen], items[chosen], states[chosen], iterators[chosen]
                else:
                    items[chosen], lanes[chosen] = item, self._lane(item, stream=stream)
                    iterators[chosen] = iter(lanes[chosen])
        finally:
            for iterator in iterators:
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()
            for lane in lanes:  # a lane never started still holds the stream opened ahead for it
                lane.drop_opened_ahead()
            for _, stream in self.ahead:
                if stream is not None:
                    stream.close()

    def _own_state(self) -> dict[str, Any]:
        if self.restored is not None:
            return {"lanes": self.restored, "rng": self.rng.state, "ahead": [item for item, _ in self.ahead]}
        states = self.states
        for i, state in enumerate(states):
            if state is None:  # a lane not started yet has its shard still to take: its item goes with its state
                states[i] = {"item": self.items[i], "reader": self.lanes[i].state_dict()}
        return {"lanes": list(states), "rng": self.rng.state, "ahead": [item for item, _ in self.ahead]}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.restored = list(state["lanes"])
        self.rng.state = int(state["rng"])
        self.ahead = [(item, None) for item in state.get("ahead", [])]
