"""The only place shard bytes are written: local files, streams, ``-``, ``pipe:`` and fsspec URLs.

:func:`create_shard` returns a :class:`ShardSink` with ``write``, ``commit``
(the shard is complete: make it visible) and ``abort`` (discard it).  A local
shard is written under a temporary name beside its destination and renamed
into place by ``commit``, so a crash never leaves half a shard under the final
name.  A ``pipe:`` command's exit status is checked at ``commit``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from typing import Any, BinaryIO

from .errors import PipeError, ShardOpenError
from .storage import local_path, pipe_failure

__all__ = ["CommitOnExit", "ShardSink", "create_shard"]


class ShardSink:
    """A destination being written; ``commit()`` or ``abort()`` ends it."""

    url: str

    def write(self, data: Any) -> None:  # pragma: no cover - every sink defines it
        raise NotImplementedError

    def commit(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def abort(self) -> None:  # pragma: no cover
        raise NotImplementedError


class CommitOnExit:
    """Context manager of writers: leaving the block normally ``close()``s, by an exception ``abort()``s."""

    def close(self) -> None:  # pragma: no cover - every writer defines it
        raise NotImplementedError

    def abort(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class _LocalSink(ShardSink):
    def __init__(self, path: str, url: str) -> None:
        self.url, self.path = url, path
        folder, name = os.path.split(os.path.abspath(path))
        self.partial = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.partial")
        try:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except OSError as exn:
            raise ShardOpenError(f"cannot create shard: {exn.strerror or exn}", url=url) from None
        self.file = os.fdopen(fd, "wb", buffering=1 << 20)  # record writers hand over one small object at a time
        self.write = self.file.write  # type: ignore[method-assign]

    def commit(self) -> None:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.partial, self.path)
        except OSError as exn:
            self.abort()
            raise ShardOpenError(f"cannot finish shard: {exn.strerror or exn}", url=self.url) from None

    def abort(self) -> None:
        self.file.close()
        try:
            os.unlink(self.partial)
        except FileNotFoundError:
            pass


class _StreamSink(ShardSink):
    """A stream the caller owns: written to and flushed, never closed."""

    def __init__(self, stream: BinaryIO, url: str) -> None:
        self.url, self.stream = url, stream
        self.write = stream.write  # type: ignore[method-assign]

    def commit(self) -> None:
        flush = getattr(self.stream, "flush", None)
        if flush is not None:
            flush()

    def abort(self) -> None:
        self.commit()


class _PipeSink(ShardSink):
    def __init__(self, command: str) -> None:
        self.url, self._command = f"pipe:{command}", command
        self._stderr = tempfile.TemporaryFile()
        try:
            self._proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, stderr=self._stderr)
        except OSError as exn:
            self._stderr.close()
            raise PipeError(f"cannot start command: {exn}", url=self.url) from None
        assert self._proc.stdin is not None
        self._stdin = self._proc.stdin
        self._finished = False

    def write(self, data: Any) -> None:
        try:
            self._stdin.write(data)
        except BrokenPipeError:
            self._finish()
            raise PipeError("the command stopped reading its input", url=self.url) from None

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            self._stdin.close()
        except BrokenPipeError:
            pass
        status = self._proc.wait()
        try:
            if status != 0:
                raise pipe_failure(self._command, status, self._stderr)
        finally:
            self._stderr.close()

    def commit(self) -> None:
        self._finish()

    def abort(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        try:
            self._finish()
        except PipeError:
            pass


class _FsspecSink(ShardSink):
    def __init__(self, url: str, options: dict) -> None:
        import fsspec

        self.url = url
        try:
            self.file = fsspec.open(url, "wb", **options).open()
        except (OSError, ValueError, ImportError) as exn:
            raise ShardOpenError(f"cannot create shard: {type(exn).__name__}: {exn}", url=url) from None
        self.write = self.file.write  # type: ignore[method-assign]

    def commit(self) -> None:
        try:
            self.file.close()
        except OSError as exn:
            raise ShardOpenError(f"cannot finish shard: {type(exn).__name__}: {exn}", url=self.url) from None

    def abort(self) -> None:
        discard = getattr(self.file, "discard", None)
        if discard is not None:
            discard()
        else:
            self.file.close()


def create_shard(dest: Any, storage_options: dict | None = None) -> ShardSink:
    """Start writing ``dest``: a path, ``file://``/fsspec URL, ``-`` (stdout), ``pipe:CMD`` or a binary stream."""
    if hasattr(dest, "write"):
        return _StreamSink(dest, repr(getattr(dest, "name", dest)))
    dest = os.fspath(dest)
    if not isinstance(dest, str):
        raise TypeError(f"a shard destination is a path, URL or stream, got {type(dest).__name__}")
    if dest == "-":
        return _StreamSink(sys.stdout.buffer, "-")
    if dest.startswith("pipe:"):
        return _PipeSink(dest[len("pipe:") :])
    path = local_path(dest)
    if path is not None:
        return _LocalSink(path, dest)
    return _FsspecSink(dest, storage_options or {})
