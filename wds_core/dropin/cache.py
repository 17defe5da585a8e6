"""``webdataset.cache``: shard caching by webdataset's names.

wds caches shards with :class:`~wds_core.io.cache.ShardCache` (filled while a
shard streams, atomic, LRU); ``WebDataset(..., cache_dir=...)`` uses it.  Here
are webdataset's pieces for code that builds its own reader:
``FileCache`` (download each shard into a folder, then open it),
``StreamingOpen`` (open each URL), ``LRUCleanup`` (keep a folder under a size),
``url_to_cache_name``/``pipe_cleaner`` (file names for URLs), and webdataset
0.2's ``cached_tarfile_to_samples``.
"""

from __future__ import annotations

import os
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

from ..errors import redact_url
from ..handlers import Handler, reraise_exception
from ..io import files
from ..io.cache import ShardCache
from ..io.storage import Storage, local_path, open_shard, url_of
from ..sources.tarsamples import TarfileToSamples
from . import filters, hooks  # noqa: F401 - filters: as webdataset 0.2's module imports it
from ._refuse import refuse_missing
from .gopen import as_module as gopen  # noqa: F401 - 0.2's ``cache.gopen``, the module
from .tariterators import group_by_keys, tar_file_expander, tarfile_to_samples  # noqa: F401 - 0.2's names here
from .utils import obsolete  # noqa: F401 - 1.0.2's import

#: webdataset's defaults for its cache, from the same variables (``WDS_CACHE``, ``WDS_CACHE_SIZE`` in bytes,
#: ``WDS_VERBOSE_CACHE``); wds's own cache takes its folder and size from ``Storage`` (remote-storage guide)
default_cache_dir = os.environ.get("WDS_CACHE", "./_cache")
default_cache_size = float(os.environ.get("WDS_CACHE_SIZE", "1e18"))
verbose_cache = int(os.environ.get("WDS_VERBOSE_CACHE", "0"))

__getattr__ = refuse_missing(
    __name__,
    {
        "cached_url_opener": "a piece of webdataset 0.2's cache; FileCache and cached_tarfile_to_samples do its job",
        "get_file_cached": "a piece of webdataset 0.2's cache; FileCache(cache_dir).get_file(url) does its job",
        "get_filetype": "it runs the `file` command on each download; wds checks a shard's tar header itself "
        "(check_tar_format)",
        "magic_filetype": "it needs python-magic; wds checks a shard's tar header itself (check_tar_format)",
    },
)

__all__ = [
    "FileCache",
    "LRUCleanup",
    "StreamingOpen",
    "cached_tarfile_samples",
    "cached_tarfile_to_samples",
    "check_tar_format",
    "download",
    "islocal",
    "lru_cleanup",
    "maybe_cached_tarfile_to_samples",
    "pipe_cleaner",
    "url_to_cache_name",
]


def islocal(url: str) -> bool:
    """A plain path or ``file:`` URL."""
    return urllib.parse.urlparse(url).scheme in ("", "file")


def check_tar_format(fname: str) -> bool:
    """Whether the file starts like a tar archive (``ustar`` magic) or a gzip stream."""
    with files.open_file(fname, "rb") as stream:
        head = stream.read(512)
    return head[:2] == b"\x1f\x8b" or head[257:262] == b"ustar"


def pipe_cleaner(spec: str) -> str:
    """The URL a ``pipe:`` command reads (its first ``http(s)``/``gs``/``s3``/``hdfs``/``ais`` word), or the command."""
    if not spec.startswith("pipe:"):
        return spec
    command = spec[len("pipe:") :]
    return next((word for word in command.split(" ") if re.match(r"^(https?|hdfs|gs|ais|s3):", word)), command)


def _cache_name(url: str) -> str:
    """webdataset 0.2's cache file name: the URL a command reads, or the URL or path itself, made relative."""
    return pipe_cleaner(url).replace("://", "/").lstrip("/")


class NotAUrlError(TypeError, AssertionError):
    """A URL that is not text: webdataset asserts it is, so code written for it catches either."""


