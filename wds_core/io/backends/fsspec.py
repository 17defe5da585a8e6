"""Every scheme fsspec knows (``gs://``, ``az://``, ``hf://``, ``memory://``...), and the fallback of the
``http`` and ``s3`` backends for options only fsspec's clients know: the filesystem of a URL (:func:`filesystem`,
a missing package named with its install command), its objects read by ranges (:class:`FsspecSource`) and
written (:func:`fsspec_sink`: object stores upload on commit and cancel on abort, other filesystems write a
temporary object and move it into place).
"""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

from ...errors import ShardOpenError, install_hint
from ..partials import temporary_name
from ..remote.retries import DEFAULT_RETRY, RetryPolicy, cut_off, describe_error, with_retries
from ..shardsink import ShardSink

__all__ = ["FsspecSource", "connect", "filesystem", "fsspec_sink", "fsspec_source", "reading_filesystem"]

# the packages a scheme's fsspec backend needs, and the extra that brings them
_INSTALL_HINTS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs")}
_INSTALL_HINTS.update(http=("aiohttp", "http"), https=("aiohttp", "http"))


def filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """The fsspec filesystem and path for ``url``; a missing backend names its install command."""
    import fsspec

    protocol = url.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ValueError, ImportError) as exn:
        hint = _INSTALL_HINTS.get(protocol)
        extra = f"; install it with {install_hint(*hint)}" if hint else ""
        raise ShardOpenError(f"no storage backend for {protocol}:// URLs ({exn}){extra}", url=url) from None
    try:
        return fsspec.core.url_to_fs(url, **options)
    except (TypeError, ValueError, ImportError) as exn:
        raise ShardOpenError(f"cannot set up storage for this URL: {describe_error(exn)}", url=url) from None


def reading_filesystem(url: str, options: dict[str, Any]) -> tuple[Any, str]:
    """:func:`filesystem` for reading shards: the S3 backend's own retries off (the policy's are the only ones),
    unless ``options`` set ``config_kwargs={"retries": ...}``."""
    own = url.split("://", 1)[0] in ("s3", "s3a") and "retries" not in (options.get("config_kwargs") or {})
    if own:
        config = {**(options.get("config_kwargs") or {}), "retries": {"total_max_attempts": 1}}
        options = {**options, "config_kwargs": config}
    fs, path = filesystem(url, options)
    if own and isinstance(getattr(fs, "retries", None), int):
        fs.retries = 1  # s3fs's retry loop; this instance is wds's (its options differ from any other's)
    return fs, path


def connect(
    url: str, options: dict[str, Any], retry: RetryPolicy, stats: Counter[str] | None = None, reading: bool = True
) -> tuple[Any, str]:
    """:func:`reading_filesystem` (or :func:`filesystem`) of ``url``, made as a request of the retry policy.

    Some backends connect when they are made (``ftp://``, ``sftp://``): a
    server that does not answer is then retried like any request, and with a
    ``budget`` the attempt is given up when the budget is spent (it runs in a
    thread that is left to the backend's own timeout), as a
    :class:`ShardOpenError` naming the URL.
    """
    make = reading_filesystem if reading else filesystem

    def attempt(left: float | None) -> tuple[Any, str]:
        return cut_off(lambda: make(url, options), left, "connecting")  # type: ignore[no-any-return]

    return with_retries("connect to the store", attempt, url, None, retry, stats)


def fsspec_source(url: str, options: dict[str, Any], retry: RetryPolicy, stats: Counter[str] | None = None) -> Any:
    """An :class:`FsspecSource` of ``url``, its filesystem made with :func:`connect`."""
    fs, path = connect(url, options, retry, stats)
    return FsspecSource(fs, path, retry)


def _within(method: Any, left: float | None) -> dict[str, Any]:
    """Keyword arguments that cut a call of ``method`` off after ``left`` seconds, when it can be.

    fsspec runs an async backend's coroutine for its blocking methods and accepts ``timeout=`` there
    (cancelling the coroutine, retries and all); other methods run as they are.
    """
    if left is None or not inspect.iscoroutinefunction(getattr(method, "__wrapped__", None)):
        return {}
    return {"timeout": left}


class FsspecSource:
    """An object of an fsspec filesystem.  Its reads cannot be watched byte by byte: each range is given the time
    its bytes take at the retry policy's least rate (:meth:`RetryPolicy.attempt_time`), which an async backend is
    cut off at."""

    sizes_in_ranges = False

    def __init__(self, fs: Any, path: str, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self.fs, self.path, self.retry = fs, path, retry

    def get(self, start: int, end: int, left: float | None) -> tuple[bytes, int | None]:
        cat = self.fs.cat_file
        return cat(self.path, start=start, end=end, **_within(cat, self.retry.attempt_time(end - start, left))), None

    def info(self, left: float | None) -> dict[str, Any]:
        info_of = self.fs.info
        return info_of(self.path, **_within(info_of, left))


# Object stores whose uploads become visible only when the file is closed (multipart or resumable upload)
_UPLOAD_ON_CLOSE = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"}


def _open_for_writing(fs: Any, path: str, url: str) -> Any:
    try:
        return fs.open(path, "wb")
    except (OSError, ValueError) as exn:
        raise _failure("create", exn, url) from None


class _ObjectSink(ShardSink):
    """An object-store upload: nothing is visible until ``commit`` completes it; ``abort`` cancels it."""

    def __init__(self, url: str, fs: Any, path: str) -> None:
        self.url = url
        self.file = _open_for_writing(fs, path, url)
        self.write = self.file.write  # type: ignore[method-assign, assignment]

    def commit(self) -> None:
        try:
            self.file.close()
        except OSError as exn:
            raise _failure("finish", exn, self.url) from None

    def abort(self) -> None:
        try:
            self.file.discard()
        finally:
            self.file.closed = True  # a later close() (e.g. by the garbage collector) must not complete the upload


class _MoveSink(ShardSink):
    """Other fsspec filesystems: write a temporary object beside the destination, then move it into place."""

    def __init__(self, url: str, fs: Any, path: str) -> None:
        self.url, self.fs, self.path = url, fs, path
        head, _, name = path.rpartition("/")
        self.temp = f"{head}/{temporary_name(name)}" if head else temporary_name(name)
        self.file = _open_for_writing(fs, self.temp, url)
        self.write = self.file.write  # type: ignore[method-assign, assignment]

    def commit(self) -> None:
        try:
            self.file.close()
            self.fs.mv(self.temp, self.path)
        except OSError as exn:
            self.abort()
            raise _failure("finish", exn, self.url) from None

    def abort(self) -> None:
        try:
            self.file.close()
        finally:
            try:
                self.fs.rm(self.temp)
            except OSError:
                pass


def _failure(what: str, exn: BaseException, url: str) -> ShardOpenError:
    return ShardOpenError(f"cannot {what} shard: {describe_error(exn)}", url=url)


def fsspec_sink(url: str, options: dict[str, Any]) -> ShardSink:
    """An fsspec URL's destination, with the storage ``options`` that apply to it."""
    fs, path = filesystem(url, options)
    if url.split("://", 1)[0] in _UPLOAD_ON_CLOSE:
        return _ObjectSink(url, fs, path)
    return _MoveSink(url, fs, path)
