"""The destinations shards are written to: local files, streams and fsspec URLs (``pipe:`` is :mod:`.commands`).

:func:`~wds_core.io.storage.create_shard` picks one through the backends (:mod:`.backends`) and returns a
:class:`ShardSink` with ``write``, ``commit``
(the shard is complete: make it visible) and ``abort`` (discard it).  A local
shard is written under a temporary name beside its destination and renamed
into place by ``commit``, so a crash never leaves half a shard under the final
name.  On object stores (S3, GCS, Azure...) the upload is completed by
``commit`` and cancelled by ``abort``, so the object appears only when whole
(S3's in parts uploaded in parallel and retried: :mod:`~wds_core.io.backends.s3upload`);
other fsspec targets are written under a temporary name and moved into place.
Remote destinations use the storage options that apply to their URL
(:mod:`wds_core.io.storage_config`).
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from typing import Any, BinaryIO

from ..errors import ShardOpenError, SpecError
from . import files
from .partials import PARTIAL, temporary_name
from .processes import process_running
from .shardsink import ShardSink

__all__ = [
    "CommitOnExit",
    "LocalSink",
    "OpenedSink",
    "ShardSink",
    "StreamSink",
    "CompressedSink",
    "compression_of",
    "stale_partials",
    "temporary_name",
]


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
            try:
                self.close()
            except BaseException:  # leaving the block ends the writer either way (a ShardWriter's lock too)
                self.abort()
                raise
        else:
            self.abort()


def stale_partials(folder: str, name: str | None = None) -> list[str]:
    """Temporary files (of ``name``, or of any shard) in ``folder`` left by writers whose process is gone.

    A writer killed mid-shard leaves its hidden ``.NAME.PID.RAND.partial``; one
    whose process still runs is writing and is left alone (on this machine: a
    folder shared by several machines may hold another machine's live pid).
    """
    try:
        entries = files.listdir(folder)
    except OSError:
        return []
    found = []
    for entry in entries:
        matched = PARTIAL.fullmatch(entry)
        if matched and (name is None or matched["name"] == name) and not process_running(int(matched["pid"])):
            found.append(os.path.join(folder, entry))
    return sorted(found)


def _write_error(exn: OSError, url: str) -> ShardOpenError:
    error = ShardOpenError(f"cannot write shard: {exn.strerror or exn}", url=url)
    error.errno, error.strerror = exn.errno, exn.strerror
    return error


class LocalSink(ShardSink):
    """A local file under a temporary name; a write that fails leaves none of its bytes (the file is cut back).

    The temporary file is made, and renamed into place, through a descriptor of the destination folder, opened
    through the file gate (:func:`~.files.open_folder`: in secure mode reached from its root, so no link swapped
    in at any moment can take the shard elsewhere).
    """

    rewindable = True
    _BUFFER = 1 << 20  # record writers hand over one small object at a time

    def __init__(self, path: str, url: str) -> None:
        self.url, self.path = url, path
        folder, self.name = os.path.split(os.path.abspath(path))
        self.partial_name = temporary_name(self.name)
        self.partial = os.path.join(folder, self.partial_name)
        self.fd = self.folder_fd = -1
        try:
            self.folder_fd = files.open_folder(folder, make=True)
            for stale in stale_partials(folder, self.name):  # left by a writer of this shard that was killed
                try:
                    os.unlink(os.path.basename(stale), dir_fd=self.folder_fd)
                except FileNotFoundError:
                    pass  # cleaned by another writer meanwhile
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
            self.fd = os.open(self.partial_name, flags, 0o666, dir_fd=self.folder_fd)
        except BaseException as exn:
            self._close_folder()
            if not isinstance(exn, OSError):
                raise
            raise ShardOpenError(f"cannot create shard: {exn.strerror or exn}", url=url) from None
        self.buffer = bytearray()
        self.offset = 0  # bytes in the file, all from complete writes

    def _close_folder(self) -> None:
        if self.folder_fd >= 0:
            os.close(self.folder_fd)
            self.folder_fd = -1

    def write(self, data: Any) -> None:
        size = len(memoryview(data).cast("B"))
        self.buffer += data
        if len(self.buffer) >= self._BUFFER:
            try:
                self._drain()
            except ShardOpenError:
                del self.buffer[len(self.buffer) - size :]  # what earlier writes gave stays, for the next try
                raise

    def _drain(self) -> None:
        with memoryview(self.buffer) as view:
            done = 0
            try:
                while done < len(view):
                    done += os.write(self.fd, view[done:])
            except OSError as exn:
                try:  # nothing of a failed drain stays in the file
                    os.ftruncate(self.fd, self.offset)
                    os.lseek(self.fd, self.offset, os.SEEK_SET)
                except OSError:
                    pass
                raise _write_error(exn, self.url) from None
        self.offset += len(self.buffer)
        self.buffer.clear()

    def commit(self) -> None:
        try:
            self._drain()
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            os.replace(self.partial_name, self.name, src_dir_fd=self.folder_fd, dst_dir_fd=self.folder_fd)
            self._close_folder()
        except OSError as exn:
            self.abort()
            if isinstance(exn, ShardOpenError):
                raise
            raise ShardOpenError(f"cannot finish shard: {exn.strerror or exn}", url=self.url) from None

    def abort(self) -> None:
        self.buffer = bytearray()
        try:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1
        except OSError:
            pass  # closing a file on a full disk can fail too; it is removed all the same
        finally:
            try:
                os.unlink(self.partial_name, dir_fd=self.folder_fd if self.folder_fd >= 0 else None)
            except FileNotFoundError:
                pass
            finally:
                self._close_folder()


class StreamSink(ShardSink):
    """A stream the caller owns: written to and flushed, never closed."""

    def __init__(self, stream: BinaryIO, url: str) -> None:
        self.url, self.stream = url, stream
        self.write = stream.write  # type: ignore[method-assign, assignment]

    def commit(self) -> None:
        flush = getattr(self.stream, "flush", None)
        if flush is not None:
            flush()

    def abort(self) -> None:
        self.commit()


class OpenedSink(StreamSink):
    """A stream a registered scheme opener returned: closed when the shard ends."""

    def commit(self) -> None:
        self.stream.close()

    def abort(self) -> None:
        self.stream.close()


COMPRESSORS = {"gz": "gz", "gzip": "gz", "bz2": "bz2", "xz": "xz"}


def compression_of(dest: Any, compress: bool | str | None) -> str | None:
    """The compression a shard is written with: ``compress`` (``True`` is gzip), else what ``dest``'s suffix
    implies (``.tgz``, ``.gz``, ``.bz2``, ``.xz``); ``None`` for none."""
    if compress is None:
        name: str = dest if isinstance(dest, str) else ""
        for suffix, implied in ((".tgz", "gz"), (".gz", "gz"), (".bz2", "bz2"), (".xz", "xz")):
            if name.endswith(suffix):
                return implied
        return None
    if compress is False:
        return None
    if compress is True:
        return "gz"
    kind: str | None = COMPRESSORS.get(str(compress).lower())
    if kind is None:
        raise SpecError(f"compress must be True, False, 'gz', 'bz2' or 'xz', got {compress!r}")
    return kind


class CompressedSink:
    """A compressor in front of a sink; deterministic output (no name, no timestamp)."""

    def __init__(self, sink: ShardSink, kind: str) -> None:
        self.sink = sink
        out: Any = sink  # a ShardSink has write(), all the compressors need
        if kind == "gz":
            self.file: Any = gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=6, mtime=0)
        elif kind == "bz2":
            self.file = bz2.BZ2File(out, "wb")
        else:
            self.file = lzma.LZMAFile(out, "wb")
        self.write = self.file.write

    def commit(self) -> None:
        self.file.close()
        self.sink.commit()

    def abort(self) -> None:
        self.sink.abort()
