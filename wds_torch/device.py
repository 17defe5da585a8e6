"""Batches decoded and cut on the device the model runs on: ``crop_images(..., device="cuda")`` + :func:`to_device`.

The workers only read: ``crop_images(224, flip=0.5, layout="chw", device="cuda")`` in the dataset draws each
sample's crop from its JPEG header (the same box and flip as the CPU path, so the random stream, the order and
checkpoints are unchanged) and batches the bytes with their plans (:mod:`wds_core.stages.devicecrop`).  In the main
process :func:`to_device` decodes each batch on the GPU (``torchvision.io.decode_jpeg`` on a list: nvJPEG, batched),
and cuts, resizes, flips and normalises the whole batch in two batched matrix products (each image's resampling
along each axis as a matrix: bilinear, pixel centres as OpenCV's and torchvision's ``antialias=False``; a batch
whose boxes shrink by more than 2x is sampled at 2-4x the output and averaged, so that it does not alias); with CUDA
a thread prepares the next two batches on a side stream while the model runs on this one.  Every other tensor and
numeric array of the batch moves to the device too::

    dataset = (wds_torch.WebDataset(urls, shuffle=True, seed=0).shuffle(1000)
               .crop_images(224, flip=0.5, layout="chw", mean=MEAN, std=STD, device="cuda")
               .to_tuple("jpg", "cls").batched(256))
    loader = wds_torch.WebLoader(dataset, batch_size=None, num_workers=4, pin_memory=True)
    batches = loader.to_device()                      # or wds_torch.to_device(loader): images [256, 3, 224, 224]
                                                      # on the GPU, labels too
    for images, labels in batches:
        ...
    state = batches.state_dict()                      # the loader's state after the last batch given out

``device="cpu"`` runs the same code on the CPU (wds's JPEG decoder, the same products in float32): the twin that tests
run without a GPU.  The decoding and cutting are :mod:`wds_torch.devicecut`'s; this module moves the batches and
prepares them ahead.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from wds_core.errors import SpecError
from wds_core.io.forklocks import fork_safe_event
from wds_core.stages.devicecrop import HostShare, PlannedCrops

from .devicecut import cut_planned
from .split import SplitTuner

__all__ = ["DeviceBatches", "to_device"]


def to_device(batches: Iterable[Any], device: str | torch.device | None = None, **options: Any) -> DeviceBatches:
    """``batches`` (a loader) with each batch on ``device`` (default: the one its planned crops name, else CUDA
    when there is one): planned crops decoded and cut there (:func:`cut_planned`), tensors and numeric arrays
    moved.  Options (:class:`DeviceBatches`): ``dtype`` the images' (uint8 by default, float32 with
    ``mean``/``std``); ``channels_last`` their memory format; ``prefetch`` how many batches a thread prepares
    ahead (``True``: 2; by default 2 on CUDA, none elsewhere); ``non_blocking`` copies; ``split`` the share of each
    batch the workers cut on the host (a number from 0 to 1, or ``"auto"``: :mod:`wds_torch.split`)."""
    return DeviceBatches(batches, device, **options)


class DeviceBatches:
    """What :func:`to_device` gives: iterate it for the batches on the device; ``state_dict()`` is the wrapped
    loader's state after the last batch given out (batches prepared ahead are not counted), ``load_state_dict``
    restores the loader.

    With ``prefetch`` (``True``: 2 batches; by default 2 on CUDA, none elsewhere) a thread takes the batches from
    the loader and prepares them (decode, cut, copies) on a side CUDA stream while the caller trains on the one
    given out; the caller's stream waits for each batch's work before using it.  A thread, not just a stream:
    nvJPEG's batched decode blocks its caller until the batch is decoded, and training loops wait for their step
    (``loss.item()``), so work prepared on the caller's thread would not overlap the model's.  An error in the
    thread is raised where the batch would have been; breaking out of the loop stops the thread."""

    def __init__(
        self,
        batches: Iterable[Any],
        device: str | torch.device | None = None,
        *,
        dtype: torch.dtype | None = None,
        channels_last: bool = False,
        prefetch: bool | int | None = None,
        non_blocking: bool = True,
        split: float | str | None = None,
    ) -> None:
        if not (split is None or split == "auto" or (isinstance(split, (int, float)) and 0 <= split <= 1)):
            raise SpecError(f"split is a share of each batch from 0 to 1, or 'auto', got {split!r}")
        self.batches, self.split = batches, split
        self.tuner: SplitTuner | None = None
        self.share: HostShare | None = None  # the stage's share of each batch cut on the host, once known
        self.device = None if device is None else torch.device(device)
        self.dtype, self.channels_last, self.prefetch, self.non_blocking = dtype, channels_last, prefetch, non_blocking
        self._state: Any = None  # the loader's state after the last batch given out, while batches are held ahead
        self.clock = _FeedClock()

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def _where(self, batch: Any) -> torch.device:
        planned = _first_planned(batch)
        if self.device is not None:
            where = self.device
        elif planned is not None:
            where = torch.device(planned.finish.device)
        else:
            where = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if where.type == "cuda" and where.index is None:  # the caller's current GPU, named for the thread
            where = torch.device("cuda", torch.cuda.current_device())
        return where

    def _depth(self, device: torch.device) -> int:
        if self.prefetch is None:
            return 2 if device.type == "cuda" else 0
        if self.prefetch is True:
            return 2
        return max(0, int(self.prefetch))

    def __iter__(self) -> Iterator[Any]:
        source = iter(self.batches)
        self._state = None
        try:
            first = next(source)
        except StopIteration:
            return
        device = self._where(first)
        depth = self._depth(device)
        self._find_share(first, device)
        given = self.tuner.given if self.tuner is not None else _nothing
        clock = self.clock = _FeedClock()
        if depth == 0:
            while True:
                with clock.preparing():
                    moved = self._move(first, device)
                with clock.consumer():
                    yield moved
                given()
                with clock.loader():
                    first = next(source, _END)
                if first is _END:
                    return
        state_of = getattr(self.batches, "state_dict", None)
        ahead = _Ahead(self._move, source, first, state_of if callable(state_of) else None, device, depth, clock)
        try:
            for moved, state in ahead:
                self._state = state
                yield moved
                given()
            self._state = None
        finally:
            ahead.close()

    def _find_share(self, batch: Any, device: torch.device) -> None:
        planned = _first_planned(batch)
        self.share = None if planned is None else HostShare.find(planned.finish.share)
        if self.split is None:
            return
        if planned is None:
            raise SpecError("split= shares crop_images(..., device=...)'s batches: these hold no planned crops")
        if self.share is None:
            raise SpecError(
                "split= sets the share of crop_images(..., device=...) in the process that built the dataset: these "
                "batches come from a stage made elsewhere"
            )
        if self.split == "auto":
            if self.tuner is None or self.tuner.share is not self.share:  # batches made before a change: settled
                self.tuner = SplitTuner(self.share, settle=max(16, _in_flight(self.batches) + self._depth(device)))
        else:
            self.share.tuned_by = None  # a fixed share from now on
            self.share.set(float(self.split))

    def feed_report(self) -> dict[str, Any]:
        """Where the preparing of batches spent its time this epoch (or the last): ``{"batches", "wall_seconds",
        "loader_seconds"`` (waiting for the loader's next batch), ``"preparing_seconds"`` (decoding, cutting,
        copies; ``"preparing_cpu_seconds"`` of it on a CPU: the rest waits for the GPU or the GIL),
        ``"consumer_seconds"}`` (batches ready, waiting for the training loop to take them).  The loader's
        share says the workers or the pin-memory thread bound the feed; preparing's, the decode and cut."""
        return self.clock.report()

    def split_report(self) -> dict[str, Any] | None:
        """The share of each batch cut on the host: ``{"mode": "fixed" | "auto", "share": ...}`` (and the tuner's
        last choices, ``(share, batches/s)``), or ``None`` before the first batch of planned crops."""
        return None if self.share is None else self.share.report()

    def _move(self, batch: Any, device: torch.device) -> Any:
        if isinstance(batch, PlannedCrops):
            return cut_planned(batch, device, dtype=self.dtype, channels_last=self.channels_last)
        if isinstance(batch, torch.Tensor):
            return batch.to(device, non_blocking=self.non_blocking)
        if isinstance(batch, np.ndarray) and batch.dtype.kind in "biuf":
            return torch.from_numpy(batch).to(device, non_blocking=self.non_blocking)
        if isinstance(batch, dict):
            return {key: self._move(value, device) for key, value in batch.items()}
        if isinstance(batch, (list, tuple)):
            moved = [self._move(value, device) for value in batch]
            return tuple(moved) if isinstance(batch, tuple) else moved
        return batch

    def state_dict(self) -> Any:
        if isinstance(self._state, _Failed):  # the loader could not say its state (no torchdata): said when asked
            raise self._state.error
        if self._state is not None:
            return self._state
        return self.batches.state_dict()  # type: ignore[attr-defined]

    def load_state_dict(self, state: Any) -> None:
        self._state = None
        self.batches.load_state_dict(state)  # type: ignore[attr-defined]


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class _Ahead:
    """Up to ``depth`` batches taken from ``source`` and prepared by ``move`` in a thread, each with the loader's
    state after it was taken (``state_of``) and, on CUDA, the event its side-stream work ends with."""

    def __init__(
        self,
        move: Any,
        source: Iterator[Any],
        first: Any,
        state_of: Any,
        device: torch.device,
        depth: int,
        clock: _FeedClock,
    ) -> None:
        self.device, self.clock = device, clock
        self.ready: queue.Queue[Any] = queue.Queue(depth)
        self.stopping = fork_safe_event()
        self.thread = threading.Thread(
            target=self._run, args=(move, source, first, state_of), name="wds-to-device", daemon=True
        )
        self.thread.start()

    def _run(self, move: Any, source: Iterator[Any], batch: Any, state_of: Any) -> None:
        try:
            state = _state(state_of)  # after the first batch, taken by the caller
            side = None
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)  # this thread's current device
                side = torch.cuda.Stream(self.device)
            clock = self.clock
            while not self.stopping.is_set():
                item: tuple[Any, Any, torch.cuda.Event | None]
                with clock.preparing():
                    if side is None:
                        item = (move(batch, self.device), state, None)
                    else:
                        with torch.cuda.stream(side):
                            moved = move(batch, self.device)
                            done = torch.cuda.Event()
                            done.record(side)
                        item = (moved, state, done)
                        del moved
                del batch
                with clock.consumer():
                    if not self._put(item):
                        return
                del item
                with clock.loader():
                    batch = next(source, _END)
                if batch is _END:
                    self._put(_END)
                    return
                state = _state(state_of)
        except BaseException as exn:  # raised in the caller's thread, where the batch would have been
            self._put(_Failed(exn))

    def _put(self, item: Any) -> bool:
        while not self.stopping.is_set():
            try:
                self.ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        while True:
            item = self._get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            moved, state, done = item
            if done is not None:  # the caller's stream waits for the batch's work, and owns its tensors now
                current = torch.cuda.current_stream(self.device)
                current.wait_event(done)
                for tensor in _tensors(moved):
                    tensor.record_stream(current)
            yield moved, state

    def _get(self) -> Any:
        while True:
            try:
                return self.ready.get(timeout=1.0)
            except queue.Empty:
                if not self.thread.is_alive() and self.ready.empty():
                    raise RuntimeError("the thread preparing batches for the device ended without a word") from None

    def close(self) -> None:
        """Stops the thread: it ends after the batch it is taking or preparing (waited for, so that the loader is
        not asked for two batches at once when a new epoch starts)."""
        self.stopping.set()
        if threading.current_thread() is self.thread:  # the generator collected by the thread itself
            return
        while self.thread.is_alive():
            try:
                self.ready.get(timeout=0.1)
            except queue.Empty:
                pass
        while not self.ready.empty():
            self.ready.get_nowait()


