"""The storage layer: every shard (and descriptor, spec file, index, counts file) is opened and written here.

A :class:`Storage` is the storage context of a pipeline, a writer or a command: the explicit storage options
(flat, or keyed by URL prefix), the retry policy, the read-ahead plan and the shard cache.  It is frozen data:
pickled with a pipeline into worker processes, it carries the options and rewrites registered in the process that
made it (those registered in the worker win), so a worker started with ``spawn`` opens every URL the same way,
and nothing is written into the worker's own registry.

For each URL the context applies the rewrites (once), secure mode's allowlist (:mod:`.secure`) and the cache, and
hands the URL to its backend (:mod:`.backends`: local files, ``-``, ``pipe:``, the remote engine for fsspec URLs,
registered openers and backends):

* :meth:`Storage.open` / :func:`open_shard` -- a binary stream (a local file unbuffered: readers ask for large
  blocks; a ``pipe:`` command whose failure is an error naming it, never a silently short shard; a remote object
  read by ranges requested ahead, retried and resumed: :mod:`.remote`);
* :meth:`Storage.random_access` / :func:`open_random_access` -- bytes by offset (memory-mapped, or ranges);
* :meth:`Storage.create` / :func:`create_shard` -- a :class:`~.shardsink.ShardSink` (:mod:`.destinations`,
  :mod:`.commands`);
* :meth:`Storage.read_bytes` / :func:`read_bytes` -- a whole (small) object.

The functions take ``storage``: a :class:`Storage`, or the explicit options from which one is made (webdataset's
word, ``storage_options=``, still works in the native API with a ``DeprecationWarning``: :func:`storage_argument`).
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO

from ..errors import ShardNotFoundError
from . import files
from .backends import OPENERS, Backend, backend_for, register_backend, register_opener, route, scheme_opener
from .backends.ranged import RangedBackend
from .cache import ShardCache
from .commands import PipeStream, pipe_failure
from .destinations import StreamSink
from .localfiles import RandomAccess, local_path, local_random_access, open_local, url_of
from .remote.readahead import READ_AHEAD, ReadAhead
from .remote.retries import DEFAULT_RETRY, RetryPolicy
from .secure import check_allowed
from .shardsink import ShardSink
from .storage_config import StorageOptions, options_for, options_over, registered, rewrite_url

__all__ = [
    "OPENERS",
    "PipeStream",
    "RandomAccess",
    "Storage",
    "create_shard",
    "local_path",
    "local_random_access",
    "open_local",
    "open_random_access",
    "open_shard",
    "pipe_failure",
    "read_bytes",
    "storage_argument",
    "register_backend",
    "register_opener",
    "remote_url",
    "scheme_opener",
    "url_of",
]


@dataclass(frozen=True, eq=False)
class Storage:
    """How a pipeline, writer or command reaches its storage (see the module doc); frozen and picklable.

    ``options``: the explicit storage options (flat, or keyed by URL prefix), merged over the registered and
    configured ones for each URL; ``retry``: the policy of every remote request; ``read_ahead``: how far ahead
    remote shards are requested; ``cache``: a :class:`~wds_core.io.cache.ShardCache` or ``None``.
    """

    options: StorageOptions | None = None
    retry: RetryPolicy = DEFAULT_RETRY
    read_ahead: ReadAhead = READ_AHEAD
    cache: ShardCache | None = None
    carried: dict[str, Any] = field(default_factory=dict, repr=False)  # registered options from the maker

    def __post_init__(self) -> None:
        if self.options is not None and not isinstance(self.options, dict):
            raise TypeError(f"storage_options must be a dict, got {type(self.options).__name__}")
        if self.options is not None and not isinstance(self.options, StorageOptions):
            object.__setattr__(self, "options", StorageOptions(self.options))
        if not isinstance(self.retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy, got {type(self.retry).__name__}")
        if not isinstance(self.read_ahead, ReadAhead):
            raise TypeError(f"read_ahead must be a ReadAhead, got {type(self.read_ahead).__name__}")
        if self.cache is not None and not isinstance(self.cache, ShardCache):
            raise TypeError(f"cache must be a ShardCache, got {type(self.cache).__name__}")

    @classmethod
    def of(cls, given: Any = None, **settings: Any) -> Storage:
        """``given`` as a context: a :class:`Storage` as it is (``settings`` replaced in a copy), or
        explicit options (or ``None``) with ``settings`` (``retry=``, ``read_ahead=``, ``cache=``; ``None`` for
        the default)."""
        settings = {name: value for name, value in settings.items() if value is not None}
        if isinstance(given, Storage):
            return replace(given, **settings) if settings else given
        return cls(given, **settings)

    def with_options(self, options: dict[str, Any] | None, urls: list[str]) -> Storage:
        """This context with ``options`` over its own for the URLs ``urls`` (a dataset-spec source's own
        ``storage_options``, which apply to its shards only)."""
        if options is None:
            return self
        return replace(self, options=StorageOptions(options_over(self.options, options, urls) or {}))

    def __getstate__(self) -> dict[str, Any]:
        mine = registered()
        carried = {kind: {**self.carried.get(kind, {}), **mine[kind]} for kind in ("storage", "rewrite")}
        return {**self.__dict__, "carried": carried}  # unpickling sets these fields as they are (frozen or not)

    def rewrite(self, url: str) -> str:
        """``url`` after the rewrites (:func:`~wds_core.io.storage_config.rewrite_url`)."""
        return rewrite_url(url, self.carried)

    def options_for(self, url: str) -> StorageOptions:
        """The storage options that apply to ``url`` (configured, registered, then explicit)."""
        return options_for(url, self.options, self.carried)

    def backend(self, url: str) -> Backend:
        """The backend of ``url`` (rewritten already)."""
        return backend_for(url)

    def _routed(self, url: str, action: str = "read") -> Backend:
        """The backend of ``url`` (rewritten already), which secure mode allows ``action`` on: one reading of the
        URL decides both."""
        found = route(url)
        check_allowed(url, action, found.opener)
        return found.backend

    def redact(self, url: str) -> str:
        """``url`` fit for a message."""
        return self.backend(url).redact(url)

    def open(self, url: str, stats: Counter[str] | None = None, rewritten: bool = False) -> BinaryIO:
        """``url`` for reading as a binary stream; the caller closes it.  A remote shard's retries are counted
        in ``stats`` too.  The URL is rewritten once, here, unless the caller did (``rewritten``)."""
        if not rewritten:
            url = self.rewrite(url)
        backend = self._routed(url)
        if self.cache is not None and backend.cached(self.cache):
            return self.cache.open(url, lambda: backend.open(url, self, stats))
        return backend.open(url, self, stats)

    def local_copy(self, url: str) -> str | None:
        """Where ``url``'s bytes are on this machine, as webdataset's readers say it (``__local_path__``): the path
        of a local shard, the file of its copy in the shard cache (for the shards the cache keeps), else ``None``."""
        target = self.rewrite(url)
        path = local_path(target)
        if path is None and self.cache is not None and self.backend(target).cached(self.cache):
            return self.cache.path_for(target)
        return path

    def random_access(self, url: str, size: int | None = None) -> RandomAccess:
        """Random access to a shard: memory-mapped when it is local, byte-range requests when it is remote.

        ``url`` goes through the rewrites; ``size``, when known (a descriptor's ``filesize``), saves asking the
        server.  Errors name ``url`` as given.
        """
        target = self.rewrite(url)
        access = self._routed(target).random_access(target, self, size)
        access.url = url
        return access

    def create(self, dest: Any) -> ShardSink:
        """Start writing ``dest``: a path, ``file://``/fsspec URL, ``-`` (stdout), ``pipe:CMD`` or a binary
        stream (left open)."""
        if hasattr(dest, "write"):
            return StreamSink(dest, repr(getattr(dest, "name", dest)))
        dest = os.fspath(dest)
        if not isinstance(dest, str):
            raise TypeError(f"a shard destination is a path, URL or stream, got {type(dest).__name__}")
        return self._routed(dest, "write").create(dest, self)

    def size(self, url: str) -> int | None:
        """The size of the shard at ``url`` in bytes (``None`` when its kind cannot say: a command, standard
        input, a registered opener's URL); a missing one is a :class:`~wds_core.errors.ShardNotFoundError`."""
        target = self.rewrite(url)
        return self._routed(target).size(target, self)

    def exists(self, url: str) -> bool:
        """Whether ``url`` names a shard that is there (``False`` when its kind cannot say)."""
        try:
            return self.size(url) is not None
        except ShardNotFoundError:
            return False

    def read_bytes(self, url: str) -> bytes:
        """The whole object at ``url``, opened as shards are (rewrites, storage options, retries)."""
        with self.open(url) as stream:
            return bytes(stream.read())

    def write_bytes(self, url: str, data: bytes) -> None:
        """Write a whole (small) object, atomically: a local path through a temporary file renamed into place,
        a URL through :meth:`create` (never half an object)."""
        local = local_path(url)
        if local is not None:
            files.write_atomic(local, data)  # through the gate: secure mode's roots, never through a link
            return
        sink = self.create(url)
        try:
            sink.write(data)
        except BaseException:
            sink.abort()
            raise
        sink.commit()


#: the native word for how shards are reached, which the DeprecationWarning of webdataset's ``storage_options=``
#: gives (``wds_core.datasetplan``'s table of webdataset's keywords says it with these words)
STORAGE_SPELLING = "storage=... (storage options, or a Storage)"


def storage_argument(entry: str, storage: Any, storage_options: Any, stacklevel: int = 3) -> Any:
    """What a native entry point ``entry`` was given for ``storage=``: ``storage``, or webdataset's word for it,
    ``storage_options`` (the same value), with a ``DeprecationWarning`` naming the native one; both: a TypeError."""
    if storage_options is None:
        return storage
    if storage is not None:
        raise TypeError(f"{entry}() got both storage= and storage_options=: pass one")
    warnings.warn(
        f"{entry}(storage_options=...): webdataset's word is deprecated in the native API (the drop-in keeps it): "
        f"storage_options= -> {STORAGE_SPELLING}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    return storage_options


def open_shard(
    url: str,
    storage: Any = None,
    cache: ShardCache | None = None,
    retry: RetryPolicy | None = None,
    stats: Counter[str] | None = None,
    rewritten: bool = False,
    plan: ReadAhead | None = None,
    *,
    storage_options: Any = None,
) -> BinaryIO:
    """Open ``url`` for reading as a binary stream; the caller closes it (:meth:`Storage.open`).

    ``storage`` is a :class:`Storage`, or the explicit options (flat, or keyed by URL prefix) merged over
    the registered and configured ones; ``cache``, ``retry`` and ``plan`` (the read-ahead) replace the context's.
    """
    storage = storage_argument("open_shard", storage, storage_options)
    return Storage.of(storage, cache=cache, retry=retry, read_ahead=plan).open(url, stats, rewritten)


def open_random_access(
    url: str, storage: Any = None, retry: RetryPolicy | None = None, size: int | None = None, *,
    storage_options: Any = None,
) -> RandomAccess:  # fmt: skip
    """Random access to a shard (:meth:`Storage.random_access`)."""
    storage = storage_argument("open_random_access", storage, storage_options)
    return Storage.of(storage, retry=retry).random_access(url, size)


def create_shard(dest: Any, storage: Any = None, *, storage_options: Any = None) -> ShardSink:
    """Start writing ``dest`` (:meth:`Storage.create`)."""
    return Storage.of(storage_argument("create_shard", storage, storage_options)).create(dest)


def read_bytes(url: str, storage: Any = None, *, storage_options: Any = None) -> bytes:
    """The whole object at ``url`` (:meth:`Storage.read_bytes`)."""
    return Storage.of(storage_argument("read_bytes", storage, storage_options)).read_bytes(url)


def remote_url(url: str) -> bool:
    """Whether ``url`` is read by ranged requests (the remote engine): not a local path, ``-``, ``pipe:`` or a
    registered opener's or backend's."""
    return isinstance(backend_for(url), RangedBackend)
