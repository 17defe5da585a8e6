"""Locks and events made anew in a forked child: every one that a background thread takes is one of these.

A DataLoader forks its workers while the parent's threads stream (the I/O pool's requests, a prefetching thread,
the profiler): a lock one of them held at that instant is held for ever in the child, whose first remote read
then blocks for ever (it happened about once in 10 to 100 forks, on the engine's bookkeeping lock).  So the
package makes no ``threading.Lock``, ``RLock``, ``Condition`` or ``Event`` of its own: it makes a
:class:`ForkSafeLock` or a :func:`fork_safe_event`, each released (an event's own lock; its flag stays) in a
forked child by :func:`os.register_at_fork`, and an architecture test keeps it that way.  A child starts with
none of its parent's threads, so nothing there can be relying on what a parent's thread held.
"""

from __future__ import annotations

import _thread
import os
import threading
import weakref

__all__ = ["ForkSafeLock", "fork_safe_event"]

_LOCKS: weakref.WeakSet[ForkSafeLock] = weakref.WeakSet()
_EVENTS: weakref.WeakSet[threading.Event] = weakref.WeakSet()


class ForkSafeLock(_thread.RLock):  # type: ignore[misc, valid-type]
    """A re-entrant lock (``threading.RLock``: a plain lock's users never re-enter it, so it serves them too)
    that a forked child finds released, whoever held it in the parent.  As fast as an ``RLock``: it is one."""

    def __init__(self) -> None:
        super().__init__()
        _LOCKS.add(self)


def fork_safe_event() -> threading.Event:
    """A ``threading.Event`` whose lock a forked child finds released (set or not, as it was)."""
    event = threading.Event()
    _EVENTS.add(event)
    return event


def _renew_in_child() -> None:
    for lock in list(_LOCKS):
        lock._at_fork_reinit()  # type: ignore[attr-defined]
    for event in list(_EVENTS):
        event._at_fork_reinit()  # type: ignore[attr-defined]


os.register_at_fork(after_in_child=_renew_in_child)