class _FeedClock:
    """The time the preparing of batches spends waiting for the loader, preparing (and how much of that on a CPU)
    and waiting for the training loop: :meth:`DeviceBatches.feed_report`.  Two clock reads a step, not a batch's
    image."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds = {"loader": 0.0, "preparing": 0.0, "preparing_cpu": 0.0, "consumer": 0.0}
        self.batches = 0

    def loader(self) -> _Timed:
        return _Timed(self, "loader")

    def preparing(self) -> _Timed:
        self.batches += 1
        return _Timed(self, "preparing", cpu=True)

    def consumer(self) -> _Timed:
        return _Timed(self, "consumer")

    def report(self) -> dict[str, Any]:
        report: dict[str, Any] = {"batches": self.batches, "wall_seconds": time.perf_counter() - self.started}
        report.update((f"{name}_seconds", seconds) for name, seconds in self.seconds.items())
        return report


class _Timed:
    __slots__ = ("clock", "cpu", "name", "started", "started_cpu")

    def __init__(self, clock: _FeedClock, name: str, cpu: bool = False) -> None:
        self.clock, self.name, self.cpu = clock, name, cpu

    def __enter__(self) -> None:
        self.started = time.perf_counter()
        self.started_cpu = time.thread_time() if self.cpu else 0.0

    def __exit__(self, *exc: Any) -> None:
        seconds = self.clock.seconds
        seconds[self.name] += time.perf_counter() - self.started
        if self.cpu:
            seconds["preparing_cpu"] += time.thread_time() - self.started_cpu


def _in_flight(batches: Any) -> int:
    """How many batches a loader (a WebLoader's, a DataLoader) has asked its workers for ahead of the caller."""
    loader = getattr(batches, "loader", batches)
    workers = getattr(loader, "num_workers", 0)
    return int(workers) * int(getattr(loader, "prefetch_factor", None) or 2) if isinstance(workers, int) else 0


def _nothing() -> None:
    pass


def _state(state_of: Any) -> Any:
    """The loader's state now, or its failure to give one (kept for ``state_dict()``: a loader that cannot be
    checkpointed feeds the device all the same, and says so only when a checkpoint is asked for)."""
    if state_of is None:
        return None
    try:
        return state_of()
    except Exception as exn:
        return _Failed(exn)


def _first_planned(batch: Any) -> PlannedCrops | None:
    if isinstance(batch, PlannedCrops):
        return batch
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for value in values:
        found = _first_planned(value)
        if found is not None:
            return found
    return None


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
