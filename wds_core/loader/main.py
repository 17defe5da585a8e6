"""``Loader``: a pipeline run in worker processes, without any framework.

JAX and TensorFlow users have no ``DataLoader``; ``Loader(dataset,
num_workers=2)`` starts that many processes, each iterating its own copy of
the pipeline (the core's worker splitting gives each its share of the shards),
and yields their items in turn: worker 0, 1, ..., 0, 1, ... (skipping workers
that are finished), so the order is a function of the pipeline and not of
timing.  ``in_order=False`` takes whichever item is ready first instead.

* A slow worker is waited for; a worker that dies or raises ends the epoch
  with its error, re-raised in the main process with the worker's traceback.
* Leaving the loop (``break``, an exception, KeyboardInterrupt) stops and
  joins every worker; workers ignore SIGINT so the main process decides.
  A main process killed outright (SIGKILL, the OOM killer) cannot stop them:
  each worker notices within half a second that its parent is gone, unlinks
  its slots and exits, and a new ``Loader`` sweeps the slots of loaders that
  are gone (:func:`~wds_core.loader.shm.sweep_dead_slots`).
* Large numpy arrays travel through a few reused shared-memory slots per
  worker and arrive as arrays viewing the slot, which goes back to the worker
  when they are freed (:mod:`wds_core.loader.shm`; ``shm_slots=0`` turns this
  off).  Keeping items is safe: a worker whose slots are all held pickles.
* ``state_dict()`` is exact between two items: every ``snapshot_every`` items
  each worker sends its pipeline state ahead of the next item; the loader's
  state is, per worker, the last snapshot it consumed plus how many items it
  took since (restoring loads the snapshot and skips those).  JSON, small.
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.util  # its exit handler first, so that ours (registered after) runs before it
import os
import pickle
import queue as queue_module
import weakref
from collections.abc import Iterator
from typing import Any

from ..elastic import is_merged
from ..errors import CheckpointError, SpecError, WdsError
from .mainguard import refuse_unguarded
from .shm import HAVE_SLOTS, SlotReader, create_slots, sweep_dead_slots
from .worker import worker_main

__all__ = ["Loader"]

STATE_FORMAT = "wds-loader-1"
_POLL = 0.1  # seconds between checks that a silent worker is still alive


class Loader:
    """Iterate ``dataset`` in ``num_workers`` processes (see the module doc).

    ``start_method`` is a multiprocessing start method (``"spawn"`` by default:
    safe with JAX, TensorFlow and threads in the main process).  ``rank`` and
    ``world_size``, when given, are what the workers' pipelines see as their
    node (e.g. ``jax.process_index()``/``process_count()``).  ``prefetch`` is
    how many items each worker may have waiting.  ``shm_slots`` (default
    ``prefetch + 3``: the items waiting in the queue, the one being made and
    the one the caller holds) and ``shm_slot_bytes`` size each worker's
    shared-memory slots; a slot's pages are only touched as far as items fill
    them.  ``persistent_workers=True`` keeps the workers (and their imports and
    open state) from one epoch to the next, as DataLoader's option does;
    ``close()`` or dropping the loader ends them.
    """

    def __init__(
        self,
        dataset: Any,
        num_workers: int = 2,
        *,
        in_order: bool = True,
        prefetch: int = 8,
        start_method: str = "spawn",
        rank: int | None = None,
        world_size: int | None = None,
        snapshot_every: int = 64,
        shm_slots: int | None = None,
        shm_slot_bytes: int = 32 << 20,
        persistent_workers: bool = False,
    ) -> None:
        if num_workers < 1:
            raise SpecError(f"num_workers must be >= 1, got {num_workers}")
        if prefetch < 1 or snapshot_every < 1:
            raise SpecError("prefetch and snapshot_every must be >= 1")
        if (rank is None) != (world_size is None):
            raise SpecError("give both rank and world_size, or neither")
        self.dataset, self.num_workers, self.in_order = dataset, num_workers, in_order
        self.prefetch, self.start_method, self.snapshot_every = prefetch, start_method, snapshot_every
        self.node = None if rank is None else (int(rank), int(world_size))  # type: ignore[arg-type]
        self.shm_slots = prefetch + 3 if shm_slots is None else max(0, shm_slots)
        self.shm_slot_bytes = max(0, shm_slot_bytes)
        self.epoch = 0
        self._pending: dict[str, Any] | None = None
        self.persistent_workers = bool(persistent_workers)
        self._run: _LoaderRun | None = None
        self._workers: _Workers | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[Any]:
        if self._run is not None:
            self._run.close()
        pending, self._pending = self._pending, None
        if pending is not None:
            self.epoch = int(pending["epoch"])
        if self._workers is None or self._workers.closed or not self.persistent_workers:
            self._workers = _Workers(self)
        run = _LoaderRun(self, self._workers, self.epoch, pending)
        self.epoch += 1
        self._run = run
        return run.items()

    def state_dict(self) -> dict[str, Any]:
        """The position of the current iteration: resuming continues after the last item taken."""
        if self._pending is not None:
            return self._pending
        if self._run is None:
            return {"format": STATE_FORMAT, "epoch": self.epoch, "num_workers": self.num_workers, "workers": None}
        return self._run.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or (state.get("format") != STATE_FORMAT and not is_merged(state)):
            raise CheckpointError(f"not a Loader state (expected format {STATE_FORMAT!r})")
        if is_merged(state):
            # merged by wds_core.merge_states: every worker re-splits what is left of that epoch
            self._pending = {
                "format": STATE_FORMAT,
                "epoch": int(state["epoch"]),
                "num_workers": self.num_workers,
                "workers": [{"state": state, "skip": 0} for _ in range(self.num_workers)],
            }
            return
        if state["num_workers"] != self.num_workers:
            raise CheckpointError(
                f"the state was taken with {state['num_workers']} workers; this loader has {self.num_workers}"
            )
        self._pending = state

    def close(self) -> None:
        """Stop the workers (leaving a ``for`` loop does it too, unless they are persistent)."""
        if self._run is not None:
            self._run.close()
        self._drop_workers()

    def _drop_workers(self) -> None:
        workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()

    def __del__(self) -> None:
        try:
            self._drop_workers()
        except Exception:  # noqa: BLE001 - at interpreter exit the multiprocessing module may be half gone
            pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_run"] = state["_workers"] = None
        return state


class _Workers:
    """The worker processes, their queues and shared-memory slots; they run one epoch per command."""

    def __init__(self, loader: Loader) -> None:
        _OPEN.add(self)
        n = loader.num_workers
        ctx: Any = multiprocessing.get_context(loader.start_method)
        if ctx.get_start_method() != "fork":
            refuse_unguarded("Loader workers", ctx.get_start_method())
        self.generation = 0
        self.stop = ctx.Event()
        self.commands = [ctx.SimpleQueue() for _ in range(n)]
        self.queues = [ctx.Queue(maxsize=loader.prefetch + 1) for _ in range(n)]
        self.readers: list[SlotReader | None] = [None] * n
        use_slots = loader.shm_slots > 0 and loader.shm_slot_bytes > 0 and HAVE_SLOTS
        self.procs: list[Any] = []
        self.closed = False
        if use_slots:
            sweep_dead_slots(min_age=60)  # left by loaders killed outright (a minute old at least)
        try:
            for w in range(n):
                slots = None
                if use_slots:
                    blocks = create_slots(loader.shm_slots, loader.shm_slot_bytes)
                    self.readers[w] = SlotReader(blocks)
                    slots = [block.name for block in blocks]
                args: tuple[Any, ...] = (loader.dataset, w, n, loader.node, self.commands[w], self.queues[w])
                args += (self.stop, loader.snapshot_every, slots, os.getpid())
                proc = ctx.Process(target=worker_main, args=args, daemon=True, name=f"wds-loader-{w}")
                proc.start()
                self.procs.append(proc)
        except (pickle.PicklingError, AttributeError, TypeError) as exn:
            self.close()
            raise SpecError(
                f"Loader workers start with {loader.start_method!r}, which pickles the pipeline, and it cannot be "
                f"pickled ({exn}); use module-level functions instead of lambdas and local functions"
            ) from None
        except BaseException:  # a spawn without a __main__ guard, no room in /dev/shm...: no slot is left behind
            self.close()
            raise

    def start_epoch(self, epoch: int, starts: list[dict[str, Any] | None], done: list[bool]) -> None:
        self.generation += 1
        self.stop.clear()
        for w, start in enumerate(starts):
            if not done[w]:
                self.commands[w].put((self.generation, epoch, start))

    def receive(self, w: int, block: bool) -> tuple[str, Any] | None:
        """The next message of worker ``w`` for this epoch; ``None`` when ``block`` is false and nothing is there."""
        while True:
            try:
                generation, kind, value = self.queues[w].get(timeout=_POLL if block else 0.0005)
            except queue_module.Empty:
                proc = self.procs[w]
                if not proc.is_alive():
                    try:  # its last messages may still be in the pipe
                        generation, kind, value = self.queues[w].get(timeout=_POLL)
                    except queue_module.Empty:
                        raise WdsError(f"Loader worker {w} died (exit code {proc.exitcode})") from None
                elif not block:
                    return None
                else:
                    continue
            if generation == self.generation:
                return kind, value
            if kind == "item":  # from an epoch that was left early: hand its slot back
                self.decode(w, value)

    def decode(self, w: int, value: tuple[Any, int]) -> Any:
        reader = self.readers[w]
        return value[0] if reader is None else reader.decode(*value)

    def finish_epoch(self, done: list[bool]) -> None:
        """Stop the epoch's unfinished workers and take their remaining messages (persistent workers)."""
        self.stop.set()
        for w, finished in enumerate(done):
            while not finished:
                message = self.receive(w, block=True)
                finished = message is not None and message[0] in ("end", "error")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stop.set()
        for command in self.commands:
            command.put(None)
        for w, proc in enumerate(self.procs):
            proc.join(timeout=0.05)
            while proc.is_alive():  # a worker blocked on a full queue needs room to notice the stop
                try:
                    self.queues[w].get(timeout=0.05)
                except queue_module.Empty:
                    proc.join(timeout=0.05)
                except (EOFError, OSError):
                    break
            if proc.is_alive():  # pragma: no cover - only when a worker hangs in user code
                proc.terminate()
                proc.join(timeout=5)
        for q in self.queues:
            q.close()
            q.cancel_join_thread()
        for reader in self.readers:
            if reader is not None:
                reader.close()


