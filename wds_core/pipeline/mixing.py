"""Mixing several datasets into one stream: ``RandomMix`` and ``RoundRobin``.

``RandomMix([a, b], probs=[0.7, 0.3], seed=0)`` draws each next item from
``a`` with probability 0.7 and from ``b`` with 0.3; ``RoundRobin([a, b])``
takes one from each in turn.  When a dataset runs out, ``longest=False`` (the
default, as in webdataset) ends the stream; ``longest=True`` goes on with the
others (probabilities renormalised among them).

Both are pipelines themselves (iterable, ``set_epoch``, fluid methods,
``state_dict``) and can also be the first stage of a :class:`DataPipeline`.
Each epoch of the mix runs the same epoch of every dataset; the draws are a
pure function of ``(seed, epoch, rank, worker)``.  The state holds every
dataset's own state plus the draw position, so checkpoints are exact whenever
the datasets' are.  Give every dataset its own ``seed`` for a reproducible mix.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..dist import node_info, worker_info
from ..errors import CheckpointError, SpecError
from ..rng import Rng, derive_seed
from ..state import Recipe, RunContext, StageIterator, describe, state_of
from .datapipeline import DataPipeline, ListSource
from .fluid import FluidInterface

__all__ = ["Mix", "RandomMix", "RoundRobin"]


class Mix(Recipe):
    """The stage behind :class:`RandomMix` and :class:`RoundRobin` (``mode="random"`` or ``"roundrobin"``).

    Its datasets split their shards by rank and worker, so what it yields is each reader's own.
    """

    per_reader = True

    def __init__(
        self,
        datasets: Sequence[Any],
        probs: Sequence[float] | None = None,
        longest: bool = False,
        mode: str = "random",
        seed: int | None = None,
    ) -> None:
        # the list it was given, as webdataset keeps it: datasets put in it (or replaced) later are mixed too
        self.datasets = datasets if isinstance(datasets, list) else list(datasets)
        if mode not in ("random", "roundrobin"):
            raise SpecError(f"mode must be 'random' or 'roundrobin', got {mode!r}")
        self.probs, self.longest, self.mode, self.seed = probs, bool(longest), mode, seed
        if self.datasets:  # an empty list may be filled in before the mix runs, as with webdataset's
            self.weights  # noqa: B018 - checked now, and again when a run starts

    @property
    def weights(self) -> list[float]:
        """The probabilities of the datasets as they are now (all 1 without ``probs``), checked."""
        if not self.datasets:
            raise SpecError("a mix needs at least one dataset")
        probs = self.probs
        weights = [1.0] * len(self.datasets) if probs is None else [float(p) for p in probs]
        if len(weights) != len(self.datasets):
            raise SpecError(f"{len(weights)} probabilities for {len(self.datasets)} datasets")
        if any(w < 0 for w in weights) or not sum(weights) > 0:
            raise SpecError(f"probabilities must be >= 0 with a positive sum, got {weights}")
        return weights

    def recipe_name(self) -> str:
        parts = [d.fingerprint() if isinstance(d, DataPipeline) else type(d).__name__ for d in self.datasets]
        return f"Mix[{self.mode},{self.longest},{self.weights}]({','.join(parts)})"

    def build(self, src: Any, ctx: RunContext) -> _MixIterator:
        if src is not None:
            raise SpecError("a mix is a source: put it first in a pipeline")
        seed = self.seed if self.seed is not None else ctx.seed
        rank, worker = node_info()[0], worker_info()[0]
        return _MixIterator(self, ctx.epoch, derive_seed(seed, "mix", ctx.stage, ctx.epoch, rank, worker))


def _source(dataset: Any, epoch: int) -> Any:
    """A private copy of a dataset for one run of the mix, at ``epoch``."""
    if isinstance(dataset, DataPipeline):
        return dataset.fresh_copy(epoch)
    if isinstance(dataset, (list, tuple)):
        return ListSource(list(dataset))
    return dataset


class _MixIterator(StageIterator):
    passes_order = False  # items of several datasets

    def __init__(self, recipe: Mix, epoch: int, seed: int) -> None:
        super().__init__(None)
        self.recipe = recipe
        self.rng = Rng(seed)
        self.sources = [_source(d, epoch) for d in recipe.datasets]
        self.weights = recipe.weights
        self.active = [w > 0 for w in self.weights] if recipe.mode == "random" else [True] * len(self.sources)
        self.turn = 0  # round robin: whose turn it is
        self.iterators: list[Any] = [None] * len(self.sources)

    def _pick(self) -> int:
        if self.recipe.mode == "roundrobin":
            n = len(self.sources)
            while not self.active[self.turn]:
                self.turn = (self.turn + 1) % n
            chosen, self.turn = self.turn, (self.turn + 1) % n
            return chosen
        weights = [w if a else 0.0 for w, a in zip(self.weights, self.active)]
        target = self.rng.next64() / 2.0**64 * sum(weights)
        for i, w in enumerate(weights):
            if target < w:
                return i
            target -= w
        return max(i for i, w in enumerate(weights) if w > 0)  # rounding at the very top

    def _run(self) -> Iterator[Any]:
        while any(self.active):
            i = self._pick()
            if self.iterators[i] is None:
                self.iterators[i] = iter(self.sources[i])
            try:
                item = next(self.iterators[i])
            except StopIteration:
                self.active[i] = False
                if not self.recipe.longest:
                    self.active = [False] * len(self.active)
                continue
            yield item

    def _own_state(self) -> dict[str, Any]:
        states = []
        for source in self.sources:
            if not hasattr(source, "state_dict"):
                raise CheckpointError(f"a mixed dataset ({describe(source)}) has no state_dict()")
            states.append(state_of(source))
        return {"rng": self.rng.state, "active": list(self.active), "turn": self.turn, "sources": states}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        if len(state["sources"]) != len(self.sources):
            raise CheckpointError("the checkpoint mixes a different number of datasets")
        self.rng.state = int(state["rng"])
        self.active = [bool(a) for a in state["active"]]
        self.turn = int(state["turn"])
        for source, sub in zip(self.sources, state["sources"]):
            source.load_state_dict(sub)


class RandomMix(DataPipeline, FluidInterface):
    """Items drawn from ``datasets`` at random with probabilities ``probs`` (see the module doc)."""

    def __init__(
        self,
        datasets: Sequence[Any],
        probs: Sequence[float] | None = None,
        longest: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(Mix(datasets, probs, longest, "random", seed), seed=seed)


class RoundRobin(DataPipeline, FluidInterface):
    """One item from each of ``datasets`` in turn (see the module doc)."""

    def __init__(self, datasets: Sequence[Any], longest: bool = False) -> None:
        super().__init__(Mix(datasets, None, longest, "roundrobin"), seed=0)
