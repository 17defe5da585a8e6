"""``webdataset.gopen``: open any URL for reading or writing, and the table of per-scheme openers.

``gopen(url, "rb")`` opens what a shard reader opens (local paths, ``file:``,
``-``, ``pipe:CMD``, fsspec URLs with their storage options and retries);
``gopen(url, "wb")`` writes through wds's sinks (a local file or an object
appears only when the stream is closed without an error; leaving a ``with``
block by an exception discards it).  ``"r"``/``"w"`` give text streams.

``gopen_schemes`` is webdataset's table: ``gopen_schemes["s3"] = my_opener``
makes *every* reader and writer of this process use ``my_opener(url, mode,
bufsize)`` for ``s3:`` URLs (:func:`wds_core.io.storage.register_opener`), as
training code that patches the table expects.  The entries present by
default stand for wds's own handling.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any

from ..errors import SpecError, redact_url
from ..io import files
from ..io.commands import start_process
from ..io.secure import check_allowed, secure_mode
from ..io.storage import OPENERS, Storage, local_path, open_shard, register_opener
from ..io.storage_config import rewrite_url as _rewrite
from . import utils  # noqa: F401 - 1.0.2's module imports it, and code reaches it here

__all__ = [
    "Pipe",
    "gopen",
    "gopen_ais",
    "gopen_curl",
    "gopen_error",
    "gopen_file",
    "gopen_gsutil",
    "gopen_hf",
    "gopen_htgs",
    "gopen_pipe",
    "gopen_schemes",
    "info",
    "reader",
    "rewrite_url",
    "set_options",
]

#: webdataset's module-level dict of what code wants said when a pipe fails (a ``Pipe``'s exit-status error shows
#: it); code writes entries into it, as webdataset's callers do.
info: dict[str, Any] = {}


class Pipe:
    """A subprocess as a stream: ``Pipe(args, mode="rb")`` reads its output, ``mode="wb"`` writes its input.

    Other keyword arguments go to :class:`subprocess.Popen` (``shell=True``...).
    Closing waits up to ``timeout`` seconds for it; an exit status other than 0
    and those in ``ignore_status`` is an ``OSError`` unless ``ignore_errors``.
    """

    def __init__(
        self,
        *args: Any,
        mode: str = "rb",
        timeout: float = 7200.0,
        ignore_errors: bool = False,
        ignore_status: list[int] | None = None,
        **kw: Any,
    ) -> None:
        if mode[:1] not in ("r", "w"):
            raise ValueError(f"Pipe mode must start with 'r' or 'w', got {mode!r}")
        self.mode, self.timeout, self.ignore_errors = mode, timeout, ignore_errors
        self.ignore_status = [0, *(ignore_status or [])]
        self.args = (args, kw)
        reading = mode[0] == "r"
        self.proc = start_process(*args, reading=reading, **kw)  # its arguments are the caller's, as in webdataset
        self.stream: Any = self.proc.stdout if reading else self.proc.stdin
        self.status: int | None = None

    def __repr__(self) -> str:
        return f"<Pipe {self.args}>"

    def check_status(self) -> None:
        if self.proc.poll() is not None:
            self.wait_for_child()

    def wait_for_child(self) -> None:
        if self.status is None:
            self.status = self.proc.wait(self.timeout)
        if self.status not in self.ignore_status and not self.ignore_errors:
            raise OSError(f"{self.args}: exit status {self.status}" + (f" {info}" if info else ""))

    def read(self, *args: Any) -> bytes:
        data = self.stream.read(*args)
        self.check_status()
        return data

    def readLine(self, *args: Any) -> bytes:  # noqa: N802 - webdataset's name
        line = self.stream.readline(*args)
        if not line:
            self.check_status()
        return line

    readline = readLine

    def write(self, data: Any) -> int:
        written = self.stream.write(data)
        self.check_status()
        return written

    def close(self) -> None:
        if not self.stream.closed:
            self.stream.close()
            self.wait_for_child()

    def __enter__(self) -> Pipe:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def set_options(
    obj: Any,
    timeout: float | None = None,
    ignore_errors: bool | None = None,
    ignore_status: list[int] | None = None,
    handler: Any = None,
) -> bool:
    """webdataset's: set the given options of ``obj`` when it is a :class:`Pipe` (``True``), else nothing
    (``False``)."""
    if not isinstance(obj, Pipe):
        return False
    if timeout is not None:
        obj.timeout = timeout
    if ignore_errors is not None:
        obj.ignore_errors = ignore_errors
    if ignore_status is not None:
        obj.ignore_status = [0, *ignore_status]  # webdataset sets the list as given: exit 0 then an error
    if handler is not None:
        obj.handler = handler  # type: ignore[attr-defined]
    return True


class GopenModule:
    """``webdataset.writer.gopen``: 1.0.2's function, ``gopen(url, mode)``, which also carries the names of the
    ``gopen`` module (``writer.gopen.Pipe``, ``writer.gopen.gopen(...)``, ``writer.gopen.info``), as code written for
    webdataset 0.2.x reads them: its ``writer`` imported the module under that name.  The names are looked up when
    read, so a replaced ``gopen.gopen`` or a patched table is what they give."""

    def __call__(self, url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> Any:
        return sys.modules[__name__].gopen(url, mode, bufsize, **kw)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(sys.modules[__name__], name)

    def __repr__(self) -> str:
        return "<webdataset.writer.gopen: the gopen function, with the gopen module's names>"


class _Writer(io.RawIOBase):
    """A shard sink as a binary file: ``close()`` commits; ``__exit__`` after an exception aborts."""

    def __init__(self, url: str, storage: Storage) -> None:
        super().__init__()
        self.name = url
        self._sink = storage.create(url)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sink.write(data)
        return len(memoryview(data))

    def close(self) -> None:
        if not self.closed:
            try:
                self._sink.commit()
            finally:
                super().close()

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is not None and not self.closed:
            self._sink.abort()
            super().close()
            return
        self.close()


def gopen_file(url: str, mode: str = "rb", bufsize: int = 8192) -> Any:
    """A local file (``file:`` URLs too), opened with :func:`open` (in secure mode: under an allowed root)."""
    path = local_path(url) or url
    _checked(path, "read" if mode.startswith("r") else "write")
    return files.open_file(path, mode, buffering=bufsize if bufsize > 0 else -1)


def gopen_pipe(url: str, mode: str = "rb", bufsize: int = 8192) -> Any:
    """The command after ``pipe:``, its output read (``rb``) or its input written (``wb``), as every ``pipe:``
    URL is (:mod:`wds_core.io.commands`): a failing command is an error naming it and the end of its stderr."""
    _checked(url, "read" if mode.startswith("r") else "write")
    if mode.startswith("r"):
        return open_shard(url, rewritten=True)
    return _Writer(url, Storage())


def _gopen_storage(
    url: str, mode: str = "rb", bufsize: int = 8192, storage_options: Storage | dict | None = None
) -> Any:
    """Any URL through wds's storage layer (fsspec for remote ones): read, or written atomically."""
    if mode.startswith("r"):
        return open_shard(url, storage_options)
    _checked(url, "write")
    return _Writer(url, Storage.of(storage_options))


