"""Shuffle stages: a buffer whose checkpoints never contain samples.

A shuffle records the upstream state at a point before the oldest item it still holds, which of the items
since then are still buffered (a compressed bitmap), and its random state; restoring replays the upstream from
that point and keeps exactly those items.
"""

from __future__ import annotations

import base64
import collections
import random
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..dist import stream_seed
from ..elastic import WindowProgress
from ..errors import CheckpointError, SpecError
from ..rng import Rng
from ..state import Recipe, RunContext, StageIterator, load_state, replayed, state_of

__all__ = ["DetShuffle", "Shuffle"]

_SNAPSHOT_EVERY = 64


def positive(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise SpecError(f"{name} must be an integer >= 1, got {value!r}")
    return value


class Shuffle(Recipe):
    """Shuffle through a buffer of ``bufsize`` items, starting once ``initial`` are held.

    The random stream is derived from ``seed`` (or the pipeline's seed), the
    epoch and the stage's position; after a splitter (or any stage that gives
    each reader its own share) also from the rank and the worker.  Before a
    splitter every rank and worker therefore shuffles identically, so that
    they split the same order and no sample is read twice or never.

    ``rng=random.Random(...)`` draws from that generator instead, exactly as
    webdataset's ``shuffle(rng=...)`` does (same picks for the same generator
    state); its state carries over from one epoch to the next and is part of
    the checkpoint, which is then restored into the generator given to the
    new pipeline.
    """

    def __init__(self, bufsize: int = 1000, initial: int = 100, seed: int | None = None, rng: Any = None) -> None:
        self.bufsize = positive("shuffle bufsize", bufsize)
        self.initial = min(max(1, int(initial)), self.bufsize)
        if rng is not None:
            if seed is not None:
                raise SpecError("shuffle takes seed= or rng=, not both")
            if not all(callable(getattr(rng, name, None)) for name in ("randint", "getstate", "setstate")):
                raise SpecError(f"shuffle rng= must be a random.Random, got {type(rng).__name__}")
        self.seed = seed
        self.rng = rng

    def build(self, src: Any, ctx: RunContext) -> _ShuffleIterator:
        return _ShuffleIterator(src, self, self.rng if self.rng is not None else Rng(self.stream_seed(ctx)))

    def stream_seed(self, ctx: RunContext) -> int:
        return stream_seed(self.seed, ctx, "shuffle")


class DetShuffle(Shuffle):
    """webdataset's ``detshuffle``: the same order in every rank and worker, a function of ``seed`` and the epoch.

    Epoch ``e`` draws from ``random.Random(seed + epoch + 1 + e)`` with
    webdataset's picks, so the order is webdataset's for the same input and
    epoch (``epoch`` is webdataset's counter before the first epoch, ``-1``
    by default); the epoch is the pipeline's, so it also changes with
    non-persistent DataLoader workers.
    """

    def __init__(self, bufsize: int = 1000, initial: int = 100, seed: int = 0, epoch: int = -1) -> None:
        if isinstance(bufsize, int) and not isinstance(bufsize, bool) and bufsize < 2:
            bufsize = initial = 1  # webdataset's detshuffle(0): the order kept
        super().__init__(bufsize, initial, seed=int(seed))
        self.epoch = int(epoch)  # webdataset's attribute: the epoch last started (read only, here)
        self.first_epoch = int(epoch) + 1

    def build(self, src: Any, ctx: RunContext) -> _ShuffleIterator:
        self.epoch = self.first_epoch + ctx.epoch
        return _ShuffleIterator(src, self, random.Random(int(self.seed or 0) + self.epoch))


def _encode_ints(values: Any) -> str:
    return base64.b64encode(zlib.compress(np.asarray(values, dtype=np.uint32).tobytes())).decode("ascii")


def _decode_ints(text: str) -> list[int]:
    return np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype=np.uint32).tolist()


