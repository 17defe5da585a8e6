"""``BatchIterator``: fixed-size numpy batches for JAX training loops, optionally placed on devices.

::

    import wds_jax
    dataset = wds_jax.WebDataset(urls, shuffle=True, seed=0).decode("rgb8").to_tuple("jpg", "cls")
    if __name__ == "__main__":  # spawned workers import the script: they must not start workers again
        batches = wds_jax.BatchIterator(dataset, batch_size=256, num_workers=2, sharding=sharding)
        for images, labels in batches:
            state = train_step(state, images, labels)
        checkpoint = batches.get_state()  # JSON; batches.set_state(checkpoint) resumes after the last batch

* Shards are split between JAX processes by ``jax.process_index()`` /
  ``jax.process_count()`` (and between the loader's workers within a process).
* The remainder of an epoch: ``remainder="drop"`` (default) drops it,
  ``"partial"`` yields a smaller last batch, ``"pad"`` fills the last batch
  with zeros and adds a boolean ``mask`` (an extra last element of tuple
  batches, a ``"mask"`` entry of dict batches; ``True`` marks real samples).
  With ``"pad"`` every batch carries the mask, so shapes never change.
  With ``num_workers``, batches are made in the workers (only whole batches
  cross processes), so each worker's last batch of the epoch is a remainder.
  The worker processes stay from one epoch to the next (as ``TFSource``'s:
  starting them again costs seconds an epoch) until ``close()``, the end of a
  ``with`` block, or the iterator's collection; ``persistent_workers=False``
  starts them anew each epoch.
* ``sharding`` (a ``jax.sharding.Sharding``): each numpy leaf becomes a global
  array with ``jax.make_array_from_process_local_data``; ``prefetch`` batches
  are placed ahead, so host-to-device copies overlap the training step.
* ``get_state()``/``set_state()``: the position after the last batch handed
  out (batches placed ahead are not counted as consumed).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import numpy as np

from wds_core import Loader, dist
from wds_core.elastic import is_merged
from wds_core.errors import CheckpointError, SpecError
from wds_core.stages.collate import default_collation_fn

__all__ = ["BatchIterator"]

STATE_FORMAT = "wds-jax-1"


def _process() -> tuple[int, int]:
    import jax

    return jax.process_index(), jax.process_count()


class BatchIterator:
    """Batches of ``batch_size`` samples from ``dataset`` (see the module doc)."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        *,
        remainder: str = "drop",
        num_workers: int = 0,
        persistent_workers: bool = True,
        sharding: Any = None,
        prefetch: int = 2,
        collate: Any = default_collation_fn,
        process_index: int | None = None,
        process_count: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise SpecError(f"batch_size must be >= 1, got {batch_size}")
        if remainder not in ("drop", "partial", "pad"):
            raise SpecError(f"remainder must be 'drop', 'partial' or 'pad', got {remainder!r}")
        if remainder == "partial" and sharding is not None:
            raise SpecError("remainder='partial' changes the batch shape, which a sharding cannot take; use 'pad'")
        self.dataset, self.batch_size, self.remainder = dataset, batch_size, remainder
        self.sharding, self.prefetch, self.collate = sharding, max(0, prefetch), collate
        if (process_index is None) != (process_count is None):
            raise SpecError("give both process_index and process_count, or neither")
        self.node: tuple[int, int] | None = None
        if process_index is not None and process_count is not None:
            self.node = (process_index, process_count)
        self.num_workers = num_workers
        self.source: Any = dataset
        # with workers, batches are made in the workers (only batches cross processes); each worker's
        # last batch of the epoch is then the remainder that is dropped, padded or yielded partial
        self.worker_batches = num_workers > 0 and hasattr(dataset, "batched")
        if num_workers > 0:
            rank, world = self.node or _process()
            if self.worker_batches:
                batch = getattr(dataset, "batched_epoch", dataset.batched)  # with_epoch(n) counts samples
                dataset = batch(batch_size, collation_fn=collate, partial=remainder != "drop")
            self.source = Loader(
                dataset, num_workers, rank=rank, world_size=world, persistent_workers=persistent_workers
            )
        self.epoch = 0
        self._rank: tuple[int, int] | None = None  # (process, processes) the pipeline is read as, in this process
        self._state: dict[str, Any] | None = None  # after the last batch handed out
        self._pending: dict[str, Any] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers == 0:
            self._rank = self.node or _process()
        pending, self._pending = self._pending, None
        if pending is not None:
            self.source.load_state_dict(pending["source"])
            self.epoch = int(pending["epoch"])
        elif hasattr(self.source, "set_epoch"):
            self.source.set_epoch(self.epoch)
        self._state = pending
        epoch, self.epoch = self.epoch, self.epoch + 1
        return self._batches(epoch)

    def _assembled(self, epoch: int) -> Iterator[tuple[Any, dict[str, Any] | None]]:
        """Collated host batches, each with the source state just after its last sample."""
        if self.worker_batches:
            for batch in self.source:
                real = _batch_length(batch)
                if real < self.batch_size and self.remainder == "pad":
                    batch = _pad_batch(batch, self.batch_size - real)
                if self.remainder == "pad":
                    batch = _with_mask(batch, real, self.batch_size)
                yield batch, self._source_state(epoch)
            return
        buffer: list[Any] = []
        # the pipeline is read here: as the process it says it is, asked while each sample is made (not told to
        # the whole process, where another reader may be another rank)
        for sample in dist.iterate_as_node(self.source, self._rank or (0, 1)):
            buffer.append(sample)
            if len(buffer) == self.batch_size:
                yield self._finish(buffer, self.batch_size), self._source_state(epoch)
                buffer = []
        if buffer and self.remainder != "drop":
            yield self._finish(buffer, len(buffer)), self._source_state(epoch)

    def _source_state(self, epoch: int) -> dict[str, Any] | None:
        try:
            if self._rank is None:
                return {"format": STATE_FORMAT, "epoch": epoch, "source": self.source.state_dict()}
            with dist.as_node(self._rank):  # a balanced part not started yet is planned by rank
                return {"format": STATE_FORMAT, "epoch": epoch, "source": self.source.state_dict()}
        except CheckpointError as exn:
            return {"error": str(exn)}

    def _finish(self, samples: list[Any], real: int) -> Any:
        if self.remainder != "pad":
            return self.collate(samples)
        padded = samples + [_zeros_like(samples[0])] * (self.batch_size - real)
        return _with_mask(self.collate(padded), real, self.batch_size)

    def _batches(self, epoch: int) -> Iterator[Any]:
        ahead: collections.deque = collections.deque()
        assembled = self._assembled(epoch)
        for host, state in assembled:
            ahead.append((self._place(host), state))
            if len(ahead) > self.prefetch:
                batch, self._state = ahead.popleft()
                yield batch
        while ahead:
            batch, self._state = ahead.popleft()
            yield batch

    def _place(self, batch: Any) -> Any:
        if self.sharding is None:
            return batch
        import jax

        def place(leaf: Any) -> Any:
            if isinstance(leaf, np.ndarray) and leaf.dtype != object:
                return jax.make_array_from_process_local_data(self.sharding, leaf)
            return leaf

        return jax.tree_util.tree_map(place, batch, is_leaf=lambda x: isinstance(x, list))

    def get_state(self) -> dict[str, Any]:
        """The position after the last batch handed out (JSON)."""
        if self._pending is not None:
            return self._pending
        if self._state is None:
            raise CheckpointError("no batch has been handed out yet in this epoch; nothing to checkpoint")
        if "error" in self._state:
            raise CheckpointError(self._state["error"])
        return self._state

    def set_state(self, state: dict[str, Any]) -> None:
        """Make the next ``iter()`` continue after the batch at which ``state`` was taken.

        ``state`` may also be :func:`wds_core.merge_states` of every host's
        states, to continue a balanced epoch on another number of hosts or workers.
        """
        if is_merged(state):
            state = {"format": STATE_FORMAT, "epoch": int(state["epoch"]), "source": state}
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a wds_jax state (expected format {STATE_FORMAT!r})")
        self._pending = state

    state_dict = get_state
    load_state_dict = set_state

    def close(self) -> None:
        """End the worker processes (they stay from one epoch to the next until this, or until the iterator is
        collected)."""
        close = getattr(self.source, "close", None)
        if self.num_workers > 0 and callable(close):
            close()

    def __enter__(self) -> BatchIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _with_mask(batch: Any, real: int, size: int) -> Any:
    mask = np.arange(size) < real
    if isinstance(batch, dict):
        return {**batch, "mask": mask}
    if isinstance(batch, tuple):
        return (*batch, mask)
    return (batch, mask)


def _batch_length(batch: Any) -> int:
    first = next(iter(batch.values())) if isinstance(batch, dict) else batch[0] if isinstance(batch, tuple) else batch
    return len(first)


def _pad_batch(batch: Any, missing: int) -> Any:
    """A collated batch with ``missing`` zero rows added to every column."""
    if isinstance(batch, dict):
        return {k: _pad_batch(v, missing) for k, v in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_pad_batch(v, missing) for v in batch)
    if isinstance(batch, np.ndarray):
        return np.concatenate([batch, np.zeros((missing, *batch.shape[1:]), batch.dtype)])
    if isinstance(batch, list):
        return batch + [_zeros_like(batch[0]) if batch else None] * missing
    return batch


def _zeros_like(sample: Any) -> Any:
    if isinstance(sample, dict):
        return {k: _zeros_like(v) for k, v in sample.items()}
    if isinstance(sample, tuple):
        return tuple(_zeros_like(v) for v in sample)
    if isinstance(sample, np.ndarray):
        return np.zeros_like(sample)
    if isinstance(sample, (bool, int, float, np.number)):
        return type(sample)(0)
    if isinstance(sample, str):
        return ""
    return None
