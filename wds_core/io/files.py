"""The one gate for local files: every file wds opens, creates, renames, lists or removes goes through here.

Shards, caches (the shard cache, the drop-in's ``FileCache`` and wids's downloads), indexes, descriptors, the
commands' tree walks and outputs, tenbin files, metrics and trace logs: whatever the package does with a local
file, it does with these functions, and an architecture test (``tests/core/test_architecture.py``) keeps raw file
calls (``open``, ``os.replace``, ``shutil``, ``tempfile``...) out of every other module.  So secure mode
(:mod:`.secure`) holds for a feature written tomorrow as it does for those of today.

In secure mode no path is checked by name and then used: every operation (open, create, ``makedirs``, ``touch``,
``stat``, ``exists``, ``listdir``, ``walk``, ``glob``, rename, remove) walks from an open descriptor of the allowed
root that holds the path, one component at a time, following a symbolic link only while it stays beneath the roots
(:class:`~.roots.Roots`), and acts through the descriptor of the last folder (``dir_fd=``, ``O_NOFOLLOW``,
``follow_symlinks=False``): a link swapped in at any moment is met by the walk, never followed out.  A file
created never follows a link.

Outside secure mode these are the plain system calls.  Temporary files and folders of the package's own (a
command's standard error, ``wds demo``'s shards) are made by :func:`temporary_file` and
:func:`temporary_directory`, in the system's temporary folder: their names come from code, never from data.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob as _glob
import os
import shutil
import stat as _stat
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import SpecError
from .partials import temporary_name
from .roots import Roots
from .secure import refusal, secure_mode, secure_roots

__all__ = [
    "Destination",
    "append",
    "copy_stream",
    "escape",
    "exists",
    "getsize",
    "glob",
    "isdir",
    "isfile",
    "listdir",
    "makedirs",
    "open_file",
    "open_folder",
    "read_file",
    "remove",
    "rename",
    "replace",
    "stat",
    "temporary_copy",
    "temporary_directory",
    "temporary_file",
    "touch",
    "walk",
    "write_atomic",
]

_WRITES = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
           "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}  # fmt: skip
_SWAPS = 8  # a read whose file turns into a link between the walk and the open is walked again, this many times


def _name(path: Any) -> str:
    return os.fspath(path) if not isinstance(path, str) else path


def _roots() -> Roots | None:
    """The allowed roots in secure mode (every path is reached beneath them), else ``None``."""
    return Roots(secure_roots(), True, refusal) if secure_mode() else None


@contextlib.contextmanager
def _reached(path: str, action: str, follow_last: bool) -> Iterator[tuple[int | None, str]]:
    """``(folder descriptor, name)`` of ``path``: in secure mode reached from its root (see the module doc), else
    ``None`` and the path itself.  The entry itself is acted on: a link at the name is not followed."""
    roots = _roots()
    if roots is None:
        yield None, path
        return
    with roots.reach(path, action, follow_last=follow_last) as (folder, name):
        if name is None:
            raise refusal(action, f"the local path {path}", "it is an allowed root itself")
        yield folder, name


def open_file(
    path: Any,
    mode: str = "rb",
    buffering: int = -1,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
) -> Any:
    """``open(path, mode, ...)`` through the gate: in secure mode a read opens the file reached beneath the roots,
    a write creates it through its folder reached so, never through a link."""
    path = _name(path)
    roots = _roots()
    if roots is None:
        return open(path, mode, buffering=buffering, encoding=encoding, errors=errors, newline=newline)
    kind = mode.replace("b", "").replace("t", "").replace("+", "")[:1]  # r, w, a or x
    writing = kind in _WRITES
    flags = (_WRITES[kind] if writing else os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    action = "write" if writing or "+" in mode else "read"
    for _ in range(_SWAPS):
        with roots.reach(path, action, follow_last=not writing) as (folder, name):
            if name is None:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            try:
                fd = os.open(name, flags, 0o666, dir_fd=folder)
            except OSError as exn:
                if exn.errno != errno.ELOOP:
                    raise
                if writing:
                    why = "it is a symbolic link (a file written never follows one)"
                    raise refusal("write", f"the local path {path}", why) from None
                continue  # made a link since the walk: walked again, the link followed where it may be
        try:
            return open(fd, mode, buffering=buffering, encoding=encoding, errors=errors, newline=newline)
        except BaseException:
            os.close(fd)
            raise
    raise OSError(errno.ELOOP, "the file kept turning into a symbolic link while it was opened", path)


def open_folder(path: Any, make: bool = False) -> int:
    """A descriptor of the folder ``path`` (made with its parents when ``make``), for the caller to act through
    and close; in secure mode reached beneath the roots."""
    path = _name(path)
    roots = _roots()
    if roots is None:
        if make:
            os.makedirs(path, exist_ok=True)
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    return roots.open(path, "write" if make else "read", make_folders=make, folder=True)[0]


class Destination:
    """A folder a command writes a tree into (``wds extract``), in any mode: every path below it is reached from its
    descriptor without following a link, and a link met there (one the command did not make: planted to lead the
    writes elsewhere) is refused with an error naming it, as :mod:`tarfile`'s ``data`` filter refuses members that
    would land outside; in secure mode the folder itself is reached beneath the allowed roots."""

    def __init__(self, folder: Any) -> None:
        folder = _name(folder)
        makedirs(folder)
        self.folder = os.path.realpath(folder)  # the folder named is the caller's; what is below it is walked
        self.roots = Roots([self.folder], False, _destination_refusal, open_folder)

    def open_file(self, relative: str, mode: str = "wb") -> Any:
        """The file ``relative`` (a path below the folder) opened for writing, made with its folders; a file there
        is overwritten, a link there refused."""
        path = os.path.join(self.folder, relative)
        with self.roots.reach(path, "write", follow_last=False, make_folders=True) as (folder, name):
            if name is None:
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            try:
                fd = os.open(name, _WRITES[mode[:1]] | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=folder)
            except OSError as exn:
                if exn.errno != errno.ELOOP:
                    raise
                why = "it is a symbolic link that wds did not make (a file written never follows one)"
                raise _destination_refusal("write", f"{path}", why) from None
        return open(fd, mode)


def _destination_refusal(action: str, what: str, why: str) -> SpecError:
    return SpecError(f"refusing to {action} {what}: {why}")


def append(path: Any, data: bytes) -> None:
    """Append ``data`` to the file ``path`` (made when missing) with one appending ``write``: lines that processes
    sharing the file append never mix."""
    with open_file(path, "ab", buffering=0) as out:
        out.write(data)


def read_file(path: Any) -> bytes:
    """The whole local file ``path``."""
    with open_file(path, "rb") as stream:
        return stream.read()  # type: ignore[no-any-return]


def write_atomic(path: Any, data: bytes | str) -> None:
    """Write the whole file ``path`` under a temporary name beside it and rename it into place: readers see the
    old file or the new one, never half of one."""
    _atomically(path, lambda out: out.write(data), "x" if isinstance(data, str) else "xb")


def copy_stream(source: Any, path: Any, chunk: int = 1 << 22) -> None:
    """Copy the binary stream ``source`` to the file ``path``, which appears only when complete (see
    :func:`write_atomic`)."""
    _atomically(path, lambda out: shutil.copyfileobj(source, out, chunk), "xb")


def _atomically(path: Any, write: Callable[[Any], object], mode: str) -> None:
    folder, name = os.path.split(os.path.abspath(_name(path)))
    partial = os.path.join(folder, temporary_name(name))  # a killed writer's is cleaned as a shard's is
    try:
        with open_file(partial, mode) as out:
            write(out)
        replace(partial, path)
    except BaseException:
        remove(partial)
        raise


def replace(source: Any, dest: Any) -> None:
    """``os.replace`` through the gate: in secure mode both names reached through their folders beneath the roots."""
    with _reached(_name(source), "write", False) as (sf, src), _reached(_name(dest), "write", False) as (df, dst):
        os.replace(src, dst, src_dir_fd=sf, dst_dir_fd=df)


def rename(source: Any, dest: Any) -> None:
    """``os.rename`` through the gate (see :func:`replace`)."""
    with _reached(_name(source), "write", False) as (sf, src), _reached(_name(dest), "write", False) as (df, dst):
        os.rename(src, dst, src_dir_fd=sf, dst_dir_fd=df)


def remove(path: Any, missing_ok: bool = True) -> None:
    """Remove the file ``path`` (a link itself, never what it leads to); a missing one is no error unless
    ``missing_ok`` is false."""
    try:
        with _reached(_name(path), "write", False) as (folder, name):
            os.unlink(name, dir_fd=folder)
    except FileNotFoundError:
        if not missing_ok:
            raise


def rmdir(path: Any) -> None:
    """Remove the empty folder ``path`` (a missing one is no error)."""
    try:
        with _reached(_name(path), "write", False) as (folder, name):
            os.rmdir(name, dir_fd=folder)
    except FileNotFoundError:
        pass


def makedirs(path: Any) -> None:
    """Make the folder ``path`` and its parents (none is an error when it is there); in secure mode each folder is
    made and entered beneath the roots."""
    path = _name(path)
    roots = _roots()
    if roots is None:
        if path:
            os.makedirs(path, exist_ok=True)
        return
    with roots.reach(path or ".", "write", make_folders=True, folder=True):
        pass


def touch(path: Any) -> None:
    """Set the times of the file ``path`` to now (the last use of a cached file)."""
    path = _name(path)
    roots = _roots()
    if roots is None:
        os.utime(path)
        return
    with roots.reach(path, "write") as (folder, name):
        if name is None:
            os.utime(folder)
        else:  # a link swapped in after the walk has its own times set, never those of what it leads to
            os.utime(name, dir_fd=folder, follow_symlinks=False)


def listdir(path: Any) -> list[str]:
    """The names in the folder ``path``."""
    path = _name(path)
    roots = _roots()
    if roots is None:
        return os.listdir(path)
    with roots.reach(path, "read", folder=True) as (folder, _):
        return os.listdir(folder)


def walk(root: Any) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)``, never into a linked folder; a linked file is listed, and refused when opened in secure mode
    if it leads out of the roots.  In secure mode the folders are entered by descriptor, from ``root`` reached
    beneath the roots (``os.fwalk``)."""
    top = _name(root)
    roots = _roots()
    if roots is None:
        yield from os.walk(top)
        return
    with roots.reach(top, "read", folder=True) as (folder, _):
        for relative, dirs, names, _fd in os.fwalk(".", dir_fd=folder):
            yield (top if relative == "." else os.path.join(top, relative[2:])), dirs, names


