"""``DataPipeline``: stages in a row, epochs, repetition, and the checkpoint envelope.

A pipeline is a recipe: a list of stages and a few settings, picklable and
reusable.  Each ``iter()`` starts a *run* with its own epoch number; the run
builds one iterator per stage and keeps the last one, whose nested state is the
state of the whole stream.  ``state_dict()`` wraps it in an envelope with the
seed, the epoch and a fingerprint of the recipe, so that a checkpoint cannot be
restored into a different pipeline by mistake.
"""

from __future__ import annotations

import copy
import hashlib
import sys
import weakref
from collections.abc import Iterator
from typing import Any

from .errors import CheckpointError, EmptyDatasetError, SpecError
from .rng import fresh_seed
from .state import Recipe, RunContext, StageIterator, describe, load_state, state_of

__all__ = ["DataPipeline"]

STATE_FORMAT = "wds.pipeline/1"


class _ListSource(StageIterator):
    """A list given as the first stage: its position is its state."""

    def __init__(self, items: list[Any]) -> None:
        super().__init__(None)
        self.items = items
        self.index = 0

    def _run(self) -> Iterator[Any]:
        while self.index < len(self.items):
            self.index += 1
            yield self.items[self.index - 1]

    def _own_state(self) -> dict[str, Any]:
        return {"index": self.index}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])


def _build(stage: Any, src: Any, ctx: RunContext) -> Any:
    if isinstance(stage, Recipe):
        return stage.build(src, ctx)
    if src is None:
        if isinstance(stage, (list, tuple)):
            return _ListSource(list(stage))
        if isinstance(stage, DataPipeline) or hasattr(stage, "__iter__"):
            return iter(stage) if not hasattr(stage, "state_dict") else stage
        if callable(stage):
            return stage()
        raise SpecError(f"the first stage must be iterable or callable, got {type(stage).__name__}")
    if not callable(stage):
        raise SpecError(f"a pipeline stage must be callable (iterator -> iterator), got {type(stage).__name__}")
    return stage(src)


def _flatten(stages: tuple[Any, ...]) -> list[Any]:
    out: list[Any] = []
    for stage in stages:
        if isinstance(stage, list) and out:
            out.extend(stage)
        else:
            out.append(stage)
    return out