gopen_curl = gopen_gsutil = gopen_htgs = gopen_hf = _gopen_storage


def gopen_ais(url: str, mode: str = "rb", bufsize: int = 8192) -> Pipe:
    """An AIStore object through the ``ais`` command line tool (a command: refused in secure mode unless ``ais``
    is an allowed protocol)."""
    _checked(url, "read" if mode.startswith("r") else "write")
    command = ["ais", "get", url, "-"] if mode.startswith("r") else ["ais", "put", "-", url]
    return Pipe(command, mode=mode, bufsize=bufsize)


def gopen_error(url: str, *args: Any, **kw: Any) -> Any:
    raise ValueError(f"{redact_url(url)}: no gopen handler for this URL scheme")


_DEFAULTS = {
    "__default__": _gopen_storage,
    "pipe": gopen_pipe,
    "http": gopen_curl,
    "https": gopen_curl,
    "sftp": gopen_curl,
    "ftps": gopen_curl,
    "scp": gopen_curl,
    "gs": gopen_gsutil,
    "htgs": gopen_htgs,
    "hf": gopen_hf,
    "ais": gopen_ais,
}


class _SchemeTable(MutableMapping[str, Any]):
    """webdataset's ``gopen_schemes``: setting an entry registers a process-wide opener for that scheme."""

    def __getitem__(self, scheme: str) -> Any:
        return OPENERS[scheme] if scheme in OPENERS else _DEFAULTS[scheme]

    def __setitem__(self, scheme: str, opener: Any) -> None:
        register_opener(scheme, None if opener is _DEFAULTS.get(scheme) else opener)

    def __delitem__(self, scheme: str) -> None:
        if scheme not in OPENERS:
            raise KeyError(scheme)
        register_opener(scheme, None)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*_DEFAULTS, *OPENERS]))

    def __len__(self) -> int:
        return len(set(_DEFAULTS) | set(OPENERS))

    def __repr__(self) -> str:
        return f"gopen_schemes({dict(self)!r})"


