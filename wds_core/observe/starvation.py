"""How much of a training loop's time goes to waiting for its next item: :class:`Starvation` wraps what the loop
iterates and times each ``next()``.  Where the pipeline's own time goes is :mod:`.profiling`'s.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Starvation"]


class Starvation:
    """How much of the training loop's time goes to waiting for its next item: wrap what it iterates.

        watched = wds.Starvation(loader)  # a WebLoader, Loader, BatchIterator, tf.data dataset, any iterable
        for batch in watched:
            step(batch)
        watched.report()  # {"share": 0.31, "waiting_seconds": ..., "wall_seconds": ..., "items": ..., ...}

    ``share`` is the time spent blocked in ``next()`` over the wall time from the first ``next()`` to the
    last (or to now, while iterating): 0 when the loader always has the next item ready, near 1 when the
    loop only waits for data.  Each ``iter()`` starts a new epoch of counting (``epochs`` keeps the reports
    of those finished).  It costs two clock reads an item.
    """

    def __init__(self, iterable: Any) -> None:
        self.iterable = iterable
        self.waiting_seconds = 0.0
        self.first_wait = 0.0  # the wait for the first item (workers starting, the first shard opened)
        self.items = 0
        self.started: float | None = None
        self.ended: float | None = None
        self.epochs: list[dict[str, Any]] = []

    def __iter__(self) -> Any:
        if self.started is not None:
            self.epochs.append(self.report())
        self.waiting_seconds = self.first_wait = 0.0
        self.items = 0
        self.started = self.ended = None
        return self._watch(iter(self.iterable))

    def __len__(self) -> int:
        return len(self.iterable)

    def _watch(self, items: Any) -> Any:
        clock = time.perf_counter
        self.started = clock()
        while True:
            asked = clock()
            try:
                item = next(items)
            except StopIteration:
                self.ended = clock()
                self.waiting_seconds += self.ended - asked
                return
            got = clock()
            self.waiting_seconds += got - asked
            if self.items == 0:
                self.first_wait = got - asked
            self.items += 1
            yield item

    def report(self) -> dict[str, Any]:
        """``{"share", "waiting_seconds", "wall_seconds", "items", "first_wait_seconds", "share_after_first"}``
        of the epoch being iterated (or the last one); ``share_after_first`` leaves out the wait for the first
        item, when workers start.  Batches from ``wds_torch.to_device`` add ``device_feed`` (where preparing them
        spent its time: ``DeviceBatches.feed_report``) and ``device_split``, the share of each
        batch the workers cut on the host."""
        if self.started is None:
            return {"share": 0.0, "waiting_seconds": 0.0, "wall_seconds": 0.0, "items": 0,
                    "first_wait_seconds": 0.0, "share_after_first": 0.0}  # fmt: skip
        wall = (self.ended if self.ended is not None else time.perf_counter()) - self.started
        after = wall - self.first_wait
        report = {
            "share": self.waiting_seconds / wall if wall > 0 else 0.0,
            "waiting_seconds": self.waiting_seconds,
            "wall_seconds": wall,
            "items": self.items,
            "first_wait_seconds": self.first_wait,
            "share_after_first": (self.waiting_seconds - self.first_wait) / after if after > 0 else 0.0,
        }
        said = getattr(self.iterable, "split_report", None)  # batches fed to a device: what it cut, what the host
        split = said() if callable(said) else None
        if split is not None:
            report["device_split"] = split
        feed = getattr(self.iterable, "feed_report", None)  # and where their preparing spent its time
        if callable(feed):
            report["device_feed"] = feed()
        return report
