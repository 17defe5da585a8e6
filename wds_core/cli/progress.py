"""A one-line progress report on stderr when it is a terminal; in a log, a plain line every N seconds if asked."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress", "human_bytes"]


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


class Progress:
    """``update(done_items, samples, nbytes)``; redraws at most 10 times a second.

    When the stream is not a terminal (a job's log), it is quiet unless ``every`` is given: then one
    line every ``every`` seconds, and the last.
    """

    def __init__(
        self, total: int, what: str, stream: TextIO | None = None, force: bool = False, every: float | None = None
    ) -> None:
        self.stream = stream or sys.stderr
        self.redraw = force or self.stream.isatty()
        self.every = 0.1 if self.redraw else every
        self.enabled = self.every is not None
        self.total, self.what = total, what
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, done: int, samples: int, nbytes: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and now - self.last < (self.every or 0.1):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        rate = nbytes / elapsed
        eta = (self.total - done) * elapsed / done if done else 0.0
        head = f"{self.what} {done}/{self.total}, " if self.total else ""  # total 0: not known in advance
        tail = f", ETA {eta:.0f} s" if self.total else f", {elapsed:.0f} s"
        line = f"{head}{samples:,} samples, {human_bytes(nbytes)}, {human_bytes(rate)}/s{tail}"
        self.stream.write(f"\r{line}   " + ("\n" if final else "") if self.redraw else line + "\n")
        self.stream.flush()