def glob(pattern: str, folder: Any = None) -> list[str]:
    """The paths that match ``pattern`` (:func:`glob.glob`), in ``folder`` when given (whose own name is taken as it
    is, never as a pattern).  In secure mode each folder the pattern goes through is listed by descriptor, reached
    beneath the roots: a linked folder is gone through only where it stays beneath them."""
    if not secure_mode():
        if folder is not None:
            return _glob.glob(os.path.join(_glob.escape(_name(folder)), pattern))
        return _glob.glob(pattern)
    if folder is not None:
        pattern = os.path.join(_glob.escape(_name(folder)), pattern)
    start = os.sep if os.path.isabs(pattern) else ""
    return _glob_beneath(start, [part for part in pattern.split(os.sep) if part])


def _glob_beneath(folder: str, parts: list[str]) -> list[str]:
    """The paths below ``folder`` ("" for the current one) that match the pattern's components ``parts``."""
    fixed = next((k for k, part in enumerate(parts) if _glob.has_magic(part)), len(parts))
    here = os.path.join(folder, *[_unescaped(part) for part in parts[:fixed]]) if fixed else folder
    if fixed == len(parts):
        return [here] if exists(here) else []
    wanted, rest = parts[fixed], parts[fixed + 1 :]
    try:
        names = listdir(here or ".")
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in sorted(names):
        if fnmatch.fnmatchcase(name, wanted) and (wanted[0] == "." or name[0] != "."):
            path = os.path.join(here, name)
            if not rest:
                found.append(path)
            elif isdir(path):
                found.extend(_glob_beneath(path, rest))
    return found


