"""A local cache of whole shards, filled while they are streamed, with least-recently-used eviction.

A shard ``s3://bucket/dir/shard-000.tar`` is cached as
``<cache_dir>/s3/bucket/dir/shard-000.tar``: names mirror the URL, so they are
readable and two shards never share a file (characters that are unsafe in file
names are percent-encoded; over-long components end in a hash; the values of
a signed URL's secret parameters are left out, so that neither a file name
nor a log line holds them, and a URL signed anew finds its copy).  A
``pipe:`` shard is cached under ``pipe/<hash of the command>/`` followed by
the URL the command reads.

The first read streams from the source and copies every byte into a
temporary file beside the final name; only a complete shard is renamed into
place, so several workers or processes can share a directory and a partial
download is never used.  A read that seeks (restoring a checkpoint) or stops
early leaves nothing behind.  After each new file, the oldest files (by last
use) are deleted until the cache holds at most ``cache_size`` bytes.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import secrets
import time
import warnings
from collections.abc import Callable
from typing import Any, BinaryIO
from urllib.parse import quote, urlsplit

from ..errors import SpecError, redact
from . import files
from .provenance import CommandURL
from .streams import ReadStream

__all__ = ["ShardCache"]

_SAFE = "-_.~+=,@"
_PARTIAL = ".partial"
_MAX_COMPONENT = 180
_DRAIN_LIMIT = 1 << 16  # bytes left unread at close that are still fetched to complete the cache file
_STALE_PARTIAL = 3600.0
_URL_WORD = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def _component(text: str) -> str:
    if text in ("", ".", ".."):
        return {"": "%", ".": "%2E", "..": "%2E%2E"}[text]
    name = quote(text, safe=_SAFE)
    if name.endswith(_PARTIAL):
        name = name[: -len(_PARTIAL)] + "%2Epartial"
    if len(name) > _MAX_COMPONENT:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = f"{name[:120]}~{digest}"
    return name


class ShardCache:
    """Shards cached under ``cache_dir`` (see the module doc).

    ``cache_size`` is a byte budget (``None`` or a negative number: unlimited);
    ``cache_local`` also caches local shards (e.g. on a network filesystem);
    ``url_to_name(url)`` replaces the default file name (a relative path).
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike,
        cache_size: int | None = None,
        cache_local: bool = False,
        url_to_name: Callable[[str], str] | None = None,
        verbose: bool = False,
    ) -> None:
        self.cache_dir = os.path.abspath(os.fspath(cache_dir))
        self.cache_size = None if cache_size is None or cache_size < 0 else int(cache_size)
        self.cache_local = cache_local
        self.url_to_name = url_to_name
        self.verbose = verbose  # or WDS_VERBOSE_CACHE=1: log hits, new files and evictions

    def __repr__(self) -> str:
        return f"ShardCache({self.cache_dir!r}, cache_size={self.cache_size})"

    def path_for(self, url: str) -> str:
        """The cache file of ``url``."""
        if self.url_to_name is not None:
            name = os.path.normpath(str(self.url_to_name(url)))
            if os.path.isabs(name) or name.split(os.sep)[0] == "..":
                raise SpecError(f"url_to_name must return a relative path inside the cache, got {name!r}")
            return os.path.join(self.cache_dir, name)
        prefix: list[str] = []
        if url.startswith("pipe:"):
            # pipe/<hash of the command>/<the URL it reads, when it names one>: readable and collision-free
            command = url.shown()[len("pipe:") :] if isinstance(url, CommandURL) else url[len("pipe:") :]
            prefix = ["pipe", hashlib.sha256(command.encode()).hexdigest()[:12]]
            named = [word for word in command.split() if _URL_WORD.match(word)]
            if not named:
                return os.path.join(self.cache_dir, *prefix, _component(redact(command)))
            url = named[0]
        parts = urlsplit(url) if "://" in url else urlsplit("file://" + os.path.abspath(url))
        host = parts.netloc.rpartition("@")[2]  # user info is a credential: no part of the name
        components = [parts.scheme or "file", host] + parts.path.split("/")[1:]
        if parts.query:  # a signed URL's signature (which changes each time it is signed) is no part of the name
            components[-1] += "?" + redact("?" + parts.query)[1:]
        return os.path.join(self.cache_dir, *prefix, *(_component(c) for c in components))

    def open(self, url: str, open_source: Callable[[], BinaryIO]) -> BinaryIO:
        """The cached copy of ``url`` when there is one, else ``open_source()`` filling the cache as it is read.

        In secure mode the cache is a local folder like any other: outside the allowed roots it is refused
        (what is read back later must be where a shard could be read from)."""
        path = self.path_for(url)
        try:
            stream = files.open_file(path, "rb", buffering=0)  # in secure mode: refused outside the roots
        except OSError:
            pass  # not cached (or the cache is unusable, which the write below reports)
        else:
            try:
                files.touch(path)  # last use, for the eviction order
            except OSError:
                pass
            self._log(f"cache hit {path}")
            return stream  # type: ignore[return-value]
        source = open_source()
        try:
            files.makedirs(os.path.dirname(path))
            partial = f"{path}.{os.getpid()}.{secrets.token_hex(4)}{_PARTIAL}"
            sink = files.open_file(partial, "xb")
        except OSError as exn:
            # an unusable cache slows reading down, it does not stop it
            why = redact(f"shard cache {self.cache_dir} is not writable ({exn}); reading without it")
            warnings.warn(why, stacklevel=2)
            return source
        kind = _FillingRanges if hasattr(source, "attach") else _FillingStream
        return kind(source, sink, partial, path, self)  # type: ignore[return-value]

    def commit(self, partial: str, path: str) -> None:
        files.replace(partial, path)
        self._log(f"cached {path}")
        self.evict(keep=path)

    def evict(self, keep: str | None = None) -> None:
        """Delete least-recently-used files until the cache fits ``cache_size`` (and stale partial files)."""
        kept, total, now = [], 0, time.time()
        for root, _dirs, names in files.walk(self.cache_dir):
            for name in names:
                full = os.path.join(root, name)
                try:
                    stat = files.stat(full)
                except FileNotFoundError:
                    continue
                if name.endswith(_PARTIAL):
                    if now - stat.st_mtime > _STALE_PARTIAL:
                        _remove(full)
                    continue
                kept.append((stat.st_mtime, full, stat.st_size))
                total += stat.st_size
        if self.cache_size is None:
            return
        for _mtime, full, size in sorted(kept):
            if total <= self.cache_size:
                break
            if full != keep:
                _remove(full)
                self._log(f"evicted {full}")
                total -= size

    def _log(self, message: str) -> None:
        if self.verbose or os.environ.get("WDS_VERBOSE_CACHE", "0") not in ("", "0"):
            print(f"[wds cache] {message}", flush=True)


