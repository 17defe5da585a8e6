"""Moving large numpy arrays and bytes from worker processes to the main process through reused shared memory.

A *slot* is a shared-memory block whose first :data:`HEADER` bytes are a
header; byte 0 is 1 while the main process holds arrays in it.  A worker
writes an item's arrays into a free slot and sends only a small pickle that
names their places; the main process wraps them as arrays *viewing* the slot
(no copy) and the slot is handed back (the flag cleared) when the last of
those arrays, or of views of them, is freed.  Slots are reused, so after the
first items no page is faulted in again: a 12.5 MB batch costs one copy in
the worker instead of a pickle, two pipe copies and an unpickle.  A worker
whose slots are all held (the consumer keeps items) sends items in the
ordinary pickle; nothing ever waits for a slot.

Large ``bytes`` (a batch of undecoded images or audio) go through the slot
too, and the main process copies each out of it as it unpickles the item (a
``bytes`` owns its memory): one copy from shared memory instead of a pickle,
two pipe copies and an unpickle, and the slot is free again at once.

:class:`wds_core.Loader` owns its slots (it creates and unlinks them);
``wds_torch.transfer`` uses the same views and leases for slots created by
DataLoader workers.
"""

from __future__ import annotations

import io
import itertools
import mmap
import os
import pickle
import re
import secrets
import time
import weakref
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from ..dist import process_running

__all__ = [
    "HEADER",
    "MIN_BYTES_OBJECT",
    "Lease",
    "SlotPicking",
    "SlotReader",
    "SlotUnpicking",
    "SlotWriter",
    "create_slots",
    "map_slot",
    "slot_array",
    "slot_footprint",
    "sweep_dead_slots",
    "unlink_slot",
    "without_views",
]

HEADER = 64
ALIGN = 64
_POPULATE = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)

try:  # what SharedMemory calls, without registering with the resource tracker
    from _posixshmem import shm_open as _shm_open
    from _posixshmem import shm_unlink as _shm_unlink
except ImportError:  # pragma: no cover - not POSIX
    _shm_open = _shm_unlink = None

HAVE_SLOTS = _shm_open is not None


def create_slots(count: int, size: int) -> list[shared_memory.SharedMemory]:
    """``count`` new slots; none is left behind when creating one fails (``/dev/shm`` full...).

    They are named as the DataLoader workers' are (``wds_<pid>_<n>_<hex>``), so that the slots of a
    process killed before it could unlink them are found and swept by :func:`sweep_dead_slots`.
    """
    blocks: list[shared_memory.SharedMemory] = []
    try:
        for _ in range(count):
            name = slot_name(os.getpid(), next(_created))
            blocks.append(shared_memory.SharedMemory(name=name, create=True, size=HEADER + size))
    except BaseException:
        for block in blocks:
            block.close()
            block.unlink()
        raise
    return blocks


SHM_FOLDER = "/dev/shm"
_SLOT = re.compile(r"wds_(\d+)_\d+_[0-9a-f]{8}")  # wds_<pid>_<n>_<hex>: Loader and DataLoader worker slots
_created = itertools.count()


def slot_name(pid: int, number: int) -> str:
    """The name of slot ``number`` made by process ``pid``: ``wds_<pid>_<n>_<hex>`` (the hex keeps it unique)."""
    return f"wds_{pid}_{number}_{secrets.token_hex(4)}"


def slot_owner(name: str) -> int | None:
    """The pid that made the slot ``name`` (see :func:`slot_name`), or None for another name."""
    matched = _SLOT.fullmatch(name)
    return None if matched is None else int(matched[1])


def sweep_dead_slots(pids: Any = None, min_age: float = 0.0) -> list[str]:
    """Unlink the slots of processes that are gone (Loaders, DataLoader workers); the names removed.

    Worker slots are named ``wds_<pid>_<n>_<hex>``; a worker that was killed
    before the main process saw its last slots leaves them.  ``pids`` limits the
    sweep to those workers (ones this process knew); ``min_age`` (seconds) spares
    younger names, for a ``/dev/shm`` shared with processes this one cannot see.
    """
    try:
        entries = os.listdir(SHM_FOLDER)
    except OSError:
        return []
    wanted = None if pids is None else set(pids)
    removed = []
    for entry in entries:
        owner = slot_owner(entry)
        if owner is None or (wanted is not None and owner not in wanted) or process_running(owner):
            continue
        if min_age:
            try:
                if time.time() - os.stat(os.path.join(SHM_FOLDER, entry)).st_mtime < min_age:
                    continue
            except OSError:
                continue
        unlink_slot(entry)
        removed.append(entry)
    return removed