def url_to_cache_name(url: str, ndir: int = 0) -> str:
    """The last ``ndir + 1`` path components of a URL, or the quoted URL for other schemes."""
    if not isinstance(url, str):
        raise NotAUrlError(f"url_to_cache_name needs the URL as text, got {type(url).__name__}")
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file", "http", "https", "ftp", "ftps", "gs", "s3", "ais"):
        return "/".join(parsed.path.lstrip("/").split("/")[-1 - ndir :])
    return urllib.parse.quote(url, safe="_+{}*,-")[-128:]


def download(url: str, dest: str, chunk_size: int = 1 << 20, verbose: bool = False) -> None:
    """Copy ``url`` (anything wds opens; ``gopen.gopen`` when code replaced it) to the file ``dest``, which appears
    only when complete."""
    replaced = hooks.replacement("gopen", "gopen")
    with replaced(url) if replaced is not None else open_shard(url) as source:
        files.copy_stream(source, dest, chunk_size)
    if verbose:
        print(f"# downloaded {redact_url(url)} to {dest}", file=sys.stderr)


def _changed(path: str) -> float:
    """When the file ``path`` last changed (``os.path.getctime``, through the gate): webdataset's eviction order."""
    return files.stat(path).st_ctime


class LRUCleanup:
    """Delete the files of ``cache_dir`` with the smallest ``keyfn(path)`` until it holds at most ``cache_size`` bytes.

    ``cleanup()`` does nothing if it ran less than ``interval`` seconds ago.
    """

    def __init__(
        self,
        cache_dir: str | None = None,
        cache_size: float = 10**12,
        keyfn: Callable[[str], float] = _changed,
        verbose: bool = False,
        interval: float | None = 30,
    ) -> None:
        self.cache_dir, self.cache_size, self.keyfn = cache_dir, cache_size, keyfn
        self.verbose, self.interval, self.last_run = verbose, interval, 0.0

    def set_cache_dir(self, cache_dir: str) -> None:
        self.cache_dir = cache_dir

    def cleanup(self) -> None:
        if self.cache_dir is None or not files.isdir(self.cache_dir):
            return
        if self.interval is not None and time.time() - self.last_run < self.interval:
            return
        sizes = {}
        for root, _, names in files.walk(self.cache_dir):
            for name in names:
                try:
                    sizes[os.path.join(root, name)] = files.getsize(os.path.join(root, name))
                except FileNotFoundError:
                    continue
        total = sum(sizes.values())
        for path in sorted(sizes, key=self.keyfn):
            if total <= self.cache_size:
                break
            files.remove(path)
            total -= sizes[path]
            if self.verbose:
                print(f"# deleting {path}", file=sys.stderr)
        self.last_run = time.time()


def lru_cleanup(
    cache_dir: str,
    cache_size: float,
    keyfn: Callable[[str], float] = _changed,
    verbose: bool = False,
) -> None:
    """webdataset 0.2's function form of :class:`LRUCleanup` (runs now)."""
    LRUCleanup(cache_dir, cache_size, keyfn, verbose, interval=None).cleanup()


class StreamingOpen:
    """Open each URL (``str`` or ``{"url": ...}``): ``{"url", "stream"}`` items, plus ``"local_path"`` for files.

    Streams come from ``storage`` (wds's storage layer with its options; ``None``: the process's), or, for URLs
    other than local files, from ``gopen.gopen`` when code replaced it, as webdataset opens them.
    """

    def __init__(
        self, verbose: bool = False, handler: Handler = reraise_exception, *, storage: Storage | None = None
    ) -> None:
        self.verbose, self.handler, self.storage = verbose, handler, storage

    def _open(self, url: str) -> Any:
        replaced = hooks.replacement("gopen", "gopen")
        if replaced is not None and local_path(url) is None:  # webdataset opens local files itself
            return replaced(url)
        return self.storage.open(url) if self.storage is not None else open_shard(url)

    def __call__(self, urls: Iterable[Any]) -> Iterator[dict[str, Any]]:
        for item in urls:
            url = url_of(item)
            try:
                sample: dict[str, Any] = {"url": url, "stream": self._open(url)}
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            path = local_path(url)
            if path is not None:
                sample["local_path"] = path
            if self.verbose:
                print(f"# opened {redact_url(url)}", file=sys.stderr)
            yield sample


