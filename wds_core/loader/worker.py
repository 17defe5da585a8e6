"""The worker side of :class:`~wds_core.loader.main.Loader`: what each worker process runs.

A worker iterates its own copy of the pipeline one epoch per command,
sends its items (large arrays through its shared-memory slots,
:mod:`wds_core.loader.shm`) and, every ``snapshot_every`` items, its state;
an error goes back with its traceback.  It watches the process that
started it and ends itself when that one is gone (:func:`watch_parent`).
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
import traceback
from typing import Any

from ..io.processes import process_running
from .shm import SlotWriter, unlink_slot, without_views

__all__ = ["watch_parent", "worker_main"]

PARENT_POLL = 0.5  # seconds between a worker's checks that the process that started it is alive


def worker_main(
    dataset: Any,
    worker: int,
    num_workers: int,
    node: tuple[int, int] | None,
    commands: Any,
    out: Any,
    stop: Any,
    snapshot_every: int,
    slots: list[str] | None,
    parent: int = 0,
) -> None:
    """Run one epoch per command ``(generation, epoch, start)`` until the command ``None``."""
    from .. import dist

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent:
        threading.Thread(target=watch_parent, args=(parent, slots), daemon=True, name="wds-parent-watch").start()
    send = _ItemSender(out, slots)
    dist.set_worker_info_provider(lambda: (worker, num_workers))
    if node is not None:
        dist.set_node_info_provider(lambda: node)
    while (command := commands.get()) is not None:
        generation, epoch, start = command
        send.generation = generation
        try:
            if start and start.get("state") is not None:
                dataset.load_state_dict(start["state"])
            elif hasattr(dataset, "set_epoch"):
                dataset.set_epoch(epoch)
            items = iter(dataset)
            for _ in range(start.get("skip", 0) if start else 0):
                next(items, None)
            count = 0
            position = getattr(dataset, "position", None)  # balanced pipelines: where each item leaves the epoch
            while not stop.is_set():
                if count % snapshot_every == 0:
                    out.put((generation, "state", _state_or_reason(dataset)))
                try:
                    item = next(items)
                except StopIteration:
                    break
                at = position() if position is not None else None
                if at is None:
                    position = None
                send(item, at)
                count += 1
            out.put((generation, "end", None))
        except BaseException as exn:  # noqa: BLE001 - everything goes back to the main process
            text = traceback.format_exc()
            try:
                payload = pickle.dumps(exn)
            except Exception:
                payload = None
            out.put((generation, "error", (payload, repr(exn), text)))
        items = None  # type: ignore[assignment]  # close the epoch's generators before waiting


def watch_parent(parent: int, slots: list[str] | None) -> None:
    """Exit as soon as the process that started this worker is gone.

    A main process killed outright (the OOM killer's SIGKILL) runs none of its
    cleanup: its daemonic workers would live on, blocked on their queues, and
    its shared-memory slots would stay.  So each worker looks every
    :data:`PARENT_POLL` seconds, and when its parent is gone it unlinks the
    slots it wrote to (named by the parent) and ends itself.
    """
    while True:
        time.sleep(PARENT_POLL)
        if not process_running(parent):
            for name in slots or ():
                unlink_slot(name)
            os._exit(1)


class _ItemSender:
    """Puts items on the worker's queue, large arrays through its shared-memory slots when it has them."""

    def __init__(self, out: Any, slots: list[str] | None) -> None:
        self.out, self.generation = out, 0
        self.writer = SlotWriter(slots) if slots else None

    def __call__(self, item: Any, position: Any = None) -> None:
        value = (without_views(item), -1) if self.writer is None else self.writer.encode(item)
        if position is None:
            self.out.put((self.generation, "item", value))
        else:
            self.out.put((self.generation, "item@", (value, position)))


def _state_or_reason(dataset: Any) -> Any:
    try:
        return {"state": dataset.state_dict()}
    except Exception as exn:
        return {"reason": f"{type(exn).__name__}: {exn}"}
