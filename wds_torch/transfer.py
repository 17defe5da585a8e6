"""Large batches from DataLoader workers to the main process through reused shared memory.

A DataLoader worker sends each tensor by moving it into a *new* shared-memory
segment (``share_memory_()``): a 12.5 MB batch of images costs ~3,000 fresh
page faults plus a copy, on a core that should be decoding.  Inside a
DataLoader worker, our datasets hand out batches (tuples, lists and dicts
whose arrays and bytes, three levels deep, total at least
:data:`MIN_BATCH_BYTES`) as a tuple or dict subclass that DataLoader's
``default_convert``/``default_collate`` keep.  When the worker's queue pickles
it, its arrays and tensors, and its ``bytes`` of 1 KiB or more, are copied
into one of a few shared-memory *slots* that the worker reuses (no new pages
after the first batches).  The main process maps the slot and wraps the arrays
as tensors without a copy, and copies each ``bytes`` out.  The slot is handed
back to the worker (a flag in its header) when the last tensor viewing it is
freed (at once when it held only bytes), so holding on to a batch is safe: the
worker then simply uses another slot, or the ordinary path when all of its
slots are held.  Bytes are what gains most: a pipe moves a 4 MB batch of
undecoded images 64 KB at a time, and the main process spent more on reading
and unpickling it than each worker did on reading it from an object store.

The main process receives what it would have received otherwise: a tuple or
list batch arrives as a ``list`` (``default_convert``'s rule), a dict as a
``dict``; numpy arrays as tensors; whatever else is pickled as DataLoader
pickles it.

Lifetime: a worker creates its slots under its own names; the main process
maps a slot the first time it sees it, keeps the mapping, and unlinks the name
at once, so nothing is left in ``/dev/shm`` however the worker ends.  The main
process drops its mapping when the worker retires the slot (announced with the
next batch) or is gone; tensors still viewing it keep their pages until freed.
A worker killed between creating a slot and the main process seeing it leaves
a name behind: the main process removes those of its workers when it finds one
gone and when it exits, and a new worker removes any that are a minute old and
whose process is gone (``wds_core.loader.shm.sweep_dead_slots``); a worker
unlinks unseen slots itself when it exits normally.
"""

from __future__ import annotations

import atexit
import io
import mmap
import os
import pickle
import signal
import threading
from multiprocessing import resource_tracker, shared_memory, util
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import torch

from wds_core.dist import process_running
from wds_core.io.forklocks import ForkSafeLock
from wds_core.loader.shm import (
    HAVE_SLOTS,
    HEADER,
    Lease,
    SlotPicking,
    SlotUnpicking,
    map_slot,
    slot_footprint,
    slot_name,
    sweep_dead_slots,
    unlink_slot,
    without_views,
)

__all__ = ["MIN_BATCH_BYTES", "wrap_batches"]

MIN_BATCH_BYTES = 1 << 20  # smaller items gain nothing from a slot
_MAX_SLOTS = 4  # per worker; DataLoader keeps prefetch_factor (2) batches in flight per worker
_MIN_ARRAY = 0  # every array and tensor of a batch that travels through a slot is in it (bytes: from 1 KiB)


def wrap_batches(items: Any) -> Any:
    """Items as they come, large batches in their slot-aware form (use inside a DataLoader worker).

    Memoryviews (``zero_copy`` reading) become bytes here: DataLoader's converters would turn each into a list
    of ints, and a view cannot be pickled anyway."""
    if not HAVE_SLOTS:
        for item in items:
            yield without_views(item)
        return
    for item in items:
        yield _wrap(without_views(item))


def _wrap(item: Any) -> Any:
    kind = type(item)
    if kind is tuple or kind is list:
        return _TupleBatch(*item) if slot_footprint(item, _MIN_ARRAY) >= MIN_BATCH_BYTES else item
    if kind is dict:
        return _DictBatch(item) if slot_footprint(item, _MIN_ARRAY) >= MIN_BATCH_BYTES else item
    return item


class _TupleBatch(tuple):
    """A tuple that DataLoader's converters rebuild as such (they take it for a namedtuple)."""

    _fields = ()
    __slots__ = ()

    def __new__(cls, *items: Any) -> _TupleBatch:
        return tuple.__new__(cls, items)

    def __reduce__(self) -> Any:
        return _pack(list(self))

    def __copy__(self) -> _TupleBatch:
        return self


class _DictBatch(dict):
    """A dict that travels through a slot; ``copy.copy`` (used by the converters) keeps the type."""

    def __reduce__(self) -> Any:
        return _pack(dict(self))

    def __copy__(self) -> _DictBatch:
        return _DictBatch(self)


class _BatchPickler(SlotPicking, ForkingPickler):
    """Pickles a batch with its large arrays, tensors and bytes in a slot; whatever else as DataLoader would."""

    def __init__(self, file: Any, view: memoryview) -> None:
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.view, self.used, self.min_bytes = view, 0, _MIN_ARRAY

    def slottable(self, obj: Any) -> np.ndarray | None:
        if isinstance(obj, torch.Tensor):
            if obj.device.type != "cpu" or obj.requires_grad or obj.is_sparse or obj.dtype == torch.bfloat16:
                return None
            obj = obj.numpy()
        return super().slottable(obj)


class _BatchUnpickler(SlotUnpicking, pickle.Unpickler):
    def __init__(self, file: Any, lease: Lease) -> None:
        super().__init__(file)
        self.lease = lease

    def array(self, tag: str, array: np.ndarray) -> Any:
        return torch.from_numpy(array) if tag == "wds-tensor" else array


