"""Reading many shards at once, each next sample from one of them at random: ``WebDataset(..., interleave=K)``.

A streaming shuffle mixes only what its buffer holds.  With shards stored in order (a class, a source, a crawl
date per shard) and 100 samples a shard, ``shuffle=True`` and ``.shuffle(1000)`` give a batch of 256 a
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
as it does for one shard at a time.  The remote lanes share one :class:`~wds_core.io.remote.readahead.Allowance`:
``in_flight`` requests and ``budget`` bytes for all of them, each shard at most ``window_bytes`` ahead; the
shards next in the list are opened and requested ahead (``shards_ahead``) so that a lane that takes one
does not wait for its first range.

The draws are a pure function of the seed, the epoch and (after a splitter) the rank and the worker.  The state
is the shard list's position before the oldest shard still held (a lane's, or one opened ahead), how many shards
were taken since, each lane's shard by its place among those (with the lane reader's digest of it) and byte
offset, and the random state: a restore takes the same shards from the list again, checks them, reopens every
lane at its offset and draws on exactly as before.  Like every reader's, the state names no URL.  Which samples
of a balanced epoch were delivered is not followed through the lanes: elastic resume through this reader is
refused (:class:`~wds_core.errors.NotElastic`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from ..dist import stream_seed
from ..errors import CheckpointError, SpecError
from ..io.remote.engine import POOL_WORKERS
from ..io.remote.readahead import Allowance, ReadAhead
from ..io.storage import Storage, remote_url, url_of
from ..rng import Rng
from ..state import Recipe, RunContext, StageIterator, state_of, state_or_error
from .lists import ListSource
from .reader import ShardReader, shard_digest
from .readoptions import ShardReadOptions
from .tarsamples import TarfileToSamples

__all__ = ["LANE_CHUNK", "LANE_RANGE", "InterleaveShards", "lane_ranges", "lane_read_ahead", "lanes_allowance"]

LANE_CHUNK = 4096  # bytes a lane reads (or walks) at a time past its next sample: small members come together
LANE_RANGE = 256 << 10  # the smallest range a remote lane requests (many lanes split the budget into these)
_END = object()


def lane_ranges(plan: ReadAhead, lanes: int) -> int:
    """The range a remote lane requests: up to a quarter of its part of the budget (so that it keeps four in flight),
    at least ``LANE_RANGE`` and at most the plan's ranges.  Few lanes read as one shard does (4 lanes of the default
    128 MiB budget: 2 MiB ranges); many lanes split the budget into small ranges (200 lanes: 256 KiB)."""
    return min(plan.range_bytes, max(LANE_RANGE, plan.budget // max(lanes, 1) // 4))


def lane_read_ahead(plan: ReadAhead, lanes: int) -> ReadAhead:
    """The read-ahead of each of ``lanes`` remote shards read at once: :func:`lane_ranges`, and an equal part of the
    budget requested ahead of each shard (at least one range), the budget shared: a lane with a fixed number of
    ranges in flight would leave most of the budget idle when lanes are few (``benchmarks/bench_store.py --rows
    shaped --interleave``)."""
    ranges = lane_ranges(plan, lanes)
    window = max(plan.budget // max(lanes, 1), ranges)
    return dataclasses.replace(
        plan, range_bytes=ranges, first_range=min(plan.first_range, ranges), window_bytes=window, ramp=0,
        max_range=ranges,
    )  # fmt: skip


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

    ``options`` say how shards are opened and read (:class:`~wds_core.sources.readoptions.ShardReadOptions`: handler,
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
        # each lane's reader state, kept until the lane moves on (a shuffle after this reader asks for the
        # state every 64 samples: building all of it again would cost 2 us a lane each time)
        self.states: list[dict[str, Any] | None] = []
        self.restored: dict[str, Any] | None = None  # the state of a checkpoint, until the run starts
        self.taken = 0  # shards taken from upstream (since the position a restore started from)
        self.numbers: list[int] = []  # which of those each lane reads
        self.before: dict[int, Any] = {}  # the upstream's state before each shard still held was taken
        self.bytes_done = 0  # read by lanes that are finished
        # the remote lanes' requests, together; every lane's first range at once (no start-up bound: a lane's first
        # sample needs its own shard's first range, whatever the others asked for)
        self.allowance = Allowance(dataclasses.replace(lanes_allowance(recipe.plan, recipe.lanes), ramp=0))
        # (item, stream opened and requested ahead, its number) for the next lanes
        self.ahead: list[tuple[Any, Any, int]] = []

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

    def _take(self, source: Iterator[Any]) -> Any:
        """The next shard of the list (``_END`` at its end); the list's state before it is kept while it is held."""
        before = state_or_error(self.src)
        item = next(source, _END)
        if item is not _END:
            self.before[self.taken] = before
            self.taken += 1
        return item

    def _next_item(self, source: Iterator[Any]) -> tuple[Any, Any, int]:
        """The next shard of the list (``_END`` at its end), its stream when it was opened ahead, and its number."""
        while len(self.ahead) < self.recipe.plan.shards_ahead + 1:
            item = self._take(source)
            if item is _END:
                break
            self.ahead.append((item, self._open_ahead(item), self.taken - 1))
        return self.ahead.pop(0) if self.ahead else (_END, None, -1)

    def _let_go(self, number: int) -> None:
        """Shard ``number`` is no longer held: the state need not go back to before it."""
        self.before.pop(number, None)

    def _restore(self, source: Iterator[Any]) -> None:
        """Take the shards of a checkpoint from upstream again (it is back before the oldest one), check those held
        ahead against their digests (each lane's reader checks its own) and set the lanes up where they were."""
        restored, self.restored = self.restored or {}, None
        taken = []
        for number in range(int(restored["taken"])):
            item = self._take(source)
            if item is _END:
                raise CheckpointError(
                    f"the checkpoint of the interleaving reader holds {restored['taken']} shards from its position "
                    f"but the shard list gives {number}: the shard list changed since the checkpoint"
                )
            taken.append(item)
        places = [lane["at"] for lane in restored["lanes"]] + [at for at, _ in restored.get("ahead", [])]
        if not all(isinstance(at, int) and 0 <= at < len(taken) for at in places):
            raise CheckpointError(f"the checkpoint of the interleaving reader names places {places} among {len(taken)}")
        named = [(lane["at"], digest) for lane in restored["lanes"] for digest in lane["reader"].get("shards", [])]
        for at, digest in named + list(restored.get("ahead", [])):
            if shard_digest(url_of(taken[int(at)])) != digest:
                raise CheckpointError(
                    "the checkpoint of the interleaving reader names a shard the pipeline does not have at its "
                    "position: the shard list changed since the checkpoint, or the state was edited"
                )
        for lane in restored["lanes"]:
            at = int(lane["at"])
            self.items.append(taken[at])
            self.numbers.append(at)
            self.lanes.append(self._lane(taken[at], lane["reader"]))
            self.states.append(lane["reader"])
        for at, _ in restored.get("ahead", []):
            self.ahead.append((taken[int(at)], None, int(at)))
        held = set(self.numbers) | {number for _, _, number in self.ahead}
        for number in range(len(taken)):
            if number not in held:
                self._let_go(number)

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
        lanes, items, states, numbers = self.lanes, self.items, self.states, self.numbers
        if self.restored is not None:
            self._restore(source)
        iterators = [iter(lane) for lane in lanes]
        try:
            while len(lanes) < self.recipe.lanes:
                item, stream, number = self._next_item(source)
                if item is _END:
                    break
                items.append(item)
                numbers.append(number)
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
                self._let_go(numbers[chosen])
                item, stream, number = self._next_item(source)
                if item is _END:
                    del lanes[chosen], items[chosen], states[chosen], iterators[chosen], numbers[chosen]
                else:
                    items[chosen], lanes[chosen], numbers[chosen] = item, self._lane(item, stream=stream), number
                    iterators[chosen] = iter(lanes[chosen])
        finally:
            for iterator in iterators:
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()
            for lane in lanes:  # a lane never started still holds the stream opened ahead for it
                lane.drop_opened_ahead()
            for _, stream, _ in self.ahead:
                if stream is not None:
                    stream.close()

    def state_dict(self) -> dict[str, Any]:
        if self.restored is not None:
            return {**self.restored, "rng": self.rng.state}
        states = self.states
        for i, state in enumerate(states):
            if state is None:
                states[i] = self.lanes[i].state_dict()
        ahead = [number for _, _, number in self.ahead]
        oldest = min(self.numbers + ahead, default=self.taken)
        parent = self.before.get(oldest) if oldest < self.taken else None
        return {
            "parent": state_of(self.src) if parent is None or isinstance(parent, Exception) else parent,
            "taken": self.taken - oldest,
            "lanes": [{"at": number - oldest, "reader": state} for number, state in zip(self.numbers, states)],
            "ahead": [[number - oldest, shard_digest(url_of(item))] for item, _, number in self.ahead],
            "rng": self.rng.state,
        }

    def _load_own_state(self, state: dict[str, Any]) -> None:
        if any("item" in lane for lane in state["lanes"]):
            raise CheckpointError(
                "this state names its shards by URL (a checkpoint of an older wds): a state names positions, never "
                "places; take the checkpoint again"
            )
        self.restored = {key: state[key] for key in ("parent", "taken", "lanes", "ahead")}
        self.rng.state = int(state["rng"])