def map_slot(name: str, size: int, unlink: bool = False, populate: bool = False) -> mmap.mmap:
    """A mapping of the slot ``name`` of its own (freed with the last array viewing it).

    ``populate`` maps every page up front (one call instead of a fault per
    page), for a slot the worker has just filled; never for a large slot that
    is mostly unused, whose pages it would allocate.
    """
    fd = _shm_open("/" + name, os.O_RDWR, mode=0o600)
    try:
        return mmap.mmap(fd, size, flags=_POPULATE if populate else mmap.MAP_SHARED)
    finally:
        os.close(fd)
        if unlink:
            unlink_slot(name)


def unlink_slot(name: str) -> None:
    """Remove the name of a slot created without the resource tracker (gone already is fine)."""
    try:
        _shm_unlink("/" + name)
    except FileNotFoundError:
        pass


def aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class Lease:
    """The main process's hold on one item's arrays in a slot; the last one freed clears the slot's flag."""

    def __init__(self, view: mmap.mmap) -> None:
        self.view, self.live = view, 0

    def release(self) -> None:
        self.live -= 1
        self.settle()

    def settle(self) -> None:
        """After the item is unpickled: the slot goes back at once when no array views it (it held only bytes)."""
        if self.live == 0:
            self.view[0] = 0


def slot_array(lease: Lease, start: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """An array viewing ``lease``'s slot at data offset ``start``, counted in the lease."""
    array = np.ndarray(shape, np.dtype(dtype), buffer=lease.view, offset=HEADER + start)
    lease.live += 1
    weakref.finalize(array, lease.release)
    return array


MIN_BYTES_OBJECT = 1 << 10  # a bytes object this large travels in the slot (copied out at once: no view)


class SlotPicking:
    """What a pickler moves into a slot (``persistent_id``): numpy arrays of ``min_bytes`` or more and ``bytes`` of
    :data:`MIN_BYTES_OBJECT` or more, written at ``used`` of the slot ``view`` while they fit."""

    view: Any
    used: int
    min_bytes: int

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is bytes or kind is memoryview:  # a view (zero_copy reading) arrives as bytes, as pickling gives
            size = obj.nbytes if kind is memoryview else len(obj)
            if size < MIN_BYTES_OBJECT or HEADER + self.used + size > len(self.view):
                return None
            start, self.used = self.used, self.used + size
            self.view[HEADER + start : HEADER + self.used] = obj if kind is bytes else obj.cast("B")
            return ("wds-bytes", start, size)
        array = self.slottable(obj)
        if array is None or array.nbytes < self.min_bytes:
            return None
        start = aligned(self.used)
        if HEADER + start + array.nbytes > len(self.view):
            return None
        target = np.ndarray(array.shape, array.dtype, buffer=self.view, offset=HEADER + start)
        np.copyto(target, array, casting="no")
        self.used = start + array.nbytes
        return ("wds-slot" if array is obj else "wds-tensor", start, array.shape, array.dtype.str)

    def slottable(self, obj: Any) -> np.ndarray | None:
        """``obj`` as an array to copy into the slot, or None to pickle it as usual."""
        return obj if type(obj) is np.ndarray and not obj.dtype.hasobject else None

    def reducer_override(self, obj: Any) -> Any:
        """A memoryview that stays in the pickle (small, or no room in the slot) is pickled as its bytes."""
        return (bytes, (obj.tobytes(),)) if type(obj) is memoryview else NotImplemented


def without_views(value: Any, depth: int = 3) -> Any:
    """``value`` with its memoryviews (zero_copy reading) as bytes, inside lists, tuples and dicts ``depth``
    deep: what an item or batch pickled without a slot must be, since a memoryview cannot be pickled.  ``value``
    itself when it holds none (looked for first, without building anything: this runs on every item)."""
    return _rebuilt(value, depth) if _holds_view(value, depth) else value


def _holds_view(value: Any, depth: int) -> bool:
    if type(value) is memoryview:
        return True
    if isinstance(value, dict):
        values: Any = value.values()
    elif isinstance(value, (list, tuple)):
        values = value
    else:
        return False
    for item in values:
        if type(item) is memoryview:
            return True
        if depth > 1 and isinstance(item, (list, tuple, dict)) and _holds_view(item, depth - 1):
            return True
    return False


def _rebuilt(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is memoryview:
        return value.tobytes()
    if depth == 0 or not isinstance(value, (list, tuple, dict)):
        return value
    if isinstance(value, dict):
        items = {k: _rebuilt(v, depth - 1) for k, v in value.items()}
        return items if kind is dict else kind(items)  # type: ignore[call-arg]
    parts = [_rebuilt(v, depth - 1) for v in value]
    if kind is list:
        return parts
    return kind(*parts) if hasattr(value, "_fields") else kind(parts)  # a named tuple, or another tuple


def slot_footprint(value: Any, min_bytes: int, depth: int = 3) -> int:
    """At most how many slot bytes pickling ``value`` with :class:`SlotPicking` takes: its large arrays (numpy, or
    anything with ``nbytes`` and ``numpy()``, a tensor) and bytes, inside lists, tuples and dicts ``depth`` deep."""
    if type(value) is bytes or type(value) is memoryview:
        size = value.nbytes if type(value) is memoryview else len(value)
        return size if size >= MIN_BYTES_OBJECT else 0
    if isinstance(value, (list, tuple, dict)):
        if depth == 0:
            return 0
        values = value.values() if isinstance(value, dict) else value
        return sum(slot_footprint(item, min_bytes, depth - 1) for item in values)
    nbytes = getattr(value, "nbytes", 0)
    return nbytes + ALIGN if isinstance(nbytes, int) and nbytes >= min_bytes else 0


class SlotUnpicking:
    """The other side of :class:`SlotPicking`: arrays viewing the slot of ``lease``, bytes copied out of it."""

    lease: Lease

    def persistent_load(self, pid: Any) -> Any:
        tag, start, *rest = pid
        if tag == "wds-bytes":
            return self.lease.view[HEADER + start : HEADER + start + rest[0]]
        if tag in ("wds-slot", "wds-tensor"):
            return self.array(tag, slot_array(self.lease, start, *rest))
        raise pickle.UnpicklingError(f"unknown persistent id {tag!r}")

    def array(self, tag: str, array: np.ndarray) -> Any:
        return array

    def take(self) -> Any:
        """The item; its slot is handed back at once when nothing views it (only bytes were in it)."""
        item = self.load()  # type: ignore[attr-defined]
        self.lease.settle()
        return item


class _SlotPickler(SlotPicking, pickle.Pickler):
    def __init__(self, file: Any, view: memoryview, min_bytes: int) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.view, self.used, self.min_bytes = view, 0, min_bytes


class SlotWriter:
    """The worker side: ``encode(item)`` -> (pickle bytes, slot used or -1).

    Arrays under ``min_bytes`` stay in the pickle.
    """

    def __init__(self, names: list[str], min_bytes: int = 1 << 16) -> None:
        self.blocks = [shared_memory.SharedMemory(name=name) for name in names]
        self.min_bytes = min_bytes

    def _buf(self, slot: int) -> memoryview:
        buf = self.blocks[slot].buf
        if buf is None:  # pragma: no cover - only after close()
            raise RuntimeError("the shared-memory slot is closed")
        return buf

    def _free_slot(self) -> int:
        for slot in range(len(self.blocks)):
            if self._buf(slot)[0] == 0:
                return slot
        return -1

    def encode(self, item: Any) -> tuple[bytes, int]:
        slot = self._free_slot()
        if slot < 0:
            return pickle.dumps(without_views(item), protocol=pickle.HIGHEST_PROTOCOL), -1
        buffer = io.BytesIO()
        pickler = _SlotPickler(buffer, self._buf(slot), self.min_bytes)
        pickler.dump(item)
        if pickler.used == 0:
            return buffer.getvalue(), -1
        self._buf(slot)[0] = 1
        return buffer.getvalue(), slot

    def close(self) -> None:
        for block in self.blocks:
            block.close()


class _SlotUnpickler(SlotUnpicking, pickle.Unpickler):
    def __init__(self, file: Any, lease: Lease) -> None:
        super().__init__(file)
        self.lease = lease


class SlotReader:
    """The main side: decode a worker's message into arrays viewing its slot."""

    def __init__(self, blocks: list[shared_memory.SharedMemory]) -> None:
        self.blocks = blocks
        self.views: dict[int, mmap.mmap] = {}

    def decode(self, payload: bytes, slot: int) -> Any:
        if slot < 0:
            return pickle.loads(payload)
        if slot not in self.views:
            self.views[slot] = map_slot(self.blocks[slot].name, self.blocks[slot].size)
        return _SlotUnpickler(io.BytesIO(payload), Lease(self.views[slot])).take()

    def close(self) -> None:
        """Unlink the slots; arrays still viewing one keep its pages until they are freed."""
        self.views = {}
        for block in self.blocks:
            block.close()
            try:
                block.unlink()
            except FileNotFoundError:
                pass
