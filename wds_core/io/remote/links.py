"""What one connection to a host gives, measured from the ranges read, and the range size that keeps it busy.

A range costs a round trip before its first byte (``latency``) and then arrives at the connection's speed
(``bandwidth``); a range of ``L`` bytes keeps its connection busy ``L / bandwidth`` of ``latency + L / bandwidth``.
Small ranges waste connections and requests (stores charge and rate-limit by the request), large ones hold memory
and delay the reader.  :class:`Link` keeps the last answers' time to first byte and bytes a second for one host
(per process), and :meth:`Link.target` is ``GROW`` times their product (the bytes in flight on one connection
over one round trip), a range whose round trip is a seventh of its time.
The readers' windows (:mod:`.readahead`) grow their ranges toward it once two answers are timed, between
``ReadAhead.range_bytes`` and ``ReadAhead.max_range``.
"""

from __future__ import annotations

import statistics
from collections import deque

from ..forklocks import ForkSafeLock

__all__ = ["GROW", "LINKS", "Link", "link_for"]

GROW = 6  # a range is this many bytes-in-flight-over-a-round-trip: the round trip is then 1/7 of its time
_MEASURED = 64 << 10  # a body at least this large says the connection's speed (a smaller one is mostly latency)


class Link:
    """The last answers from one host: time to the first byte, and the speed of bodies large enough to say it."""

    def __init__(self) -> None:
        self.latencies: deque[float] = deque(maxlen=16)
        self.speeds: deque[float] = deque(maxlen=16)
        self.lock = ForkSafeLock()

    def record(self, nbytes: int, first_byte: float, body: float) -> None:
        """An answer of ``nbytes`` whose first byte came ``first_byte`` seconds after the request, and whose body
        took ``body`` seconds more."""
        with self.lock:
            self.latencies.append(max(first_byte, 0.0))
            if nbytes >= _MEASURED and body > 0:
                self.speeds.append(nbytes / body)

    def target(self, least: int, most: int) -> int | None:
        """The range size that keeps one connection busy, within ``[least, most]``; ``None`` until timed."""
        with self.lock:
            if len(self.latencies) < 2 or not self.speeds:
                return None
            latency, speed = statistics.median(self.latencies), statistics.median(self.speeds)
        return int(min(most, max(least, GROW * latency * speed)))


LINKS: dict[tuple[str, str, int], Link] = {}
_links_lock = ForkSafeLock()


def link_for(scheme: str, host: str, port: int) -> Link:
    """The process's :class:`Link` to ``scheme://host:port``."""
    key = (scheme, host.lower(), port)
    link = LINKS.get(key)
    if link is None:
        with _links_lock:
            link = LINKS.setdefault(key, Link())
    return link
