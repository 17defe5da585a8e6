"""A ``tf.data.Dataset`` from a wds pipeline.

::

    import wds_tf
    pipeline = wds_tf.WebDataset(urls, shuffle=True, seed=0).decode("rgb").to_tuple("jpg", "cls")
    source = wds_tf.TFSource(pipeline, batch_size=64, num_workers=2)
    model.fit(source.dataset().prefetch(2), epochs=10)

* The output signature is inferred from the first sample unless given, and every later sample is checked against
  it (a field whose shape changes, or a ragged list, is an error naming the field).
* ``batch_size`` makes batches where the samples are (in the workers): the fast way in, since tf.data's generator
  bridge costs the training process's CPU per element (docs/benchmarks-history.md).  Fields whose shape varies:
  leave it out and use ``dataset().padded_batch()``.
* ``num_workers`` runs the pipeline in processes (:class:`wds_core.Loader`), kept from one epoch to the next unless
  ``persistent_workers=False``; ``num_parallel_calls`` interleaves copies of it in tf.data's threads instead.
* ``state_dict()``/``load_state_dict()`` give the position after the last element handed to TensorFlow, whose
  own prefetching runs ahead: save it next to ``tf.train.Checkpoint`` (exact without ``prefetch``).
* Cardinality, which Keras needs: ``with_epoch(n)`` gives ``n`` samples an epoch in all, each copy its share
  (``epoch="each"``: ``n`` from each copy, as webdataset); ``with_length(n)`` says there are ``n``.  Otherwise,
  or for the rest of an epoch after ``load_state_dict()``, give ``model.fit(..., steps_per_epoch=...)``.
* ``autotune=False`` (the default) turns tf.data's autotuning model off for the pipeline built on the dataset:
  it waits out its thread's sleep whenever an iterator is dropped, at the end of every epoch, and injects a
  prefetch that makes ``state_dict()`` run ahead.  ``autotune=True`` brings it back.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from wds_core import Loader, dist
from wds_core.elastic import is_merged
from wds_core.errors import CheckpointError, SampleError, SpecError
from wds_core.io.forklocks import ForkSafeLock
from wds_core.loader.shm import without_views
from wds_core.stages.batching import batches_of

from .signature import SampleFormat

__all__ = ["TFSource", "infer_signature", "sample_format", "to_tf_dataset"]

STATE_FORMAT = "wds-tf-1"
_local = threading.local()


def _thread_worker() -> tuple[int, int] | None:
    return getattr(_local, "worker", None)


dist.set_worker_info_provider(_thread_worker)


def _leaf_spec(value: Any, where: str) -> tf.TensorSpec:
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise SampleError(f"field {where} is an object array, which cannot be a tensor")
        return tf.TensorSpec(value.shape, tf.as_dtype(value.dtype))
    if isinstance(value, np.generic):
        return tf.TensorSpec((), tf.as_dtype(value.dtype))
    if isinstance(value, (bytes, str, memoryview)):  # a view (zero_copy reading) is handed over as its bytes
        return tf.TensorSpec((), tf.string)
    if isinstance(value, bool):
        return tf.TensorSpec((), tf.bool)
    if isinstance(value, int):
        return tf.TensorSpec((), tf.int64)
    if isinstance(value, float):
        return tf.TensorSpec((), tf.float32)
    if isinstance(value, (list, tuple)):
        raise SampleError(
            f"field {where} is a {type(value).__name__} (ragged); make it an array in .map() or give output_signature"
        )
    raise SampleError(f"field {where} holds a {type(value).__name__}, which cannot be a tensor")


def infer_signature(sample: Any) -> Any:
    """The ``output_signature`` of elements shaped like ``sample`` (a tuple, a dict or one value)."""
    if isinstance(sample, tuple):
        return tuple(_leaf_spec(v, f"#{i}") for i, v in enumerate(sample))
    if isinstance(sample, dict):
        return {k: _leaf_spec(v, repr(k)) for k, v in sample.items()}
    return _leaf_spec(sample, "#0")


def sample_format(signature: Any) -> SampleFormat:
    """The TensorFlow-free description of ``signature`` that workers check and batch samples by."""

    def field(key: Any, spec: Any) -> tuple[Any, tuple[int | None, ...] | None, str | None]:
        if not isinstance(spec, tf.TensorSpec):
            return key, None, "object"  # nested or ragged: handed to TensorFlow as it is
        shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else None
        return key, shape, None if spec.dtype == tf.string else np.dtype(spec.dtype.as_numpy_dtype).str

    if isinstance(signature, tuple):
        return SampleFormat("tuple", [field(i, spec) for i, spec in enumerate(signature)])
    if isinstance(signature, dict):
        return SampleFormat("dict", [field(k, spec) for k, spec in signature.items()])
    return SampleFormat("single", [field(0, signature)])


class TFSource:
    """A wds pipeline as a source of ``tf.data.Dataset``s (see the module doc)."""

    def __init__(
        self,
        pipeline: Any,
        output_signature: Any = None,
        *,
        batch_size: int | None = None,
        drop_remainder: bool = False,
        num_workers: int = 0,
        num_parallel_calls: int | None = None,
        persistent_workers: bool = True,
        autotune: bool = False,
        epoch: str = "all",
    ) -> None:
        if num_workers and num_parallel_calls:
            raise ValueError("use num_workers (processes) or num_parallel_calls (threads), not both")
        if epoch not in ("all", "each"):
            raise SpecError(f"epoch is 'all' (with_epoch(n): n in all) or 'each' (n from each copy), got {epoch!r}")
        self.epoch = epoch
        self.pipeline = pipeline
        self.num_parallel_calls = num_parallel_calls
        self.autotune = autotune
        self.signature = output_signature if output_signature is not None else self._infer()
        self.format = sample_format(self.signature)
        self.batch_size = batch_size
        self.element_signature = self.signature
        # with_epoch(n): n samples from all the copies together, as tf.data users count an epoch ('each': n from
        # each copy, as webdataset does)
        self._source_pipeline = (
            pipeline.shared_epoch() if epoch == "all" and hasattr(pipeline, "shared_epoch") else pipeline
        )
        if batch_size is not None:
            if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
                raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
            if not self.format.fixed():
                raise SpecError(
                    "batch_size stacks samples, which needs every field to have one shape; for fields that vary "
                    "leave batch_size out and use dataset().padded_batch() or .ragged_batch()"
                )
            if not hasattr(pipeline, "batched"):
                raise SpecError("batch_size needs a wds pipeline (it batches with .batched()); batch it yourself")
            self._source_pipeline = self._source_pipeline.map(self.format.check).batched_epoch(
                batch_size, collation_fn=self.format.collate, partial=not drop_remainder
            )
            rows = batch_size if drop_remainder else None
            self.element_signature = tf.nest.map_structure(
                lambda spec: tf.TensorSpec((rows, *spec.shape), spec.dtype), self.signature
            )
        self.drop_remainder = drop_remainder
        self.copies = num_workers or num_parallel_calls or 1
        if epoch == "all" and hasattr(self._source_pipeline, "check_shared_epoch"):
            self._source_pipeline.check_shared_epoch(self.copies, "workers" if num_workers else "parallel calls")
        self.cardinality = self._cardinality(pipeline)
        self.loader = None
        if num_workers:
            self.loader = Loader(self._source_pipeline, num_workers, persistent_workers=persistent_workers)
        self._pending: Any = None
        self._worker_epochs: dict[int, int] = {}
        self._lock = ForkSafeLock()

    def _cardinality(self, pipeline: Any) -> int | None:
        """The elements of each pass when the pipeline fixes them, else ``None`` (see the module doc)."""
        # with_epoch(n): n samples in all, or from each copy ('each'), in the batches batched_epoch makes of each's
        per_epoch = getattr(self._source_pipeline, "elements_per_epoch", lambda copies: None)(self.copies)
        if per_epoch is not None:
            return int(per_epoch)
        length = getattr(pipeline, "size", None)  # with_length(n): n samples in all
        if length is None:
            return None
        if not self.batch_size:
            return int(length)
        if self.copies > 1:  # each copy's last batch is its own
            return None
        return batches_of(length, self.batch_size, not self.drop_remainder)

    @property
    def _source(self) -> Any:
        """What the elements come from: the workers' Loader, or the (batched) pipeline itself."""
        return self.loader if self.loader is not None else self._source_pipeline

    def _handed(self, element: Any) -> Any:
        return element if self.batch_size is not None else self.format.check(element)

    def _infer(self) -> Any:
        probe = copy.deepcopy(self.pipeline)  # leaves the pipeline's own epoch and state alone
        for sample in probe:
            return infer_signature(sample)
        raise SampleError("the pipeline yielded nothing, so no output signature can be inferred; give one")

    def dataset(self) -> tf.data.Dataset:
        """A fresh ``tf.data.Dataset``; each pass over it is one epoch of the pipeline (tf.data's autotuning
        model off unless ``autotune=True``; its cardinality when the pipeline fixes it: see the module doc)."""
        expected = self.cardinality if self._pending is None else None  # a resumed first pass is the rest
        dataset = self._bridged(expected)
        if expected is not None:
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(expected))
        if self.autotune:
            return dataset
        options = tf.data.Options()
        options.autotune.enabled = False
        return dataset.with_options(options)

    def _bridged(self, expected: int | None) -> tf.data.Dataset:
        if not self.num_parallel_calls:
            return tf.data.Dataset.from_generator(
                lambda: self._elements(expected), output_signature=self.element_signature
            )
        n = self.num_parallel_calls
        return tf.data.Dataset.range(n).interleave(
            lambda w: tf.data.Dataset.from_generator(
                self._worker_elements, args=(w,), output_signature=self.element_signature
            ),
            cycle_length=n,
            block_length=1,
            num_parallel_calls=n,
            deterministic=True,
        )

    def _elements(self, expected: int | None = None) -> Iterator[Any]:
        source = self._source
        pending, self._pending = self._pending, None
        if pending is not None:
            source.load_state_dict(pending["source"])
        items = iter(source)
        handed = 0
        while True:
            with self._lock:  # state_dict() runs in another thread: it must see the source between items
                try:
                    sample = next(items)
                except StopIteration:
                    break
            handed += 1
            yield self._handed(without_views(sample))
        if expected is not None and handed != expected and pending is None:
            raise SampleError(self._miscounted(handed))

    def _miscounted(self, handed: int) -> str:
        if getattr(self.pipeline, "items_per_epoch", lambda: None)() is not None:
            said = f"with_epoch({self.pipeline.nsamples}) fixes"
        else:
            said = f"with_length({self.pipeline.size}) says"
        what = "batches" if self.batch_size else "samples"
        return (
            f"the pipeline's {said} {self.cardinality} {what} an epoch, the dataset's cardinality for Keras, but "
            f"this epoch gave {handed}: give with_length() the true count, or leave it out and pass "
            "steps_per_epoch to model.fit()"
        )

    def _worker_elements(self, worker: Any) -> Iterator[Any]:
        w = int(worker)
        pipeline = copy.deepcopy(self._source_pipeline)
        epoch = self._worker_epochs.get(w, getattr(self._source_pipeline, "epoch", 0))
        self._worker_epochs[w] = epoch + 1
        if hasattr(pipeline, "set_epoch"):
            pipeline.set_epoch(epoch)  # each pass over the dataset is a new epoch for every copy
        # tf.data may call the generator from another of its threads each time: each step says which copy it is
        # (the shard split, a shared epoch's share and the restart of the stages at the data's end ask)
        me = (w, self.num_parallel_calls)
        _local.worker = me
        try:
            items = iter(pipeline)
        finally:
            _local.worker = None
        while True:
            _local.worker = me
            try:
                element = next(items)
            except StopIteration:
                return
            finally:
                _local.worker = None
            yield self._handed(without_views(element))

    def close(self) -> None:
        """End the workers (they stay from one epoch to the next until this, or until the source is collected)."""
        loader = getattr(self, "loader", None)  # None too when __init__ refused its arguments
        if loader is not None:
            loader.close()

    def __enter__(self) -> TFSource:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def state_dict(self) -> dict[str, Any]:
        """The Python-side position after the last element handed to TensorFlow."""
        if self.num_parallel_calls:
            raise CheckpointError("state_dict() needs num_parallel_calls=None (use num_workers for parallelism)")
        if self._pending is not None:
            return self._pending
        source = self._source
        with self._lock:
            return {"format": STATE_FORMAT, "source": source.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after ``state`` (or from :func:`wds_core.merge_states` of every host's states)."""
        if is_merged(state):
            state = {"format": STATE_FORMAT, "source": state}
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise CheckpointError(f"not a wds_tf state (expected format {STATE_FORMAT!r})")
        self._pending = state


def to_tf_dataset(pipeline: Any, output_signature: Any = None, **kw: Any) -> tf.data.Dataset:
    """``TFSource(pipeline, output_signature, **kw).dataset()``."""
    return TFSource(pipeline, output_signature, **kw).dataset()
