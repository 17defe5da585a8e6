"""One writer per output pattern: a lock file beside the shards, held while a ``ShardWriter`` runs.

Two writers given the same pattern (``out-%06d.tar``) would each write
``out-000000.tar``, ``out-000001.tar``... and each rename its own over the
other's: half of the samples vanish without an error.  :class:`PatternLock`
makes the second writer fail at once instead, naming the process that holds
the pattern.  The lock is ``flock`` on a hidden file in the shards' folder
(``.out-_06d.tar.lock``, holding the writer's pid): the system releases it
when its process ends, however it ends, so a killed writer never blocks the
next one.  Remote patterns (``s3://...``) have no lock: object stores offer
no such primitive.
"""

from __future__ import annotations

import fcntl
import os
import weakref

from ..errors import SpecError

__all__ = ["PatternLock"]


class PatternLock:
    """The lock on the shards of ``pattern`` (a local path pattern), taken when made; :meth:`release` ends it."""

    def __init__(self, pattern: str) -> None:
        folder, name = os.path.split(os.path.abspath(pattern))
        self.path = os.path.join(folder, "." + name.replace("%", "_") + ".lock")
        os.makedirs(folder, exist_ok=True)
        while True:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(self.fd, 32, 0).decode("ascii", "replace").strip() or "?"
                os.close(self.fd)
                self.fd = -1
                raise SpecError(
                    f"another writer (process {holder}) is writing shards of {pattern!r}: two writers of one "
                    f"pattern would write over each other's shards; give each its own pattern (lock: {self.path})"
                ) from None
            if self._still_there():
                break
            os.close(self.fd)  # its holder removed it as this one opened it: take the new one
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)
        self._finalizer = weakref.finalize(self, _release, self.fd, self.path)  # at exit, or when dropped

    def release(self) -> None:
        """Let the pattern go (and remove the lock file)."""
        self._finalizer()
        self.fd = -1

    def _still_there(self) -> bool:
        try:
            named, opened = os.stat(self.path), os.fstat(self.fd)
        except FileNotFoundError:
            return False
        return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _release(fd: int, path: str) -> None:
    try:
        if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass
    os.close(fd)  # closing releases the lock
