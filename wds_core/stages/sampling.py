"""Random choices of items: keep each with a probability, or draw with replacement.

* :class:`RandomSample` (webdataset's ``rsample(p)``): each item is kept with
  probability ``p``;
* :class:`Resample` (webdataset's ``resampled(n)``): the whole upstream is read
  into memory, then ``n`` items are drawn from it with replacement.

Both draw from a seeded stream (:func:`wds_core.dist.stream_seed`: the same in
every reader before a splitter, each reader's own after it) and checkpoint
exactly: ``RandomSample`` by its random state, ``Resample`` by the upstream
state it started from (restoring reads the upstream again) and its draws.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from ..dist import stream_seed
from ..errors import SpecError
from ..rng import Rng
from ..state import Recipe, RunContext, StageIterator, load_state, state_of

__all__ = ["RandomSample", "Resample"]


class RandomSample(Recipe):
    """Keep each item with probability ``p`` (``0 <= p <= 1``)."""

    def __init__(self, p: float = 0.5, seed: int | None = None) -> None:
        if not 0.0 <= float(p) <= 1.0:
            raise SpecError(f"rsample probability must be between 0 and 1, got {p!r}")
        self.p, self.seed = float(p), seed

    def build(self, src: Any, ctx: RunContext) -> _RandomSampleIterator:
        return _RandomSampleIterator(src, self.p, Rng(stream_seed(self.seed, ctx, "rsample")))


class _RandomSampleIterator(StageIterator):
    passes_order = True  # like select: what it delivered is what it kept of a prefix of its input

    def __init__(self, src: Any, p: float, rng: Rng) -> None:
        super().__init__(src)
        self.threshold = int(p * 2.0**64)  # keep when a 64-bit draw falls below it
        self.rng = rng

    def _run(self) -> Iterator[Any]:
        threshold, rng = self.threshold, self.rng
        for item in self.src:
            if rng.next64() < threshold:
                yield item

    def _own_state(self) -> dict[str, Any]:
        return {"rng": self.rng.state}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.rng.state = int(state["rng"])


class Resample(Recipe):
    """Read every upstream item, then yield ``n`` of them drawn with replacement (forever by default)."""

    def __init__(self, n: int = sys.maxsize, seed: int | None = None) -> None:
        if not isinstance(n, int) or n < 0:
            raise SpecError(f"resampled needs a number of items >= 0, got {n!r}")
        self.n, self.seed = n, seed

    def build(self, src: Any, ctx: RunContext) -> _ResampleIterator:
        return _ResampleIterator(src, self.n, Rng(stream_seed(self.seed, ctx, "resampled")))


class _ResampleIterator(StageIterator):
    passes_order = False  # draws items with replacement

    def __init__(self, src: Any, n: int, rng: Rng) -> None:
        super().__init__(src)
        self.n, self.rng = n, rng
        self.count = 0
        self.start: Any = None  # the upstream's state before it was read: restoring reads it again

    def _run(self) -> Iterator[Any]:
        if self.start is None:
            self.start = state_of(self.src) if hasattr(self.src, "state_dict") else False
        items = list(self.src)
        if not items:
            return
        rng = self.rng
        while self.count < self.n:
            self.count += 1
            yield items[rng.below(len(items))]

    def state_dict(self) -> dict[str, Any]:
        start = self.start if self.start is not None else state_of(self.src)
        if start is False:
            start = state_of(self.src)  # raises: the upstream cannot be checkpointed
        return {"parent": start, "rng": self.rng.state, "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_state(self.src, state["parent"])
        self.start = state["parent"]
        self.rng.state, self.count = int(state["rng"]), int(state["count"])