gopen_schemes = _SchemeTable()


def rewrite_url(url: str) -> str:
    """webdataset's ``rewrite_url``: ``url`` after the rewrites (``GOPEN_REWRITE``, ``WDS_REWRITE``, registered and
    configured ones); in secure mode an environment rewrite is refused, as webdataset refuses it."""
    if secure_mode() and any(os.environ.get(name) for name in ("GOPEN_REWRITE", "WDS_REWRITE")):
        raise SpecError(
            "rewrite_url: unsafe_gopen is False, cannot rewrite URLs using environment variables (secure mode is on: "
            "unset GOPEN_REWRITE/WDS_REWRITE, or register the rewrite in code or the config file)"
        )
    return _rewrite(url)


def _checked(url: str, action: str) -> None:
    """Secure mode's allowlist (:func:`wds_core.io.secure.check_allowed`), said as webdataset says it."""
    try:
        check_allowed(url, action)
    except SpecError as exn:
        if url.startswith("pipe:"):
            raise SpecError(f"gopen_pipe: unsafe_gopen is False, cannot open pipe URLs ({exn})") from None
        if local_path(url) is not None:
            raise SpecError(f"gopen: unsafe_gopen is False, cannot open local files ({exn})") from None
        raise


def gopen(
    url: str, mode: str = "rb", bufsize: int = 8192, storage_options: Storage | dict | None = None, **kw: Any
) -> Any:
    """Open ``url`` for reading (``"rb"``, ``"r"``) or writing (``"wb"``, ``"w"``); text modes take ``encoding=``.

    Registered scheme openers get ``(url, mode, bufsize, **kw)``; wds's own
    handling takes ``storage_options`` and no other keyword.  The URL is
    rewritten once, and in secure mode checked against its allowlist first
    (``-`` and ``ais:`` included: they read standard input or run a command).
    """
    if mode not in ("rb", "wb", "r", "w", "rt", "wt"):
        raise ValueError(f"gopen mode must be 'rb', 'wb', 'r' or 'w', got {mode!r}")
    encoding = kw.pop("encoding", "utf-8") if "b" not in mode else None
    binary = mode[0] + "b"
    url = os.fspath(url)
    action = "read" if binary == "rb" else "write"
    if url == "-":
        _checked(url, action)
        stream: Any = sys.stdin.buffer if binary == "rb" else sys.stdout.buffer
    else:
        target = rewrite_url(url)
        _checked(target, action)
        scheme = "pipe" if target.startswith("pipe:") else target.split("://", 1)[0] if "://" in target else ""
        if scheme in OPENERS:
            stream = OPENERS[scheme](target, binary, bufsize, **kw)
        elif kw:
            raise TypeError(f"gopen got unexpected keyword arguments {sorted(kw)}")
        elif scheme == "ais":
            stream = gopen_ais(target, binary, bufsize)
        elif binary == "rb":  # local, pipe: and fsspec URLs: the storage layer's streams, which rewrite once
            stream = open_shard(target, storage_options, rewritten=True)
        else:
            stream = _Writer(target, Storage.of(storage_options))
    if encoding is None:
        return stream
    return io.TextIOWrapper(stream if isinstance(stream, io.IOBase) else _Buffered(stream), encoding=encoding)


class _Buffered(io.RawIOBase):
    """A stream with only ``read``/``write`` seen as a raw file, for ``io.TextIOWrapper``."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self._stream = stream

    def readable(self) -> bool:
        return hasattr(self._stream, "read")

    def writable(self) -> bool:
        return hasattr(self._stream, "write")

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def write(self, data: Any) -> int:
        self._stream.write(bytes(data))
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
            super().close()


#: ``webdataset.writer.gopen`` and the other modules' ``gopen`` (0.2.x's ``from . import gopen``): see GopenModule
as_module = GopenModule()


def reader(url: str, **kw: Any) -> Any:
    """``gopen(url, "rb", **kw)``."""
    return gopen(url, "rb", **kw)
