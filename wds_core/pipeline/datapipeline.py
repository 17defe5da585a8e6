"""``DataPipeline``: stages in a row, epochs, repetition, and the checkpoint envelope.

A pipeline is a recipe: a list of stages and a few settings, picklable and
reusable.  Each ``iter()`` starts a *run* with its own epoch number; the run
builds one iterator per stage and keeps the last one, whose nested state is the
state of the whole stream.  ``state_dict()`` wraps it in an envelope with the
seed, the epoch and a fingerprint of the recipe, so that a checkpoint cannot be
restored into a different pipeline by mistake.
"""

from __future__ import annotations

import collections
import copy
import hashlib
import itertools
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from ..dist import worker_info
from ..errors import CheckpointError, SpecError
from ..rng import fresh_seed
from ..stages.batching import Batch, batched_items, batches_of
from ..stages.collate import default_collation_fn
from ..state import RUN_HOOKS, Recipe, describe, stage_names
from .run import (
    STATE_FORMAT,
    ListSource,
    PipelineRun,
    PipelineStage,
    closing_run,
    epoch_position,
    has_run,
)

__all__ = ["DataPipeline", "ListSource", "PipelineStage"]


def _share(items: int, reader: int, readers: int) -> int:
    """Reader ``reader``'s part of ``items`` shared by ``readers``: the first ``items % readers`` one more."""
    return items // readers + (1 if reader < items % readers else 0)


def _reader_shards(stages: list[Any], readers: int) -> list[int] | None:
    """How many shards each of this rank's ``readers`` reads, when the pipeline reads a finite shard list that
    wds's ``split_by_worker`` splits (else ``None``: resampled, balanced, or a split it cannot count)."""
    from ..sources.shardlists import SimpleShardList, SingleNodeOnly, SplitByNode, SplitByWorker

    lists = [i for i, stage in enumerate(stages) if isinstance(stage, SimpleShardList)]
    if not lists or any(getattr(stage, "splits_epoch", False) for stage in stages):
        return None
    shards = len(stages[lists[0]].urls)
    per_reader = [shards] * readers
    if not any(isinstance(stage, SplitByWorker) for stage in stages):
        return None
    for stage in stages[lists[0] + 1 :]:
        if isinstance(stage, SingleNodeOnly):
            continue
        if isinstance(stage, SplitByNode):
            rank, world = stage.who()
            per_reader = [len(range(rank, n, world)) for n in per_reader]
        elif isinstance(stage, SplitByWorker):
            per_reader = [len(range(w, n, readers)) for w, n in enumerate(per_reader)]
    return per_reader


def _in_batches(items: Iterator[Any], recipe: Batch) -> Iterator[Any]:
    try:
        yield from batched_items(items, recipe)
    finally:
        closer = getattr(items, "close", None)
        if closer is not None:
            closer()


def _is_stage(obj: Any) -> bool:
    """Whether ``obj`` can only be a stage, not an item of data: a recipe, a callable, a stage or dataset object."""
    if isinstance(obj, (Recipe, DataPipeline)) or callable(obj) or has_run(obj):
        return True
    return any(cls.__name__ in ("IterableDataset", "DataLoader") for cls in type(obj).__mro__)


