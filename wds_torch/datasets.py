"""The core's pipelines as ``torch.utils.data.IterableDataset``s, and ``WebLoader``.

``WebDataset`` and ``DataPipeline`` here are the core classes with
``IterableDataset`` mixed in: everything else (shard splitting by rank and
DataLoader worker, which the core learns from ``torch.distributed`` and
``get_worker_info()``; ``state_dict``/``load_state_dict``, which torchdata's
``StatefulDataLoader`` calls in each worker) is the core's.

``WebLoader`` is a ``DataLoader`` with the fluid methods, for the seeds'
"batch in the dataset, rebatch after the loader" pattern::

    loader = wds.WebLoader(dataset, num_workers=4, batch_size=None)
    loader = loader.unbatched().shuffle(1000).batched(12)

Each ``iter()`` of a ``WebLoader`` first calls ``set_epoch`` on its dataset
(when it has one), so workers that are started anew each epoch still see a new
shard order and shuffle every epoch; with a plain ``DataLoader`` and
non-persistent workers, call ``dataset.set_epoch(epoch)`` yourself, as with a
``DistributedSampler``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch.utils.data
from torch.utils.data.dataloader import _BaseDataLoaderIter

import wds_core
from wds_core.elastic import is_merged
from wds_core.errors import CheckpointError, SpecError
from wds_core.stages.batching import batch_stage_of
from wds_core.state import load_state

from . import transfer

__all__ = [
    "DataPipeline",
    "DirectoryShardList",
    "EpochLoader",
    "FluidWrapper",
    "MockDataset",
    "MultiShardSample",
    "RandomMix",
    "ResampledShards",
    "RoundRobin",
    "SimpleShardList",
    "WebDataset",
    "WebLoader",
]


def stop_workers(source: Any) -> None:
    """What ends a pipeline run's DataLoader source (plugged in by ``wds_torch``: :func:`wds_core.state.plug_in`):
    the workers of the iterator the run read, unless they are persistent.

    Left to the cycle collector (a run's iterators hold themselves), the iterator was collected wherever a
    collection came first, often in a worker forked for the next epoch, which holds a copy of it: its
    ``__del__`` there tried to stop workers that were not that process's children and printed ``Exception
    ignored in ... _MultiProcessingDataLoaderIter.__del__ ... AssertionError: can only test a child process``.
    Stopped here, in the process that started them, every copy of it has nothing left to stop."""
    if isinstance(source, torch.utils.data.DataLoader):  # torchdata's keeps its iterator; torch's, when persistent
        source = None if source.persistent_workers else getattr(source, "_iterator", None)
    shutdown = getattr(source, "_shutdown_workers", None)  # torch's and torchdata's iterators with workers
    if isinstance(source, _BaseDataLoaderIter) and callable(shutdown) and not source._persistent_workers:
        shutdown()


UNAVAILABLE = "wds_state_unavailable"  # a worker's pipeline state that could not be taken: why


def _raise_unavailable(state: Any) -> None:
    """Raise the reason a worker gave in place of its pipeline's state, found anywhere in a loader's state."""
    if isinstance(state, dict):
        if UNAVAILABLE in state:
            raise CheckpointError(f"a DataLoader worker's pipeline cannot be checkpointed: {state[UNAVAILABLE]}")
        for value in state.values():
            _raise_unavailable(value)
    elif isinstance(state, (list, tuple)):
        for value in state:
            _raise_unavailable(value)


class _RankTravels:
    """Pickling carries the rank: DataLoader workers started with ``spawn`` have no process group of their own.

    Inside a DataLoader worker, large batches leave through reused shared memory (:mod:`wds_torch.transfer`).
    """

    def __iter__(self) -> Any:
        items = super().__iter__()  # type: ignore[misc]
        if torch.utils.data.get_worker_info() is None:
            return items
        return transfer.wrap_batches(items)

    def state_dict(self) -> dict[str, Any]:
        """The pipeline's state; in a DataLoader worker, a pipeline that cannot be checkpointed (a plain generator
        among its stages) gives why instead of raising: ``StatefulDataLoader`` (under :class:`WebLoader`) asks
        every worker for its state at every step, and the error is raised only if someone asks for a checkpoint."""
        try:
            return super().state_dict()  # type: ignore[misc,no-any-return]
        except CheckpointError as exn:
            if torch.utils.data.get_worker_info() is None:
                raise
            return {UNAVAILABLE: str(exn)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(state, dict) and UNAVAILABLE in state:
            raise CheckpointError(state[UNAVAILABLE])
        super().load_state_dict(state)  # type: ignore[misc]

    def __getstate__(self) -> dict[str, Any]:
        state: Any = super().__getstate__()  # type: ignore[misc]
        state["_node_when_pickled"] = wds_core.dist.node_info()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        node = state.pop("_node_when_pickled", None)
        self.__dict__.update(state)
        if node is not None and tuple(node) != (0, 1):
            wds_core.dist.set_node_info_provider(lambda: None if _group_here() else tuple(node))


def _group_here() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized()


class DataPipeline(_RankTravels, wds_core.DataPipeline, torch.utils.data.IterableDataset):
    """:class:`wds_core.DataPipeline` as a PyTorch ``IterableDataset``."""


class WebDataset(_RankTravels, wds_core.WebDataset, torch.utils.data.IterableDataset):
    """:class:`wds_core.WebDataset` as a PyTorch ``IterableDataset``; it takes webdataset's keywords too, without a
    warning (``import wds_torch as wds`` instead of ``import webdataset as wds``), as well as the native options."""

    takes_webdataset_keywords = True


class RandomMix(_RankTravels, wds_core.RandomMix, torch.utils.data.IterableDataset):
    """:class:`wds_core.RandomMix` as a PyTorch ``IterableDataset``."""


class RoundRobin(_RankTravels, wds_core.RoundRobin, torch.utils.data.IterableDataset):
    """:class:`wds_core.RoundRobin` as a PyTorch ``IterableDataset``."""


class FluidWrapper(_RankTravels, wds_core.FluidWrapper, torch.utils.data.IterableDataset):
    """:class:`wds_core.FluidWrapper` as a PyTorch ``IterableDataset``."""


class MockDataset(_RankTravels, wds_core.MockDataset, torch.utils.data.IterableDataset):
    """:class:`wds_core.MockDataset` as a PyTorch ``IterableDataset``."""


# Shard lists are IterableDatasets in webdataset, and some code hands them to a DataLoader or checks the type.
class SimpleShardList(wds_core.SimpleShardList, torch.utils.data.IterableDataset):
    """:class:`wds_core.SimpleShardList` as a PyTorch ``IterableDataset``."""


class ResampledShards(wds_core.ResampledShards, torch.utils.data.IterableDataset):
    """:class:`wds_core.ResampledShards` as a PyTorch ``IterableDataset``."""


class MultiShardSample(wds_core.MultiShardSample, torch.utils.data.IterableDataset):
    """:class:`wds_core.MultiShardSample` as a PyTorch ``IterableDataset``."""


class DirectoryShardList(wds_core.DirectoryShardList, torch.utils.data.IterableDataset):
    """:class:`wds_core.DirectoryShardList` as a PyTorch ``IterableDataset``."""


try:  # the DataLoader that keeps its workers' positions (torchdata, in the torch extra)
    from torchdata.stateful_dataloader import StatefulDataLoader as _Stateful
except ImportError:  # pragma: no cover - torchdata is in the torch extra
    _Stateful = None


class EpochLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` that tells its dataset the epoch before each ``iter()`` (unless ``sets_epoch`` is false:
    a plain ``DataLoader`` then)."""

    sets_epoch = True

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._epochs_started = 0
        self.epoch_to_tell: int | None = None  # set by a WebLoader: the epoch of the run about to iterate this

    def __iter__(self) -> Any:
        told, self.epoch_to_tell = self.epoch_to_tell, None
        set_epoch = getattr(self.dataset, "set_epoch", None) if self.sets_epoch else None
        if callable(set_epoch) and not (self.persistent_workers and self._iterator is not None):
            if told is not None:
                start = told
            else:
                start = getattr(self.dataset, "epoch", 0) if self._epochs_started == 0 else self._epochs_started
            set_epoch(start)
            self._epochs_started = start + 1
        return super().__iter__()