_OPEN: weakref.WeakSet[_Workers] = weakref.WeakSet()


@atexit.register
def _close_open_workers() -> None:
    """At the interpreter's exit, end the workers of every loader still open (persistent ones that a framework holds
    to the end: a ``tf.data`` dataset keeps its ``TFSource``) and unlink their slots, before multiprocessing's own
    exit handler: so nothing outlives the process, and its resource tracker finds no shared memory left."""
    for workers in list(_OPEN):
        try:
            workers.close()
        except Exception:  # noqa: BLE001 - the interpreter is ending: close what can be closed
            pass


class _LoaderRun:
    """One epoch: what was taken from each worker, and where each one is."""

    def __init__(self, loader: Loader, workers: _Workers, epoch: int, pending: dict[str, Any] | None) -> None:
        n = self.num_workers = loader.num_workers
        self.in_order = loader.in_order
        # the loader, while the epoch runs (a `for x in Loader(...)` holds nothing else); dropped when it ends,
        # so that a dropped Loader is freed at once, persistent workers and shared memory with it
        self.loader: Loader | None = loader
        self.workers, self.epoch = workers, epoch
        starts = pending["workers"] if pending and pending.get("workers") else [None] * n
        self.snapshots: list[Any] = [s.get("state") if s else None for s in starts]
        self.positions: list[Any] = [s.get("position") if s else None for s in starts]
        self.reasons: list[str | None] = [None] * n
        self.skips = [int(s.get("skip", 0)) if s else 0 for s in starts]
        self.done = [bool(s.get("done")) if s else False for s in starts]
        self.next = int(pending.get("next", 0)) if pending else 0
        self.closed = False
        commands = [{"state": self.snapshots[w], "skip": self.skips[w]} if starts[w] else None for w in range(n)]
        workers.start_epoch(epoch, commands, self.done)

    def state_dict(self) -> dict[str, Any]:
        workers = []
        for w in range(self.num_workers):
            if self.done[w]:
                entry: dict[str, Any] = {"state": None, "skip": 0, "done": True}
            elif self.snapshots[w] is None and self.reasons[w] is not None:
                raise CheckpointError(f"Loader worker {w} cannot checkpoint its pipeline: {self.reasons[w]}")
            else:
                entry = {"state": self.snapshots[w], "skip": self.skips[w], "done": False}
            if self.positions[w] is not None:
                entry["position"] = self.positions[w]
            workers.append(entry)
        n = self.num_workers
        return {"format": STATE_FORMAT, "epoch": self.epoch, "num_workers": n, "next": self.next, "workers": workers}

    def _take(self, w: int, block: bool = True) -> tuple[bool, Any]:
        """Handle messages of worker ``w`` up to its next item: ``(True, item)``, or ``(False, None)`` at its end."""
        while True:
            message = self.workers.receive(w, block)
            if message is None:
                return False, _NOTHING
            kind, value = message
            if kind == "item@":  # an item and the worker's position in a balanced epoch after it
                value, self.positions[w] = value
                kind = "item"
            if kind == "item":
                self.skips[w] += 1
                return True, self.workers.decode(w, value)
            if kind == "state":
                self.snapshots[w], self.reasons[w] = value.get("state"), value.get("reason")
                self.skips[w] = 0
            elif kind == "end":
                self.done[w] = True
                return False, None
            else:
                self.done[w] = True
                _reraise(w, *value)

    def items(self) -> Iterator[Any]:
        n = self.num_workers
        try:
            while not all(self.done):
                w = self.next
                if self.done[w]:
                    self.next = (w + 1) % n
                    continue
                if self.in_order:
                    got, item = self._take(w)
                else:
                    got, item = self._take(w, block=False)
                    if item is _NOTHING:
                        self.next = (w + 1) % n
                        continue
                self.next = (w + 1) % n
                if got:
                    yield item
        finally:
            self.close()

    def close(self) -> None:
        """End the epoch: persistent workers wait for the next one, others are stopped."""
        if self.closed:
            return
        self.closed = True
        loader, self.loader = self.loader, None
        assert loader is not None
        if not loader.persistent_workers or self.workers.closed:
            self.workers.close()
            return
        try:
            self.workers.finish_epoch(self.done)
        except BaseException as exn:  # a worker died or the wait was interrupted: start afresh next epoch
            loader._drop_workers()
            if not isinstance(exn, Exception):
                raise


_NOTHING = object()


def _reraise(worker: int, payload: bytes | None, text: str, detail: str) -> None:
    note = f"raised in Loader worker {worker}; its traceback:\n{detail}"
    if payload is not None:
        try:
            exn = pickle.loads(payload)
        except Exception:
            exn = None
        if isinstance(exn, BaseException):
            exn.add_note(note)
            raise exn
    raise WdsError(f"Loader worker {worker} failed: {text}\n{note}")