def _unescaped(part: str) -> str:
    """A pattern's component without magic, as the name it matches (``[*]`` is ``*``: :func:`glob.escape`)."""
    return part.replace("[*]", "*").replace("[?]", "?").replace("[[]", "[")


def escape(name: str) -> str:
    """``name`` taken literally in a :func:`glob` pattern."""
    return _glob.escape(name)


def stat(path: Any) -> os.stat_result:
    """``os.stat(path)``; in secure mode of the file reached beneath the roots."""
    path = _name(path)
    roots = _roots()
    if roots is None:
        return os.stat(path)
    with roots.reach(path, "read") as (folder, name):
        return os.fstat(folder) if name is None else os.stat(name, dir_fd=folder, follow_symlinks=False)


def exists(path: Any) -> bool:
    """Whether ``path`` exists (a probe is a read: refused outside the roots in secure mode)."""
    try:
        stat(path)
    except OSError:  # as os.path.exists: missing, unreadable, a loop of links (a refusal is raised)
        return False
    except ValueError as exn:  # a name with a NUL byte
        if isinstance(exn, SpecError):
            raise
        return False
    return True


def isfile(path: Any) -> bool:
    """Whether ``path`` is a regular file (or a link to one)."""
    try:
        return _stat.S_ISREG(stat(path).st_mode)
    except OSError:
        return False


def isdir(path: Any) -> bool:
    """Whether ``path`` is a folder (or a link to one)."""
    try:
        return _stat.S_ISDIR(stat(path).st_mode)
    except OSError:
        return False


def getsize(path: Any) -> int:
    """The size of the file ``path`` in bytes."""
    return stat(path).st_size


def temporary_file() -> Any:
    """An anonymous temporary file of the package's own (removed when closed); its name comes from code."""
    return tempfile.TemporaryFile()


@contextlib.contextmanager
def temporary_copy(data: bytes, name: str) -> Iterator[str]:
    """The path of a temporary file of the package's own holding ``data``, called ``name`` (for readers that want a
    path: a video decoder), removed at the end; ``name`` comes from code."""
    if os.sep in name or name in ("", ".", ".."):
        raise ValueError(f"a temporary file's name is one component, got {name!r}")
    with tempfile.TemporaryDirectory(prefix="wds-") as folder:
        path = os.path.join(folder, name)
        with open(path, "xb") as out:
            out.write(data)
        yield path


def temporary_directory(prefix: str = "wds-") -> Any:
    """A temporary folder of the package's own (a context manager giving its path; removed at the end)."""
    return tempfile.TemporaryDirectory(prefix=prefix)
