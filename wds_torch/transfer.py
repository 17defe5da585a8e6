"""Large batches from DataLoader workers to the main process through reused shared memory.

A DataLoader worker sends each tensor by moving it into a *new* shared-memory
segment (``share_memory_()``): a 12.5 MB batch of images costs ~3,000 fresh
page faults plus a copy, on a core that should be decoding.  Inside a
DataLoader worker, our datasets hand out batches (tuples, lists and dicts
whose arrays total at least :data:`MIN_BATCH_BYTES`) as a tuple or dict
subclass that DataLoader's ``default_convert``/``default_collate`` keep.  When
the worker's queue pickles it, the large arrays are copied into one of a few
shared-memory *slots* that the worker reuses (no new pages after the first
batches), and the main process maps the slot and wraps the arrays as tensors
without a copy.  The slot is handed back to the worker (a flag in its header)
when the last tensor viewing it is freed, so holding on to a batch is safe:
the worker then simply uses another slot, or the ordinary path when all of
its slots are held.

The main process receives what it would have received otherwise: a tuple or
list batch arrives as a ``list`` (``default_convert``'s rule), a dict as a
``dict``; numpy arrays as tensors.

Lifetime: a worker creates its slots under its own names; the main process
maps a slot the first time it sees it, keeps the mapping, and unlinks the name
at once, so nothing is left in ``/dev/shm`` however the worker ends.  The main
process drops its mapping when the worker retires the slot (announced with the
next batch) or is gone; tensors still viewing it keep their pages until freed.
A worker killed between creating a slot and the main process seeing it leaves
a name behind: the main process removes those of its workers when it finds one
gone and when it exits, and a new worker removes any that are a minute old and
whose process is gone (``wds_core.shmring.sweep_dead_slots``); a worker
unlinks unseen slots itself when it exits normally.
"""

from __future__ import annotations

import atexit
import mmap
import os
import signal
import threading
from multiprocessing import resource_tracker, shared_memory, util
from typing import Any

import numpy as np
import torch

from wds_core.dist import process_running
from wds_core.shmring import (
    HAVE_SLOTS,
    HEADER,
    Lease,
    aligned,
    map_slot,
    slot_array,
    slot_name,
    sweep_dead_slots,
    unlink_slot,
)

__all__ = ["MIN_BATCH_BYTES", "wrap_batches"]

MIN_BATCH_BYTES = 1 << 20  # smaller items gain nothing from a slot
_MAX_SLOTS = 4  # per worker; DataLoader keeps prefetch_factor (2) batches in flight per worker


def wrap_batches(items: Any) -> Any:
    """Items as they come, large batches in their slot-aware form (use inside a DataLoader worker)."""
    if not HAVE_SLOTS:
        yield from items
        return
    for item in items:
        yield _wrap(item)


def _large_bytes(values: Any) -> int:
    total = 0
    for value in values:
        if isinstance(value, (np.ndarray, torch.Tensor)):
            total += value.nbytes
    return total


def _wrap(item: Any) -> Any:
    kind = type(item)
    if kind is tuple or kind is list:
        return _TupleBatch(*item) if _large_bytes(item) >= MIN_BATCH_BYTES else item
    if kind is dict:
        return _DictBatch(item) if _large_bytes(item.values()) >= MIN_BATCH_BYTES else item
    return item


class _TupleBatch(tuple):
    """A tuple that DataLoader's converters rebuild as such (they take it for a namedtuple)."""

    _fields = ()
    __slots__ = ()

    def __new__(cls, *items: Any) -> _TupleBatch:
        return tuple.__new__(cls, items)

    def __reduce__(self) -> Any:
        return _pack(list, list(enumerate(self)))

    def __copy__(self) -> _TupleBatch:
        return self


class _DictBatch(dict):
    """A dict that travels through a slot; ``copy.copy`` (used by the converters) keeps the type."""

    def __reduce__(self) -> Any:
        return _pack(dict, list(self.items()))

    def __copy__(self) -> _DictBatch:
        return _DictBatch(self)


def _slottable(value: Any) -> np.ndarray | None:
    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu" or value.requires_grad or value.is_sparse or value.dtype == torch.bfloat16:
            return None
        value = value.numpy()
    elif type(value) is not np.ndarray:
        return None
    if value.dtype.hasobject:
        return None
    return value


def _pack(kind: type, entries: list[tuple[Any, Any]]) -> Any:
    arrays = {}
    end = 0
    for position, (_, value) in enumerate(entries):
        array = _slottable(value)
        if array is not None:
            start = aligned(end)
            arrays[position] = (array, start)
            end = start + array.nbytes
    slots = _slots()
    slot = slots.acquire(end) if end >= MIN_BATCH_BYTES else None
    if slot is None:
        return _plain, (kind, entries)
    moved = []
    for position, (key, value) in enumerate(entries):
        if position not in arrays:
            moved.append((key, value))
            continue
        array, start = arrays[position]
        target = np.ndarray(array.shape, array.dtype, buffer=slot.block.buf, offset=HEADER + start)
        np.copyto(target, array, casting="no")
        moved.append((key, _InSlot(start, array.shape, array.dtype.str, isinstance(value, torch.Tensor))))
    retired, slots.retired = slots.retired, []
    return _unpack, (kind, slots.pid, slot.block.name, slot.block.size, moved, retired)


class _InSlot:
    __slots__ = ("dtype", "shape", "start", "tensor")

    def __init__(self, start: int, shape: tuple[int, ...], dtype: str, tensor: bool) -> None:
        self.start, self.shape, self.dtype, self.tensor = start, shape, dtype, tensor

    def __reduce__(self) -> Any:
        return _InSlot, (self.start, self.shape, self.dtype, self.tensor)


def _plain(kind: type, entries: list[tuple[Any, Any]]) -> Any:
    return [value for _, value in entries] if kind is list else dict(entries)


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


def _unpack(kind: type, pid: int, name: str, size: int, entries: list[tuple[Any, Any]], retired: list[str]) -> Any:
    lease = Lease(_mapping(pid, name, size, retired))
    values = []
    for key, value in entries:
        if isinstance(value, _InSlot):
            array = slot_array(lease, value.start, value.shape, value.dtype)
            value = torch.from_numpy(array) if value.tensor else array
        values.append((key, value))
    return _plain(kind, values)


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
        """Unmap; unlink the name unless the main process already did."""
        self.block.close()
        unlink_slot(self.block.name)


class _WorkerSlots:
    """One worker's slots, unlinked when the worker exits."""

    def __init__(self) -> None:
        self.slots: list[_Slot] = []
        self.retired: list[str] = []
        self.pid = os.getpid()
        self.created = 0
        util.Finalize(self, self.close, exitpriority=20)
        sweep_dead_slots(min_age=60)  # left by workers of earlier runs that were killed (a minute old at least)

    def acquire(self, nbytes: int) -> _Slot | None:
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
        for slot in self.slots:
            slot.close()
        self.slots = []


_worker_slots: _WorkerSlots | None = None


def _slots() -> _WorkerSlots:
    global _worker_slots
    if _worker_slots is None or _worker_slots.pid != os.getpid():
        _worker_slots = _WorkerSlots()
    return _worker_slots
