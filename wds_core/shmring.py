"""Moving large numpy arrays from Loader workers to the main process through reused shared memory.

The main process creates, per worker, a few shared-memory *slots* and owns
them (it unlinks them when the epoch ends, whatever happened to the worker).
A worker pickles each item with its large arrays written into a free slot
instead of the pickle; the main process copies them out and hands the slot
back.  Slots are reused, so after the first items no page is faulted in again:
a 12.5 MB batch costs one copy on each side instead of a pickle, two pipe
copies and an unpickle.  Arrays that do not fit travel in the pickle.
"""

from __future__ import annotations

import io
import pickle
from multiprocessing import shared_memory
from typing import Any

import numpy as np

__all__ = ["SlotReader", "SlotWriter", "create_slots"]

MIN_ARRAY_BYTES = 1 << 16  # smaller arrays are cheaper in the pickle
_ALIGN = 64


def create_slots(count: int, size: int) -> list[shared_memory.SharedMemory]:
    return [shared_memory.SharedMemory(create=True, size=size) for _ in range(count)]


def _attach(name: str) -> shared_memory.SharedMemory:
    # Attaching registers the name with the resource tracker the worker shares with the main process
    # (a set: no second entry); the main process unlinks and unregisters it.
    return shared_memory.SharedMemory(name=name)


class _SlotPickler(pickle.Pickler):
    def __init__(self, file: Any, view: memoryview) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.view, self.used = view, 0

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is not np.ndarray or obj.nbytes < MIN_ARRAY_BYTES or obj.dtype.hasobject:
            return None
        start = -(-self.used // _ALIGN) * _ALIGN
        end = start + obj.nbytes
        if end > len(self.view):
            return None
        target = np.ndarray(obj.shape, obj.dtype, buffer=self.view, offset=start)
        np.copyto(target, obj, casting="no")
        self.used = end
        return ("wds-slot", start, obj.shape, obj.dtype.str)


class SlotWriter:
    """The worker side: ``encode(item, slot)`` -> pickle bytes, with large arrays placed in ``slot``."""

    def __init__(self, names: list[str]) -> None:
        self.blocks = [_attach(name) for name in names]

    def encode(self, item: Any, slot: int) -> tuple[bytes, bool]:
        """The pickled item, and whether it placed anything in the slot (else the slot stays free)."""
        buffer = io.BytesIO()
        pickler = _SlotPickler(buffer, self.blocks[slot].buf)
        pickler.dump(item)
        return buffer.getvalue(), pickler.used > 0

    def close(self) -> None:
        for block in self.blocks:
            block.close()


class _SlotUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, view: memoryview) -> None:
        super().__init__(file)
        self.view = view

    def persistent_load(self, pid: Any) -> Any:
        tag, start, shape, dtype = pid
        if tag != "wds-slot":
            raise pickle.UnpicklingError(f"unknown persistent id {tag!r}")
        return np.ndarray(shape, np.dtype(dtype), buffer=self.view, offset=start).copy()


class SlotReader:
    """The main side: decode a worker's message, copying its arrays out of the slot."""

    def __init__(self, blocks: list[shared_memory.SharedMemory]) -> None:
        self.blocks = blocks

    def decode(self, payload: bytes, slot: int) -> Any:
        if slot < 0:
            return pickle.loads(payload)
        return _SlotUnpickler(io.BytesIO(payload), self.blocks[slot].buf).load()

    def close(self) -> None:
        for block in self.blocks:
            block.close()
            try:
                block.unlink()
            except FileNotFoundError:
                pass