def _flatten(stages: tuple[Any, ...]) -> list[Any]:
    """A list given among the stages is a list of stages, as in webdataset (``DataPipeline([s1, s2, ...])``),
    except a first list whose items are data (not all stages): that is the source."""
    out: list[Any] = []
    for stage in stages:
        if isinstance(stage, list) and (out or (stage and all(_is_stage(x) for x in stage))):
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
        self.seed_given = seed is not None
        self.repetitions = 1
        self.nsamples = -1
        self.epoch_split: int | None = None  # see shared_epoch(): the items all the readers share
        self.epoch_batch: Batch | None = None  # see batched_epoch(): batches made of the epoch's items
        self.size: int | None = None
        self.epoch = 0
        self.empty_check = False
        self._run: PipelineRun | None = None
        self._pending: dict[str, Any] | None = None
        self._elastic: dict[str, Any] | None = None  # a merged state for epoch self._elastic["epoch"]

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

    @property
    def stats(self) -> collections.Counter[str]:
        """What the stages counted in this process, added up: the readers' remote ``retries``, ``recovered``
        and ``gave_up`` requests, and the counts of stages that keep some (``ImageTextPairs``, ``Interleaved``).
        """
        total: collections.Counter[str] = collections.Counter()
        for stage in self.pipeline:
            for part in [stage, *getattr(stage, "datasets", ())]:  # a mix's datasets are pipelines
                counted = getattr(part, "stats", None)
                if isinstance(counted, collections.Counter):
                    total.update(counted)
        return total

    def with_length(self, n: int, silent: bool = False) -> DataPipeline:
        """Give the pipeline a ``len()`` (it does not change how many items an epoch has: a warning says so,
        as in webdataset, unless ``silent``)."""
        if not isinstance(n, int) or n < 0:
            raise SpecError(f"with_length needs a non-negative integer, got {n!r}")
        if not silent:
            warnings.warn(
                "with_length() only sets what len() returns; the number of items of an epoch is unchanged "
                "(use with_epoch() for that; silent=True drops this warning)",
                stacklevel=2,
            )
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
        self.epoch_split = None
        self.epoch_batch = None
        return self

    def items_per_epoch(self) -> int | None:
        """The items each ``iter()`` yields when ``with_epoch(n)`` fixes them (``n``, per pipeline copy, that is
        per reader, or the batches :meth:`batched_epoch` makes of them; fewer only if a pass over the data yields
        nothing), else ``None``."""
        if self.repetitions == sys.maxsize and self.nsamples > 0:
            return self._batched_count(self.nsamples)
        return None

    def elements_per_epoch(self, readers: int) -> int | None:
        """What ``readers`` copies of this pipeline (a rank's workers) yield in all in an epoch that
        ``with_epoch(n)`` fixes: ``n`` from each, or ``n`` shared out (:meth:`shared_epoch`), in items or in the
        batches :meth:`batched_epoch` makes of each reader's items; else ``None``."""
        if self.items_per_epoch() is None:
            return None
        if getattr(self, "epoch_split", None) is None:
            return readers * self._batched_count(self.nsamples)
        return sum(self._batched_count(_share(self.nsamples, w, readers)) for w in range(readers))

    def _batched_count(self, items: int) -> int:
        batch = getattr(self, "epoch_batch", None)
        return items if batch is None else batches_of(items, batch.batchsize, batch.partial)

    def shared_epoch(self) -> DataPipeline:
        """A copy whose ``with_epoch(n)`` epoch is ``n`` items from all the readers of a rank together (each
        worker ``n // workers``, the first ``n % workers`` one more), not ``n`` from each: what an epoch means to
        ``tf.data`` users (``TFSource`` asks for it).  Without ``with_epoch``, the copy is the same pipeline.

        Each reader reads its own shards, again from their start when its share is more than they hold: a rank's
        epoch is each of its samples once only when every reader's shards hold its share.  Where ``split_by_worker``
        gives the readers unequal numbers of shards (not balanced, not resampled), :meth:`check_shared_epoch`
        refuses it; of several readers, one whose shards hold fewer samples than its share warns."""
        shared = self.compose()
        n = self.items_per_epoch()
        if n is not None:
            shared.epoch_split = self.nsamples
        return shared

    def check_shared_epoch(self, readers: int, who: str = "workers") -> None:
        """Refuse a ``with_epoch(n)`` epoch shared by ``readers`` (:meth:`shared_epoch`) that cannot hold each
        sample once: the pipeline reads a finite shard list that ``split_by_worker`` gives the readers in unequal
        numbers (:class:`SpecError`, naming the layout and the remedies)."""
        if readers < 2 or getattr(self, "epoch_split", None) is None:
            return
        counts = _reader_shards(self.pipeline, readers)
        if counts is None or len(set(counts)) == 1:
            return
        layout = f"the {readers} {who} read " + ", ".join(str(c) for c in counts) + f" of the {sum(counts)} shards"
        raise SpecError(
            f"with_epoch({self.epoch_split}) shared by {readers} {who}: {layout}, so each one's share of the epoch "
            "would repeat some samples while another leaves some unread; give a shard count the "
            f"{who} divide, balanced='pad' or 'drop' (equal parts of the samples), resampled=True (an endless "
            "stream), epoch='each' (n from each, as webdataset), or leave with_epoch out"
        )

    def epoch_limit(self) -> int:
        """The items this reader's run yields at most (``-1``: no limit) before any :meth:`batched_epoch`
        batching: ``nsamples``, or this worker's share of a shared epoch (:meth:`shared_epoch`)."""
        if getattr(self, "epoch_split", None) is None:  # a subclass may not run __init__ (webdataset's protocol)
            return self.nsamples
        worker, workers = worker_info()
        return _share(self.nsamples, worker, workers)

    def batched_epoch(self, batch_size: int, collation_fn: Any = default_collation_fn, partial: bool = True) -> Any:
        """``batched(...)`` for an adapter that batches what this pipeline yields (``TFSource(batch_size=)``,
        JAX's ``Loader`` with workers): a ``with_epoch(n)`` epoch stays ``n`` of this pipeline's items (each
        reader's share of them in a shared epoch), batched after the count, so ``ceil(n / batch_size)`` batches
        (``floor`` with ``partial=False``) however often the stages start again when the data ends."""
        n = self.items_per_epoch()
        if n is None:
            return self.compose(Batch(batch_size, collation_fn, partial))
        if batches_of(n, batch_size, partial) == 0:
            raise SpecError(f"with_epoch({n}) is less than one batch of {batch_size}, and partial batches are dropped")
        batched = self.compose()
        batched.epoch_batch = Batch(batch_size, collation_fn, partial)
        return batched

    def repeat(self, nepochs: int = -1, nbatches: int = -1) -> DataPipeline:
        """Run the stages ``nepochs`` times per ``iter()`` (forever when not positive)."""
        self.repetitions = nepochs if nepochs > 0 else sys.maxsize
        self.nsamples = nbatches
        self.epoch_split = None
        self.epoch_batch = None
        return self

    def fresh_copy(self, epoch: int) -> DataPipeline:
        """A copy of this recipe with no run and no state to restore, set to run epoch ``epoch`` (a mix's private
        copy of each of its datasets)."""
        result = copy.copy(self)
        result._run, result._pending = None, None
        result.set_epoch(epoch)
        return result

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

    def close(self) -> None:
        """End the active iteration now (its open shards are closed) and close the stages that can be closed.

        The pipeline stays usable: the next ``iter()`` starts a new epoch.
        """
        run, self._run = self._run, None
        if run is not None:
            run.close()
        for stage in self.pipeline:
            closer = getattr(stage, "close", None)
            if callable(closer) and not isinstance(stage, (Recipe, type)):
                closer()

    def __enter__(self) -> DataPipeline:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        """One epoch: the stages run ``repetitions`` times, and when they repeat, ``nsamples`` items at most (as in
        webdataset: ``repeat(1, n)`` does not cut the epoch).  A subclass that defines its own ``iterator()`` or
        ``iterator1()`` (webdataset's protocol) is iterated through it."""
        if type(self).iterator is not DataPipeline.iterator or type(self).iterator1 is not DataPipeline.iterator1:
            items = self.iterator()
            if self.repetitions != 1 and self.nsamples > 0:
                return self._epoch_batches(itertools.islice(items, self.epoch_limit()))
            return items
        limit = self.epoch_limit() if self.repetitions != 1 else -1
        if limit == 0:  # this worker's share of a shared epoch is nothing (fewer items than workers)
            return iter(())
        return self._epoch_batches(self._iterate(self.repetitions, limit))

    def _epoch_batches(self, items: Iterator[Any]) -> Iterator[Any]:
        """``items`` in the batches of :meth:`batched_epoch`, made after the epoch's count (between two batches
        the run holds no item back, so its state is the stream's)."""
        batch = getattr(self, "epoch_batch", None)
        if batch is None:
            return items
        return _in_batches(items, batch)

    def iterator1(self) -> Iterator[Any]:
        """webdataset's one pass through the stages: the next epoch, without repetitions or an item limit."""
        return self._iterate(1, -1)

    def iterator(self) -> Iterator[Any]:
        """webdataset's pass through every repetition (``repeat()``, ``with_epoch()``) without the item limit:
        subclasses that override ``__iter__`` slice it with ``nsamples`` themselves.  An empty pass ends it."""
        if type(self).iterator1 is not DataPipeline.iterator1:  # a subclass's own epochs
            return self._own_epochs()
        return self._iterate(self.repetitions, -1)

    def _own_epochs(self) -> Iterator[Any]:
        for _ in range(self.repetitions):
            count = 0
            for item in self.iterator1():
                count += 1
                yield item
            if count == 0:
                return

    def _iterate(self, repetitions: int, limit: int) -> Iterator[Any]:
        run = PipelineRun(self, self._pending, repetitions, limit, self._elastic)
        self._pending = None
        self._run = run
        items = iter(run)
        for hook in RUN_HOOKS:
            items = hook(self, items)
        return closing_run(run, items)

    def running_stages(self) -> list[tuple[str, Any]]:
        """``(name, iterator)`` of each stage of the run being iterated, from the source to the output (empty
        before the first ``iter()``): what :class:`~wds_core.observe.profiling.Profile` looks at.  Names are the stages'
        (``decode``, ``map(crop)``), numbered when one occurs twice."""
        run = self._run
        if run is None or not run.built:
            return []
        if len(run.names) != len(run.stages):
            run.names = stage_names(run.stages)
        return list(zip(run.names, run.built))

    def fingerprint(self) -> str:
        """A digest of the recipe's shape: the stages and the repetition settings."""
        text = (
            "|".join(describe(stage) for stage in self.pipeline)
            + f"|{self.repetitions}|{self.nsamples}"
            + (f"|shared ({self.epoch_split}, 1, True)" if getattr(self, "epoch_split", None) else "")
            + (f"|batched {describe(self.epoch_batch)}" if getattr(self, "epoch_batch", None) else "")
        )
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def state_dict(self) -> dict[str, Any]:
        """The position of the active iteration (or of the next one, before any)."""
        if self._run is not None:
            return self._run.state_dict()
        if self._pending is not None:
            return self._pending
        if self._elastic is not None and self._elastic["epoch"] == self.epoch:
            return self._elastic
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

    def position(self) -> dict[str, Any] | None:
        """Where the active iteration is in a balanced epoch (the ``"position"`` of its state), else ``None``."""
        run = self._run
        if run is None or run.chain is None:
            return None
        return epoch_position(run.chain)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Make the next ``iter()`` continue exactly where ``state`` was taken."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a wds pipeline state (expected format {STATE_FORMAT!r})")
        if state.get("fingerprint") != self.fingerprint():
            raise CheckpointError(
                "the checkpoint was taken from a different pipeline (its stages or epoch settings differ)"
            )
        self._run = None
        if "elastic" in state:
            # a merged state (wds_core.merge_states): every copy of this pipeline, whatever its rank and
            # worker, re-splits what is left of that epoch when it runs it
            if self.nsamples > 0:
                raise CheckpointError("elastic resume does not combine with with_epoch()/repeat(nbatches=)")
            self._elastic, self._pending = state, None
            self.epoch = int(state["epoch"])
            return
        self._pending, self._elastic = state, None
        self.epoch = int(state["epoch"]) + 1

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_run"] = None
        return state