if _Stateful is not None:

    class StatefulEpochLoader(EpochLoader, _Stateful):
        """:class:`EpochLoader` on torchdata's ``StatefulDataLoader``: ``state_dict()`` is the position of every
        worker's pipeline and of the loader, and the epoch it will tell the dataset next; ``load_state_dict()``
        before ``iter()`` continues there.  What :class:`WebLoader` uses."""

        def __init__(self, *args: Any, **kw: Any) -> None:
            with warnings.catch_warnings():  # torchdata 0.11 calls torch.set_vital, deprecated in torch 2.13:
                warnings.filterwarnings("ignore", "'set_vital' is deprecated", UserWarning)  # nothing to act on
                super().__init__(*args, **kw)
            self._finished = False  # restored at the end of an epoch: the next iter() is its (empty) rest
            self._at_end = False  # ... and until the iter() after that, the state says so again

        def __iter__(self) -> Any:
            if self._finished:  # as a pipeline restored at the end of an epoch: nothing more of it
                self._finished = False
                self.epoch_to_tell = None
                return iter(())
            self._at_end = False
            return super().__iter__()

        def state_dict(self) -> dict[str, Any]:
            if self.epoch_to_tell is not None:  # a run that has not iterated the loader yet: the epoch's start
                loader: dict[str, Any] = {}  # (not the last epoch's finished iterator)
            elif self._at_end:
                loader = {"_iterator_finished": True}
            else:
                loader = super().state_dict()
                _raise_unavailable(loader)
            return {"loader": loader, "epochs_started": self._epochs_started}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            if is_merged(state):  # every worker re-splits what is left of that epoch
                load_state(self.dataset, state)
                self._epochs_started = int(state["epoch"])
                self._finished = self._at_end = False
                super().load_state_dict({})
                return
            if not isinstance(state, dict) or "loader" not in state:
                raise CheckpointError("not a WebLoader's loader state (expected the 'loader' entry)")
            _check_workers(state["loader"], self.num_workers)
            self._epochs_started = int(state["epochs_started"])
            self._finished = self._at_end = bool(state["loader"].get("_iterator_finished"))
            super().load_state_dict({} if self._finished else state["loader"])


