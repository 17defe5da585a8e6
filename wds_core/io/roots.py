"""Files reached from the root, never by name: every path beneath a set of root folders is walked from an open
descriptor of its root, one component at a time, and acted on through the descriptor of its last folder.

This is what Go's ``os.Root`` and Linux's ``openat2(RESOLVE_BENEATH)`` do, written with the ``dir_fd`` calls
Python has: a folder is opened with ``O_NOFOLLOW`` relative to the one before it, so no name is resolved by the
kernel across a symbolic link; a link met on the way is read (``readlink``) and its target, taken against the
folders actually walked, is walked again from the root that holds it.  A link that leads out of every root is
refused, as is any link at all where links are not followed (:class:`Roots` with ``follow_links=False``: a
folder a command writes, where a link it did not make is an attack).  There is no check of a name followed by a
use of that name: a link swapped in at any moment is met by the walk itself.

The file gate (:mod:`.files`) reaches every local path this way in secure mode (the roots are the allowed ones),
and ``wds extract`` its destination in any mode.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator, Sequence

from ..errors import SpecError

__all__ = ["Roots"]

_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's path walk: a loop of links ends in ELOOP


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _parts(path: str, root: str) -> list[str]:
    return [part for part in path[len(root) :].split(os.sep) if part not in ("", ".")]


def _refused(action: str, what: str, why: str) -> SpecError:
    return SpecError(f"refusing to {action} {what}: {why}")


class Roots:
    """Root folders that paths are reached beneath (see the module doc).

    ``roots``: absolute folders (resolved: their own links are the caller's); ``follow_links``: whether a link
    beneath them is followed while it leads to a place beneath one of them (``False``: every link is refused);
    ``refusal(action, what, why)``: the error of a refusal; ``open_root(root)``: a descriptor of a root (default:
    the folder opened by its name; a root that is itself beneath other roots is opened beneath those).
    """

    def __init__(
        self,
        roots: Sequence[str],
        follow_links: bool = True,
        refusal: Callable[[str, str, str], Exception] = _refused,
        open_root: Callable[[str], int] | None = None,
    ) -> None:
        self.roots = sorted({os.path.normpath(root) for root in roots}, key=len, reverse=True)  # the deepest first
        self.follow_links = follow_links
        self.refusal = refusal
        self.open_root = open_root or (lambda root: os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))

    def root_of(self, path: str) -> str | None:
        """The root ``path`` (absolute, normalised) is beneath, by its name."""
        return next((root for root in self.roots if _under(path, root)), None)

    def _locate(self, path: str, action: str) -> tuple[str, list[str]]:
        lexical = os.path.abspath(path)
        root = self.root_of(lexical)
        if root is None:  # named through a link to a root (/data -> /mnt/data): the walk below still decides
            lexical = os.path.realpath(lexical)
            root = self.root_of(lexical)
        if root is None:
            where = ", ".join(self.roots) if self.roots else "none is set"
            raise self.refusal(action, f"the local path {path}", f"it is not under an allowed root ({where})")
        return root, _parts(lexical, root)

    @contextlib.contextmanager
    def reach(
        self, path: str, action: str, *, follow_last: bool = True, make_folders: bool = False, folder: bool = False
    ) -> Iterator[tuple[int, str | None]]:
        """``(descriptor of the last folder, name)`` of ``path``, walked from its root; the descriptor is closed
        after the block.  ``folder``: the whole path is a folder, opened itself (the name is ``None``; so it is
        when the path is a root).  ``follow_last``: a link at the last name is followed (beneath the roots) rather
        than acted on itself; ``make_folders``: missing folders on the way are made (as ``os.makedirs``)."""
        fd, name = self.open(path, action, follow_last=follow_last, make_folders=make_folders, folder=folder)
        try:
            yield fd, name
        finally:
            os.close(fd)

    def open(
        self, path: str, action: str, *, follow_last: bool = True, make_folders: bool = False, folder: bool = False
    ) -> tuple[int, str | None]:
        """What :meth:`reach` gives, the descriptor left for the caller to close."""
        return self._walk(path, action, follow_last, make_folders, folder)

    def _walk(self, path: str, action: str, follow_last: bool, make: bool, folder: bool) -> tuple[int, str | None]:
        root, parts = self._locate(path, action)
        links = 0
        while True:
            try:
                return self._descend(self.open_root(root), parts, make, folder, follow_last)
            except _Link as met:
                link = os.path.join(root, *met.walked, met.name)
                if not self.follow_links:
                    why = f"{link} is a symbolic link (below a folder wds writes, no link it did not make is followed)"
                    raise self.refusal(action, f"the local path {path}", why) from None
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
                target = os.path.normpath(os.path.join(root, *met.walked, met.target))  # an absolute target is itself
                found = self.root_of(target)
                if found is None:
                    why = f"the symbolic link {link} on the way leads out of the allowed roots"
                    raise self.refusal(action, f"the local path {path}", why) from None
                root, parts = found, _parts(target, found) + met.rest

    def _descend(
        self, fd: int, parts: list[str], make: bool, folder: bool, follow_last: bool
    ) -> tuple[int, str | None]:
        """Walk ``parts`` from the folder ``fd``, which it takes over: the last folder's descriptor and the name in it
        (closed on the way out of an error, or of a link met: :class:`_Link`)."""
        walked: list[str] = []
        try:
            for number, name in enumerate(parts if folder else parts[:-1]):
                try:
                    inner = self._open_folder(fd, name, make)
                except OSError as exn:
                    target = _link(fd, name) if exn.errno in (errno.ELOOP, errno.ENOTDIR) else None
                    if target is None:
                        raise
                    raise _Link(walked, name, target, parts[number + 1 :]) from None
                os.close(fd)
                fd = inner
                walked.append(name)
            if folder or not parts:
                return fd, None
            if follow_last:
                target = _link(fd, parts[-1])
                if target is not None:
                    raise _Link(walked, parts[-1], target, [])
        except BaseException:
            os.close(fd)
            raise
        return fd, parts[-1]

    @staticmethod
    def _open_folder(fd: int, name: str, make: bool) -> int:
        try:
            return os.open(name, _FOLDER, dir_fd=fd)
        except FileNotFoundError:
            if not make:
                raise
        try:
            os.mkdir(name, 0o777, dir_fd=fd)
        except FileExistsError:
            pass  # made meanwhile by another writer (or a link swapped in: the open says which)
        return os.open(name, _FOLDER, dir_fd=fd)


class _Link(Exception):
    """A symbolic link met on a walk: the folders walked to it, its name, its target and the parts after it."""

    def __init__(self, walked: list[str], name: str, target: str, rest: list[str]) -> None:
        super().__init__(name)
        self.walked, self.name, self.target, self.rest = walked, name, target, rest


def _link(fd: int, name: str) -> str | None:
    """The target of ``name`` in the folder ``fd`` when it is a symbolic link, else ``None``."""
    try:
        return os.readlink(name, dir_fd=fd)
    except OSError:
        return None