def _pack(batch: list | dict) -> Any:
    slots = _slots()
    slot = slots.acquire(slot_footprint(batch, _MIN_ARRAY))
    if slot is None:
        return _plain, (batch,)  # its views, if any, are bytes already (wrap_batches)
    payload = io.BytesIO()
    _BatchPickler(payload, slot.buf).dump(batch)
    retired, slots.retired = slots.retired, []
    return _unpack, (slots.pid, slot.block.name, slot.block.size, payload.getvalue(), retired)


def _plain(batch: list | dict) -> Any:
    return batch


_mapped: dict[str, tuple[int, mmap.mmap]] = {}  # in the main process: slot name -> (worker pid, mapping)
_workers: set[int] = set()  # in the main process: the workers whose slots it has seen


def _mapping(pid: int, name: str, size: int, retired: list[str]) -> mmap.mmap:
    for old in retired:
        _mapped.pop(old, None)
    if name not in _mapped:
        if pid not in _workers:
            if not _workers:  # at exit, after multiprocessing has ended (and reaped) the daemonic workers
                atexit.register(_before_multiprocessing_exits)
                util.Finalize(None, _sweep_known, exitpriority=-1)
            _workers.add(pid)
        for other in {owner for owner, _ in _mapped.values()} - {pid}:
            if not process_running(other):
                for key in [key for key, (owner, _) in _mapped.items() if owner == other]:
                    del _mapped[key]
                sweep_dead_slots([other])  # what it made and was not seen (it was killed)
        _mapped[name] = (pid, map_slot(name, size, unlink=True, populate=True))
    return _mapped[name][1]


def _sweep_known() -> None:
    """At exit of the main process: the slots of its workers that were killed before it saw them."""
    sweep_dead_slots(_workers)


def _before_multiprocessing_exits() -> None:
    """Runs at exit before multiprocessing's own exit handler (registered earlier, so run later).

    That handler reaps the workers and then runs the finalizer that sweeps their slots; when a worker was
    killed, PyTorch's SIGCHLD handler raises in the middle of it ("DataLoader worker ... is killed by
    signal") and nothing after it runs: 1 exit in 7 left the killed workers' slots.  At exit there is no
    one left to tell, so the default handling is put back first; the slots of workers already gone are
    swept at once.
    """
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGCHLD) not in (
        signal.SIG_DFL,
        signal.SIG_IGN,
        None,
    ):
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _sweep_known()


def _unpack(pid: int, name: str, size: int, payload: bytes, retired: list[str]) -> Any:
    return _BatchUnpickler(io.BytesIO(payload), Lease(_mapping(pid, name, size, retired))).take()


class _Slot:
    def __init__(self, name: str, size: int) -> None:
        self.block = shared_memory.SharedMemory(name, create=True, size=HEADER + size)
        resource_tracker.unregister(self.block._name, "shared_memory")  # type: ignore[attr-defined]
        self.size = size

    @property
    def buf(self) -> memoryview:
        buf = self.block.buf
        if buf is None:  # pragma: no cover - only after close()
            raise RuntimeError("the shared-memory slot is closed")
        return buf

    @property
    def free(self) -> bool:
        return self.buf[0] == 0

    def close(self) -> None:
        """Unmap; unlink the name unless the main process already did (only for a slot nothing writes into)."""
        self.block.close()
        unlink_slot(self.block.name)


class _WorkerSlots:
    """One worker's slots, unlinked when the worker exits.

    Batches are pickled into a slot by the thread that feeds the worker's queue, which DataLoader does not wait
    for when it shuts its workers down (a loader dropped mid-epoch): that thread may still be writing a batch
    into a slot while the worker exits.  So at exit the slots' names are unlinked, but the slots stay mapped
    until the process is gone (unmapping them under the writer was a segmentation fault: 28 of 120 workers in 15
    teardowns of 8 workers on a 16-core machine, benchmarks/bench_hostile.py --rows servers), and no slot is made
    after that (the batch goes the ordinary way).
    """

    def __init__(self) -> None:
        self.slots: list[_Slot] = []
        self.retired: list[str] = []
        self.pid = os.getpid()
        self.created = 0
        self.exiting = False
        self.lock = ForkSafeLock()  # a slot is made, or the names are unlinked at exit, one at a time
        util.Finalize(self, self.unlink_at_exit, exitpriority=20)
        sweep_dead_slots(min_age=60)  # left by workers of earlier runs that were killed (a minute old at least)

    def acquire(self, nbytes: int) -> _Slot | None:
        with self.lock:
            return None if self.exiting else self._acquire(nbytes)

    def _acquire(self, nbytes: int) -> _Slot | None:
        free = [slot for slot in self.slots if slot.free]
        fitting = [slot for slot in free if slot.size >= nbytes]
        if fitting:
            slot = fitting[0]
        else:
            if free:  # too small: replace it (the main process keeps its own mapping while it needs one)
                self.slots.remove(free[0])
                self.retired.append(free[0].block.name)
                free[0].close()
            elif len(self.slots) >= _MAX_SLOTS:
                return None
            self.created += 1
            slot = _Slot(slot_name(self.pid, self.created), nbytes + nbytes // 8)
            self.slots.append(slot)
        slot.buf[0] = 1
        return slot

    def close(self) -> None:
        """Unmap and unlink every slot now: only where nothing can be writing into one (this process's tests)."""
        with self.lock:
            for slot in self.slots:
                slot.close()
            self.slots = []

    def unlink_at_exit(self) -> None:
        """The names of the slots, gone; their pages stay mapped while the process lives (see the class doc)."""
        with self.lock:
            self.exiting = True
            for slot in self.slots:
                unlink_slot(slot.block.name)


_worker_slots: _WorkerSlots | None = None


def _slots() -> _WorkerSlots:
    global _worker_slots
    if _worker_slots is None or _worker_slots.pid != os.getpid():
        _worker_slots = _WorkerSlots()
    return _worker_slots