class FileCache:
    """Download each URL into ``cache_dir`` (named by ``url_to_name``) unless it is there, then open the file.

    Local URLs are opened where they are.  ``validator(path)`` checks a new
    download (a file that fails it is deleted and the error goes to
    ``handler``); over ``cache_size`` bytes (when positive) the oldest files go.
    """

    def __init__(
        self,
        cache_dir: str | None = None,
        *,
        url_to_name: Callable[[str], str] = url_to_cache_name,
        verbose: bool = False,
        validator: Callable[[str], bool] | None = check_tar_format,
        handler: Handler = reraise_exception,
        cache_size: int = -1,
        cache_cleanup_interval: float = 30,
    ) -> None:
        self.cache_dir = cache_dir if cache_dir is not None else os.environ.get("WDS_CACHE", "./_cache")
        self.url_to_name, self.verbose, self.validator, self.handler = url_to_name, verbose, validator, handler
        self.cleaner = LRUCleanup(self.cache_dir, cache_size, verbose=verbose, interval=cache_cleanup_interval)
        self.cleaner.cache_size = cache_size if cache_size > 0 else sys.maxsize

    def get_file(self, url: str) -> str:
        """The local file of ``url``, downloaded first when needed."""
        if islocal(url):
            return urllib.parse.urlparse(url).path
        name = os.path.normpath(self.url_to_name(url))
        if os.path.isabs(name) or name.split(os.sep)[0] == "..":
            raise ValueError(
                f"url_to_name must give a relative path inside the cache, got {name!r} for {redact_url(url)}"
            )
        dest = os.path.join(self.cache_dir, name)
        if not files.exists(dest):
            files.makedirs(os.path.dirname(dest) or ".")
            self.cleaner.cleanup()
            download(url, dest, verbose=self.verbose)
            if self.validator is not None and not self.validator(dest):
                with files.open_file(dest, "rb") as stream:
                    head = stream.read(200)
                files.remove(dest)
                raise ValueError(f"{redact_url(url)} (cached as {dest}) is not a tar archive; it starts with {head!r}")
        return dest

    def __call__(self, urls: Iterable[Any]) -> Iterator[dict[str, Any]]:
        for item in urls:
            url = url_of(item)
            try:
                dest = self.get_file(url)
                stream = self._open(url, dest)
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            yield {"url": url, "stream": stream, "local_path": dest}

    def _open(self, url: str, dest: str) -> BinaryIO:
        if not islocal(url):
            return files.open_file(dest, "rb")  # type: ignore[return-value]  # a download of ours, in the cache
        return open_shard(url)  # the user's own file, opened as every shard is (secure mode's roots included)


def cached_tarfile_to_samples(
    cache_size: int = -1,
    cache_dir: str | None = None,
    verbose: bool = False,
    url_to_name: Callable[[str], str] | None = None,
    always: bool = False,
    handler: Handler = reraise_exception,
) -> TarfileToSamples:
    """webdataset 0.2's caching reader stage: wds's reader with a :class:`ShardCache` (``always``: local shards too).

    Files are named as webdataset names them (``cache_dir/<the URL or path, relative>``) unless
    ``url_to_name`` says otherwise.
    """
    folder = cache_dir or os.environ.get("WDS_CACHE", "./_cache")
    cache = ShardCache(folder, cache_size, always, url_to_name or _cache_name, verbose)
    return TarfileToSamples(handler, cache=cache)


def cached_tarfile_samples(src: Iterable[Any], **kw: Any) -> Iterator[dict[str, Any]]:
    """:func:`cached_tarfile_to_samples` run on an iterator of shard URLs."""
    return iter(cached_tarfile_to_samples(**kw)(iter(src)))


def maybe_cached_tarfile_to_samples(
    cache_dir: str | None = None,
    cache_size: int = -1,
    verbose: bool = False,
    url_to_name: Callable[[str], str] | None = None,
    always: bool = False,
    handler: Handler = reraise_exception,
) -> TarfileToSamples:
    """The caching reader when ``cache_dir`` is given, else the plain one (the cache settings then have no cache)."""
    if cache_dir is None:
        return TarfileToSamples(handler)
    return cached_tarfile_to_samples(cache_size, cache_dir, verbose, url_to_name, always, handler)