class DataPipeline:
    """A chain of stages: ``DataPipeline(source, stage, stage, ...)``.

    The source is a shard list, a list, any iterable or a callable; every other
    stage is a built-in stage or any callable taking an iterator and returning
    one.  ``seed`` fixes every random choice of the pipeline (shard order,
    shuffles); without it one is drawn when the pipeline is made.
    """

    def __init__(self, *stages: Any, seed: int | None = None) -> None:
        self.pipeline: list[Any] = _flatten(stages)
        self.seed = int(seed) if seed is not None else fresh_seed()
        self.repetitions = 1
        self.nsamples = -1
        self.size: int | None = None
        self.epoch = 0
        self.empty_check = False
        self._run: _Run | None = None
        self._pending: dict[str, Any] | None = None

    # ------------------------------------------------------------ building

    def append(self, stage: Any) -> DataPipeline:
        """Add a stage at the end, in place."""
        self.pipeline.append(stage)
        return self

    def compose(self, *stages: Any) -> DataPipeline:
        """A copy of this pipeline with ``stages`` added at the end."""
        result = copy.copy(self)
        result.pipeline = self.pipeline + list(stages)
        result._run = None
        return result

    def stage(self, index: int) -> Any:
        return self.pipeline[index]

    def with_length(self, n: int, silent: bool = False) -> DataPipeline:
        """Give the pipeline a ``len()`` (it does not change how many items an epoch has)."""
        if not isinstance(n, int) or n < 0:
            raise SpecError(f"with_length needs a non-negative integer, got {n!r}")
        self.size = n
        return self

    def with_epoch(self, nsamples: int = -1, nbatches: int = -1) -> DataPipeline:
        """Make each ``iter()`` yield exactly this many items, restarting the stages as needed.

        The count is per pipeline copy, that is per reader: with DataLoader or
        Loader workers each worker yields ``nsamples`` items (a rank yields
        ``nsamples * num_workers``), as in webdataset; give ``nsamples //
        num_workers`` for a per-rank count.  For equal finite epochs without
        resampling, use ``WebDataset(..., balanced="drop"|"pad")`` instead.
        """
        self.repetitions = sys.maxsize
        self.nsamples = max(nsamples, nbatches)
        return self

    def repeat(self, nepochs: int = -1, nbatches: int = -1) -> DataPipeline:
        """Run the stages ``nepochs`` times per ``iter()`` (forever when not positive)."""
        self.repetitions = nepochs if nepochs > 0 else sys.maxsize
        self.nsamples = nbatches
        return self

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` run epoch ``epoch`` (shard order and shuffles follow it)."""
        self.epoch = int(epoch)

    def empty_message(self) -> str:
        return "the pipeline produced no items in this epoch"

    def __len__(self) -> int:
        if self.size is None:
            raise TypeError(f"{type(self).__name__} has no length; set one with .with_length(n)")
        return self.size

    # ------------------------------------------------------------ running

    def __iter__(self) -> Iterator[Any]:
        run = _Run(self, self._pending)
        self._pending = None
        self._run = run
        return iter(run)

    def fingerprint(self) -> str:
        """A digest of the recipe's shape: the stages and the repetition settings."""
        text = "|".join(describe(stage) for stage in self.pipeline) + f"|{self.repetitions}|{self.nsamples}"
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def state_dict(self) -> dict[str, Any]:
        """The position of the active iteration (or of the next one, before any)."""
        if self._run is not None:
            return self._run.state_dict()
        if self._pending is not None:
            return self._pending
        return {
            "format": STATE_FORMAT,
            "fingerprint": self.fingerprint(),
            "seed": self.seed,
            "epoch": self.epoch,
            "rep": 0,
            "count": 0,
            "rep_count": 0,
            "chain": None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next ``iter()`` continue exactly where ``state`` was taken."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a wds pipeline state (expected format {STATE_FORMAT!r})")
        if state.get("fingerprint") != self.fingerprint():
            raise CheckpointError(
                "the checkpoint was taken from a different pipeline (its stages or epoch settings differ)"
            )
        self._pending = state
        self._run = None
        self.epoch = int(state["epoch"]) + 1

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_run"] = None
        return state


class _Run(StageIterator):
    """One ``iter()`` of a pipeline: its repetitions, its item limit and its state."""

    def __init__(self, pipeline: DataPipeline, state: dict[str, Any] | None) -> None:
        super().__init__(None)
        # Only a weak reference back: a pipeline that refers to its run would be freed by the cycle
        # collector alone, after weakref finalizers have already shut down the queues of resources
        # such as DataLoader workers (their shutdown then waits out timeouts).
        self.p = weakref.ref(pipeline)
        self.stages = list(pipeline.pipeline)
        self.limit = pipeline.nsamples if pipeline.nsamples > 0 else -1
        self.repetitions, self.empty_check = pipeline.repetitions, pipeline.empty_check
        self.fingerprint = pipeline.fingerprint()
        self.chain: Any = None
        self.chain_state: Any = None
        if state is None:
            self.seed, self.epoch = pipeline.seed, pipeline.epoch
            pipeline.epoch += 1
            self.rep = self.count = self.rep_count = 0
        else:
            self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
            self.rep, self.count, self.rep_count = int(state["rep"]), int(state["count"]), int(state["rep_count"])
            self.chain_state = state["chain"]

    def _build_chain(self) -> Any:
        ctx = RunContext(seed=self.seed, epoch=self.epoch)
        it = None
        for index, stage in enumerate(self.stages):
            it = _build(stage, it, ctx.for_stage(index))
        if self.chain_state is not None:
            load_state(it, self.chain_state)
            self.chain_state = None
        return it

    def _run(self) -> Iterator[Any]:
        limit, repetitions = self.limit, self.repetitions
        while self.rep < repetitions:
            self.chain = self._build_chain()
            items = iter(self.chain)
            if limit < 0 and not self.empty_check and repetitions == 1:
                yield from items
                return
            while limit < 0 or self.count < limit:
                try:
                    item = next(items)
                except StopIteration:
                    break
                self.count += 1
                self.rep_count += 1
                yield item
            else:
                return
            if self.rep_count == 0 or self.rep + 1 >= repetitions:
                break
            self.rep += 1
            self.rep_count = 0
            self.epoch += 1
            pipeline = self.p()
            if pipeline is not None:
                pipeline.epoch = max(pipeline.epoch, self.epoch + 1)
            self.chain = None
        if self.count == 0 and self.empty_check:
            pipeline = self.p()
            message = pipeline.empty_message() if pipeline is not None else "no samples in this epoch"
            raise EmptyDatasetError(message)

    def state_dict(self) -> dict[str, Any]:
        chain = self.chain_state
        if self.chain is not None:
            chain = state_of(self.chain)
        return {
            "format": STATE_FORMAT,
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "epoch": self.epoch,
            "rep": self.rep,
            "count": self.count,
            "rep_count": self.rep_count,
            "chain": chain,
        }