def _remove(path: str) -> None:
    files.remove(path)


class _FillingStream(ReadStream):
    """Reads ``source`` and copies what it reads into the cache's temporary file."""

    def __init__(self, source: BinaryIO, sink: BinaryIO, partial: str, path: str, cache: ShardCache) -> None:
        super().__init__()
        self.source, self.sink, self.partial, self.path, self.cache = source, sink, partial, path, cache
        self._pos = 0
        self._filling = True

    def seekable(self) -> bool:
        return bool(getattr(self.source, "seekable", lambda: False)())

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = self.source.seek(offset, whence)
        if target != self._pos:
            self._abandon()
        self._pos = target
        return target

    def read(self, size: int = -1) -> bytes:
        try:
            data = self.source.read(size)
        except BaseException:
            self._abandon()  # whatever the source says after a failure, this copy is incomplete
            raise
        self._pos += len(data)
        if self._filling:
            if data:
                self.sink.write(data)
            elif size != 0:
                self._finish()
        return data

    def _finish(self) -> None:
        self._filling = False
        try:
            self.sink.close()
            self.cache.commit(self.partial, self.path)
        except OSError:
            _remove(self.partial)

    def _abandon(self) -> None:
        if self._filling:
            self._filling = False
            self.sink.close()
            _remove(self.partial)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._filling:
                self._drain()
        finally:
            self._abandon()
            self.source.close()
            super().close()

    def _drain(self) -> None:
        """Complete the cache file when no more than the tar padding is left unread."""
        size = getattr(self.source, "size", None)
        if size is None:
            try:
                size = os.fstat(self.source.fileno()).st_size
            except (AttributeError, OSError, io.UnsupportedOperation):
                size = None  # unknown (a pipe): read on, up to the limit
        if size is not None and size - self._pos > _DRAIN_LIMIT:
            return
        budget = _DRAIN_LIMIT
        try:
            while self._filling and budget > 0:
                data = self.read(budget)  # at the end, read() completes the cache file
                if not data:
                    break
                budget -= len(data)
        except Exception:
            pass  # the stream failed: the cache file is abandoned below


class _FillingRanges(_FillingStream):
    """A remote shard read by ranges (:class:`~wds_core.io.remote.rangestream.RangeStream`) while it fills the
    cache: its reader may request it ahead, among the shards of its list, as it does without a cache."""

    def attach(self, allowance: Any, first: bool) -> None:
        self.source.attach(allowance, first)  # type: ignore[attr-defined]

    def prefetch(self, size_too: bool = True) -> None:
        self.source.prefetch(size_too)  # type: ignore[attr-defined]  # it asks only while at its start
