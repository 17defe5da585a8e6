"""The one gate for local files: every file wds opens, creates, renames, lists or removes goes through here.

Shards, caches (the shard cache, the drop-in's ``FileCache`` and wids's downloads), indexes, descriptors, the
commands' tree walks and outputs, tenbin files, metrics and trace logs: whatever the package does with a local
file, it does with these functions, and an architecture test (``tests/core/test_architecture.py``) keeps raw file
calls (``open``, ``os.replace``, ``shutil``, ``tempfile``...) out of every other module.  So secure mode
(:mod:`.secure`) holds for a feature written tomorrow as it does for those of today:

* every path is checked by name against the allowed roots before anything is done with it;
* a file opened for reading is checked again on what was opened (the descriptor's own path): a symbolic link
  that leads out of the roots, or one swapped in after the check, is refused;
* a file created, renamed or removed is reached through a descriptor of its folder, checked the same way, and a
  created file never follows a link (``O_NOFOLLOW``): nothing outside the roots is written, even for a moment.

Outside secure mode these are the plain system calls.  Temporary files and folders of the package's own (a
command's standard error, ``wds demo``'s shards) are made by :func:`temporary_file` and
:func:`temporary_directory`, in the system's temporary folder: their names come from code, never from data.
"""

from __future__ import annotations

import contextlib
import errno
import glob as _glob
import os
import re
import shutil
import stat as _stat
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from .destinations import temporary_name
from .secure import check_local, refusal, secure_mode, verify_opened

__all__ = [
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


def _name(path: Any) -> str:
    return os.fspath(path) if not isinstance(path, str) else path


def _checked(path: Any, action: str) -> str:
    """``path`` as text, refused in secure mode when it is not under an allowed root (by name)."""
    path = _name(path)
    if secure_mode():
        check_local(path, action)
    return path


@contextlib.contextmanager
def _folder_of(path: str, action: str) -> Iterator[tuple[int | None, str]]:
    """``(folder descriptor, name)`` of ``path``: in secure mode its folder opened and checked on what was opened
    (so the name is reached through the folder checked, not through a link swapped in later), else ``None`` and
    the path itself."""
    if not secure_mode():
        yield None, path
        return
    folder, name = os.path.split(os.path.abspath(path))
    check_local(folder, action)  # the entry itself is acted on (a link is removed or renamed, never followed)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        verify_opened(fd, folder, action)
        yield fd, name
    finally:
        os.close(fd)


def open_file(
    path: Any,
    mode: str = "rb",
    buffering: int = -1,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
) -> Any:
    """``open(path, mode, ...)`` through the gate: in secure mode a read is checked on the file opened, a write
    creates the file through its checked folder and never through a link."""
    path = _name(path)
    kind = mode.replace("b", "").replace("t", "").replace("+", "")[:1]  # r, w, a or x
    writing = kind in _WRITES
    if not secure_mode() or not writing:
        action = "write" if writing or "+" in mode else "read"
        path = _checked(path, action)
        stream = open(path, mode, buffering=buffering, encoding=encoding, errors=errors, newline=newline)
        try:
            verify_opened(stream.fileno(), path, action)
        except BaseException:
            stream.close()
            raise
        return stream
    flags = _WRITES[kind] | os.O_NOFOLLOW | os.O_CLOEXEC
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    with _folder_of(path, "write") as (folder, name):
        try:
            fd = os.open(name, flags, 0o666, dir_fd=folder)
        except OSError as exn:
            if exn.errno != errno.ELOOP:
                raise
            why = "it is a symbolic link (a file written never follows one)"
            raise refusal("write", f"the local path {path}", why) from None
    try:
        return open(fd, mode, buffering=buffering, encoding=encoding, errors=errors, newline=newline, closefd=True)
    except BaseException:
        os.close(fd)
        raise


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
    """``os.replace`` through the gate: in secure mode both names reached through their checked folders."""
    with _folder_of(_name(source), "write") as (src_folder, src), _folder_of(_name(dest), "write") as (dst_folder, dst):
        os.replace(src, dst, src_dir_fd=src_folder, dst_dir_fd=dst_folder)


def rename(source: Any, dest: Any) -> None:
    """``os.rename`` through the gate (see :func:`replace`)."""
    with _folder_of(_name(source), "write") as (src_folder, src), _folder_of(_name(dest), "write") as (dst_folder, dst):
        os.rename(src, dst, src_dir_fd=src_folder, dst_dir_fd=dst_folder)


def remove(path: Any, missing_ok: bool = True) -> None:
    """Remove the file ``path`` (a link itself, never what it leads to); a missing one is no error unless
    ``missing_ok`` is false."""
    with _folder_of(_name(path), "write") as (folder, name):
        try:
            os.unlink(name, dir_fd=folder)
        except FileNotFoundError:
            if not missing_ok:
                raise


def rmdir(path: Any) -> None:
    """Remove the empty folder ``path`` (a missing one is no error)."""
    with _folder_of(_name(path), "write") as (folder, name):
        try:
            os.rmdir(name, dir_fd=folder)
        except FileNotFoundError:
            pass


def makedirs(path: Any) -> None:
    """Make the folder ``path`` and its parents (none is an error when it is there)."""
    path = _checked(path, "write")
    if path:
        os.makedirs(path, exist_ok=True)
        _checked(os.path.realpath(path), "write")  # a link made in between cannot have led it out


def touch(path: Any) -> None:
    """Set the times of the file ``path`` to now (the last use of a cached file)."""
    os.utime(_checked(path, "write"))


def listdir(path: Any) -> list[str]:
    """The names in the folder ``path``."""
    return os.listdir(_checked(path, "read"))


def walk(root: Any) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(root)``, never into a linked folder; a linked file is listed, and refused when opened in secure mode
    if it leads out of the roots."""
    yield from os.walk(_checked(root, "read"))


def glob(pattern: str, folder: Any = None) -> list[str]:
    """The paths that match ``pattern`` (:func:`glob.glob`), in ``folder`` when given (whose own name is taken as it
    is, never as a pattern); the folder, or the part of the pattern before its first wildcard, is checked first."""
    if folder is not None:
        return _glob.glob(os.path.join(_glob.escape(_checked(folder, "read")), pattern))
    fixed = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    _checked(os.path.dirname(fixed) or ".", "read")
    return _glob.glob(pattern)


def escape(name: str) -> str:
    """``name`` taken literally in a :func:`glob` pattern."""
    return _glob.escape(name)


def stat(path: Any) -> os.stat_result:
    """``os.stat(path)``, the path checked first."""
    return os.stat(_checked(path, "read"))


def exists(path: Any) -> bool:
    """Whether ``path`` exists (a probe is a read: refused outside the roots in secure mode)."""
    return os.path.exists(_checked(path, "read"))


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
