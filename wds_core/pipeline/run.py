"""One run of a :class:`~wds_core.pipeline.datapipeline.DataPipeline`: its stages built, its repetitions and its state.

:mod:`wds_core.pipeline.datapipeline` holds the recipe (the stages and the settings, picklable); each ``iter()`` makes a
:class:`PipelineRun` here, which builds one iterator per stage (:func:`build_stage`), repeats them, counts
what it hands out and answers for the checkpoint envelope.  Also here: the stages a run knows how to build
that are not recipes (``ListSource`` for a list, webdataset's ``PipelineStage``).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterator
from typing import Any

from ..dist import worker_info
from ..errors import CheckpointError, EmptyDatasetError, SpecError
from ..sources.lists import ListSource
from ..state import (
    EPOCH_TRACKERS,
    Recipe,
    RunContext,
    StageIterator,
    close_chain,
    load_state,
    state_of,
)

__all__ = ["STATE_FORMAT", "ListSource", "PipelineRun", "PipelineStage", "build_stage", "closing_run", "epoch_position",
           "has_run"]  # fmt: skip

STATE_FORMAT = "wds.pipeline/1"


class PipelineStage:
    """webdataset's base class for stage objects: the pipeline calls ``stage.run(upstream)``.

    A subclass defines ``run(self, src)`` returning an iterator (a generator
    method will do); as the first stage of a pipeline, ``run()`` gets no
    argument.  Objects of other classes with a ``run`` method and no
    ``__call__`` are invoked the same way (webdataset's own ``PipelineStage``
    subclasses, for instance).  Such stages keep no checkpoint state.
    """

    def run(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define run(src), as webdataset's PipelineStage does")

    def invoke(self, *args: Any) -> Any:
        return self.run(*args)


def has_run(stage: Any) -> bool:
    """Whether ``stage`` is invoked by its ``run`` method (webdataset's ``PipelineStage`` protocol)."""
    return isinstance(stage, PipelineStage) or (callable(getattr(stage, "run", None)) and not callable(stage))


def build_stage(stage: Any, src: Any, ctx: RunContext) -> Any:
    """The iterator of one stage of a run over ``src`` (``None`` for the first stage)."""
    if isinstance(stage, Recipe):
        return stage.build(src, ctx)
    if src is None:
        if isinstance(stage, (list, tuple)):
            return ListSource(list(stage))
        if hasattr(stage, "__iter__"):  # pipelines, IterableDatasets, DataLoaders, any iterable
            return iter(stage) if not hasattr(stage, "state_dict") else stage
        if has_run(stage):
            return stage.run()
        if callable(stage):
            return stage()
        raise SpecError(f"the first stage must be iterable or callable, got {type(stage).__name__}")
    if has_run(stage):
        return stage.run(src)
    if not callable(stage):
        raise SpecError(
            "a pipeline stage must be callable (iterator -> iterator) or have a run(iterator) method "
            f"(webdataset's PipelineStage), got {type(stage).__name__}"
        )
    return stage(src)


def epoch_position(chain: Any) -> dict[str, Any] | None:
    """Where ``chain`` is in a balanced epoch, from the capability that tracks it (:data:`EPOCH_TRACKERS`)."""
    for tracker in EPOCH_TRACKERS:
        position = tracker.position(chain)
        if position is not None:
            return position
    return None


def closing_run(run: PipelineRun, items: Iterator[Any]) -> Iterator[Any]:
    """``items`` of ``run``, the run closed (its open shards with it) once they are done or dropped.

    The iterators of a run hold themselves (each its own generator, whose frame holds it), so a run dropped in
    the middle (a ``break``, a DataLoader worker starting its next epoch) is freed by the cycle collector alone,
    some epochs later, with what it holds: a remote reader's ranges in flight and buffered, up to its read-ahead
    budget (65 MB more a worker each epoch of a loop that stops early, until a collection).  This generator is
    held by its consumer only: dropped, it closes the run at once, and ``state_dict()`` still gives the position
    (``for sample in dataset: ... break`` then ``dataset.state_dict()``).
    """
    try:
        yield from items
    finally:
        run.close(keep_state=True)


def _warn_short_share(shared: int, held: int, share: int) -> None:
    worker, workers = worker_info()
    if workers < 2:  # the repeats are the epoch's only when one reader reads all the shards
        return
    warnings.warn(
        f"worker {worker} of {workers} read the {held} samples of its shards before its share ({share}) of the "
        f"epoch of with_epoch({shared}) shared by the workers: it reads them again, so the epoch repeats some "
        "samples while another worker may leave some of its own unread; balanced='pad' or 'drop' gives every "
        "worker an equal part of the samples",
        stacklevel=3,
    )


class PipelineRun(StageIterator):
    """One ``iter()`` of a pipeline: its repetitions, its item limit and its state."""

    passes_order = False  # a whole pipeline run, not a stage
    counts_items = False  # its items are its last stage's

    def __init__(
        self,
        pipeline: Any,
        state: dict[str, Any] | None,
        repetitions: int,
        limit: int,
        elastic: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(None)
        # Only a weak reference back: a pipeline that refers to its run would be freed by the cycle
        # collector alone, after weakref finalizers have already shut down the queues of resources
        # such as DataLoader workers (their shutdown then waits out timeouts).
        self.p = weakref.ref(pipeline)
        self.stages = list(pipeline.pipeline)
        self.limit = limit if limit > 0 else -1
        self.repetitions, self.empty_check = repetitions, pipeline.empty_check
        self.seed_given = getattr(pipeline, "seed_given", True)
        self.fingerprint = pipeline.fingerprint()
        self.chain: Any = None
        self.built: list[Any] = []  # the chain's iterators, one a stage, from the source
        self.names: list[str] = []  # the stages' names (stage_names), once asked for
        self.chain_state: Any = None
        self.position: Any = None  # of a restored run, until its chain is built
        self.elastic: dict[str, Any] | None = None
        self.balanced = any(isinstance(stage, Recipe) and stage.splits_epoch for stage in self.stages)
        self.shared = getattr(pipeline, "epoch_split", None)  # a shared epoch's n (DataPipeline.shared_epoch)
        if state is None:
            self.seed, self.epoch = pipeline.seed, pipeline.epoch
            pipeline.epoch += 1
            self.rep = self.count = self.rep_count = 0
            if elastic is not None and int(elastic["epoch"]) == self.epoch:
                self.elastic, self.seed, self.rep = elastic, int(elastic["seed"]), int(elastic["rep"])
        else:
            self.seed, self.epoch = int(state["seed"]), int(state["epoch"])
            self.rep, self.count, self.rep_count = int(state["rep"]), int(state["count"]), int(state["rep_count"])
            self.chain_state, self.position = state["chain"], state.get("position")
        if self.balanced and (state is not None or self.elastic is not None):
            self.empty_check = False  # the rest of a balanced epoch may be nothing for some readers

    def _build_chain(self) -> Any:
        ctx = RunContext(seed=self.seed, epoch=self.epoch, seed_given=self.seed_given)
        it = None
        self.built = []
        for index, stage in enumerate(self.stages):
            it = build_stage(stage, it, ctx.for_stage(index))
            self.built.append(it)
            if isinstance(stage, Recipe) and stage.per_reader:
                ctx = ctx.for_stage(index, per_reader=True)
        if self.chain_state is not None:
            load_state(it, self.chain_state)
            self.chain_state = None
        if self.elastic is not None:
            if not EPOCH_TRACKERS:
                raise CheckpointError("an elastic state resumes a balanced epoch: import wds_core.elastic")
            for tracker in EPOCH_TRACKERS:
                tracker.resume(it, self.elastic["elastic"])
            self.elastic = None
        return it

    def _run(self) -> Iterator[Any]:
        limit, repetitions = self.limit, self.repetitions
        while self.rep < repetitions:
            if self.chain is None:
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
            if self.shared and self.rep == 0:
                _warn_short_share(self.shared, self.rep_count, limit)
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

    def close(self, keep_state: bool = False) -> None:
        """Close the generators of this run, from the output down to the shard reader (which closes its shards);
        ``keep_state``: its iterators stay, for ``state_dict()`` (closed, a generator no longer holds its iterator,
        so nothing of the run is left to the cycle collector)."""
        close_chain(self)  # (a run has no upstream: this closes its own generator)
        close_chain(self.chain)
        if not keep_state:
            self.chain = None

    def state_dict(self) -> dict[str, Any]:
        if self.chain is None and self.balanced and self.rep < self.repetitions:
            # not started: build the stages now (nothing is read), so the state says which part is this reader's
            self.chain = self._build_chain()
        chain, position = self.chain_state, self.position
        if self.chain is not None:
            chain, position = state_of(self.chain), epoch_position(self.chain)
        state = {
            "format": STATE_FORMAT,
            "fingerprint": self.fingerprint,
            "seed": self.seed,
            "epoch": self.epoch,
            "rep": self.rep,
            "count": self.count,
            "rep_count": self.rep_count,
            "chain": chain,
        }
        if position is not None:
            state["position"] = position
        return state
