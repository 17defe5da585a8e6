"""Whether a process is alive: what the files, shared memory and workers left by a process that ended are told
apart by (a stale shard being written, a loader slot, a worker's parent)."""

from __future__ import annotations

import os

__all__ = ["process_running"]


def process_running(pid: int) -> bool:
    """Whether a process with this id exists and has not ended (one of another user counts; a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child that died but was not reaped yet still answers the signal
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