class _ShuffleIterator(StageIterator):
    passes_order = False
    in_order = False  # a ReportsDelivered that reorders

    def __init__(self, src: Any, recipe: Shuffle, rng: Any) -> None:
        super().__init__(src)
        self.recipe = recipe
        self.rng = rng
        # A user's random.Random picks as webdataset does (swap with the last item), so the buffer is not
        # in arrival order and its order is part of the state; our own picks keep arrival order.
        self.swap = not isinstance(rng, Rng)
        self.buf: list[tuple[int, Any]] = []  # (arrival number, item)
        self.arrivals = 0
        self.exhausted = False
        self.snapshots: collections.deque[tuple[int, Any, Any]] = collections.deque()
        self.progress = WindowProgress("shuffle")
        self.snapshot_error: CheckpointError | None = None
        self.replay: tuple[int, set[int], list[int] | None] | None = None
        self.restored: dict[str, Any] | None = None

    def _oldest(self) -> int:
        if not self.buf:
            return self.arrivals
        return min(arrival for arrival, _ in self.buf) if self.swap else self.buf[0][0]

    def _snapshot(self) -> None:
        if self.snapshot_error is not None:
            return
        try:
            state = state_of(self.src)
        except CheckpointError as exn:
            self.snapshot_error = exn
            return
        if not self.swap or len(self.snapshots) >= 16:  # finding the oldest item of a swapped buffer is a scan
            oldest = self._oldest()
            while len(self.snapshots) > 1 and self.snapshots[1][0] <= oldest:
                self.snapshots.popleft()
        self.snapshots.append((self.arrivals, state, self.progress.at_snapshot(self.src)))

    def _window(self) -> tuple[int, Any, Any]:
        """The latest snapshot ``(arrival number, upstream state, reader progress)`` before every buffered item."""
        oldest = self._oldest()
        chosen = self.snapshots[0]
        for snapshot in self.snapshots:
            if snapshot[0] <= oldest:
                chosen = snapshot
        return chosen

    def delivered_positions(self) -> tuple[int, Any]:
        if self.replay is not None:  # restored, not started: the replay window is still to be read
            count, kept, _ = self.replay
            at = self.progress.at_snapshot(self.src)
            return self.progress.since(self.src, at, count, sorted(kept), check=False)
        if not self.snapshots:
            self._snapshot()
        base, _, progress = self._window()
        held = [arrival - base for arrival, _ in self.buf]
        return self.progress.since(self.src, progress, self.arrivals - base, held)

    def _picker(self) -> Callable[[], Any]:
        buf, rng = self.buf, self.rng
        if not self.swap:
            return lambda: buf.pop(rng.below(len(buf)))[1]

        def pick() -> Any:
            k = rng.randint(0, len(buf) - 1)
            item = buf[k][1]
            buf[k] = buf[-1]
            buf.pop()
            return item

        return pick

    def _run(self) -> Iterator[Any]:
        src = iter(self.src)
        buf, pick = self.buf, self._picker()
        bufsize, initial = self.recipe.bufsize, self.recipe.initial
        if self.replay is not None:
            self.snapshots = collections.deque([(0, self.snapshots[0][1], self.progress.at_snapshot(self.src))])
            count, kept, order = self.replay
            held = {}
            for i, item in enumerate(replayed(src, count, "shuffle")):
                if i in kept:
                    held[i] = item
            buf.extend((i, held[i]) for i in (order if order is not None else sorted(held)))
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
                yield pick()
        while buf:
            yield pick()

    def _rng_state(self) -> Any:
        if not self.swap:
            return self.rng.state
        version, internal, gauss = self.rng.getstate()
        return [version, list(internal), gauss]

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
        state = {
            "parent": parent,
            "replay": count,
            "kept": base64.b64encode(zlib.compress(bytes(bits))).decode("ascii"),
            "rng": self._rng_state(),
            "exhausted": self.exhausted,
        }
        if self.swap:
            state["order"] = _encode_ints([arrival - base for arrival, _ in self.buf])
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self._gen is not None:
            raise CheckpointError("shuffle: load_state_dict() must come before iteration starts")
        if self.swap != ("order" in state):
            taken, here = ("without", "has") if self.swap else ("with", "has no")
            raise CheckpointError(f"shuffle: the checkpoint was taken {taken} rng=, and this shuffle {here} rng=")
        load_state(self.src, state["parent"])
        count = int(state["replay"])
        bits = zlib.decompress(base64.b64decode(state["kept"]))
        kept = {i for i in range(count) if bits[i >> 3] >> (i & 7) & 1}
        self.replay = (count, kept, _decode_ints(state["order"]) if self.swap else None)
        if self.swap:
            version, internal, gauss = state["rng"]
            self.rng.setstate((version, tuple(internal), gauss))
        else:
            self.rng.state = int(state["rng"])
        self.exhausted = bool(state["exhausted"])
        self.snapshots = collections.deque([(0, state["parent"], None)])
        self.restored = state