def _check_workers(loader: dict[str, Any], num_workers: int) -> None:
    """A loader state taken with another number of workers cannot be restored (each worker's position is its own
    part of the stream): say so, and how to resume, instead of torchdata's bare ``AssertionError``."""
    snapshot = loader.get("_snapshot")
    if snapshot is None:
        taken = None if not loader or loader.get("_iterator_finished") else 0  # a single-process state
    else:
        taken = int(snapshot.get("_main_snapshot", {}).get("_num_workers", 0))
    if taken is None or taken == num_workers:
        return
    raise CheckpointError(
        f"this checkpoint was taken by a loader with {taken} workers, and this one has {num_workers}: each worker "
        f"reads its own part of the stream, which cannot be split or joined; resume with num_workers={taken}, or "
        "read a balanced epoch (WebDataset.balanced(urls, 'pad'), WebLoader(..., snapshot_every_n_steps=1)) and "
        "load wds_torch.merge_states(states) of every rank, which any number of ranks and workers resumes"
    )


class WebLoader(wds_core.DataPipeline, wds_core.FluidInterface):
    """``WebLoader(dataset, **dataloader_args)``: a ``DataLoader`` whose output can be rebatched, shuffled...

    The loader is the pipeline's source; the fluid methods add stages that run
    in the main process on what the workers deliver.  ``state_dict()`` is the
    position of all of it, workers included (the loader is torchdata's
    ``StatefulDataLoader``), and ``load_state_dict()`` before ``iter()``
    continues there, rebatching after the loader included.  Before each epoch it tells
    the dataset the epoch (``set_epoch``), so that workers started anew each
    epoch shuffle anew; webdataset's ``WebLoader`` (:class:`CompatWebLoader`,
    what the drop-in gives) does not.
    """

    sets_epoch = True
    knows_batches = True  # a dataset that batches gets batch_size=None; webdataset's WebLoader leaves it at 1

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None | str = "auto",
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        **options: Any,
    ) -> None:
        """``dataset`` and ``DataLoader``'s arguments; ``options`` are the rest of ``DataLoader``'s (``in_order``,
        ``pin_memory_device``) and torchdata's (``snapshot_every_n_steps``: 16 here).

        ``batch_size="auto"`` is ``None`` when the dataset hands out batches (``.batched(n)``: the loader passes
        them on) and ``DataLoader``'s 1 otherwise; a number over a dataset that batches is refused (it would batch
        the batches): rebatch with ``.unbatched().shuffle(n).batched(m)`` on the loader instead.
        """
        batch_size = (
            _batch_size(dataset, batch_size) if self.knows_batches else (1 if batch_size == "auto" else batch_size)
        )
        arguments = dict(
            batch_size=batch_size, shuffle=shuffle, sampler=sampler, batch_sampler=batch_sampler,
            num_workers=num_workers, collate_fn=collate_fn, pin_memory=pin_memory, drop_last=drop_last,
            timeout=timeout, worker_init_fn=worker_init_fn, multiprocessing_context=multiprocessing_context,
            generator=generator, prefetch_factor=prefetch_factor, persistent_workers=persistent_workers, **options,
        )  # fmt: skip
        if _Stateful is not None:
            # its workers' states every 16 steps, not every step (a resumed run reads up to 15 batches a worker
            # again): 64-sample batches of bytes from 2 workers, 35,766 samples/s against 32,481 every step and
            # 40,044 on a plain DataLoader (python benchmarks/bench_adapters.py --rows webloader --repeats 3)
            arguments.setdefault("snapshot_every_n_steps", 16)
            self.loader: Any = StatefulEpochLoader(dataset, **arguments)
        else:
            self.loader = EpochLoader(dataset, **arguments)
        self.loader.sets_epoch = self.sets_epoch
        super().__init__(self.loader)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` was taken; a merged state (:func:`wds_torch.merge_states` of a balanced epoch)
        continues that epoch on this loader's workers, whatever their number."""
        if is_merged(state):
            self.loader.load_state_dict(state)
            self._run, self._pending, self.epoch = None, None, int(state["epoch"])
            return
        super().load_state_dict(state)
        chain = state.get("chain")
        while isinstance(chain, dict) and "loader" not in chain:  # through the stages after the loader
            chain = chain.get("parent")
        if isinstance(chain, dict) and isinstance(chain["loader"], dict):
            _check_workers(chain["loader"], self.loader.num_workers)  # now, not when the workers start

    def __iter__(self) -> Any:
        items = super().__iter__()
        run = self._run
        if run is not None:
            # the dataset runs the epoch of this run, restored or not; a first epoch is the dataset's own (the
            # code may have called its set_epoch), and the run's count follows it
            first = run.epoch == 0 and self.loader._epochs_started == 0 and run.chain_state is None
            if self.sets_epoch and first:
                run.epoch = int(getattr(self.loader.dataset, "epoch", 0) or 0)
                self.epoch = max(self.epoch, run.epoch + 1)
            self.loader.epoch_to_tell = run.epoch  # also says the loader is not iterated yet in this run
        return items

    def __len__(self) -> int:
        if self.size is None:
            return len(self.loader)
        return self.size

    def to_device(self, device: Any = None, **options: Any) -> Any:
        """This loader's batches on ``device`` (:func:`wds_torch.to_device`): crops planned with
        ``crop_images(..., device="cuda")`` decoded and cut there, tensors and numeric arrays moved, the next
        batches prepared while the model runs; its ``state_dict()`` is this loader's after the last batch given
        out."""
        from .device import to_device

        return to_device(self, device, **options)

    def close(self) -> None:
        """Stop the DataLoader's workers now (persistent ones otherwise live as long as the loader)."""
        iterator = getattr(self.loader, "_iterator", None)
        self.loader._iterator = None
        shutdown = getattr(iterator, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()


def _batch_size(dataset: Any, asked: int | None | str) -> int | None:
    """The loader's ``batch_size`` for ``dataset``: ``None`` for one that batches, unless a number is asked, which is
    refused then; else what is asked (``"auto"``: 1, as ``DataLoader``)."""
    batching = batch_stage_of(dataset)
    if batching is None:
        return 1 if asked == "auto" else asked  # type: ignore[return-value]
    if asked in ("auto", None):
        return None
    raise SpecError(
        f"WebLoader(batch_size={asked!r}) over a dataset that already hands out batches (of {batching.batchsize}): "
        "the loader would batch the batches (tensors of shape (batch_size, "
        f"{batching.batchsize}, ...), or torch's 'Trying to resize storage' error); leave batch_size out (None), and "
        f"for batches of another size rebatch on the loader: WebLoader(...).unbatched().shuffle(1000).batched({asked})"
    )
