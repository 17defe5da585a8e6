"""What the stages that read shards are given: :class:`ShardReadOptions` and the recipe base :class:`ShardReading`.

``WebDataset(...)`` gathers how shards are opened and read into one
:class:`ShardReadOptions` and hands it to the stages that read (the shard
reader, the balanced split, the spec-file mixer); a reading recipe holds the
storage part of it as one :class:`~wds_core.io.storage.Storage` context, which
travels with the recipe into worker processes.  The readers themselves are in
:mod:`.reader` and :mod:`.recordstreams`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..handlers import Handler, reraise_exception
from ..io.cache import ShardCache
from ..io.remote.readahead import READ_AHEAD, ReadAhead
from ..io.remote.retries import DEFAULT_RETRY, RetryPolicy
from ..io.storage import Storage
from ..io.storage_config import StorageOptions
from ..limits import DecodeLimits
from ..state import Recipe

__all__ = ["ShardReadOptions", "ShardReading"]


@dataclass(frozen=True)
class ShardReadOptions:
    """How shards are opened and read into samples: what ``WebDataset(...)`` hands to the stages that read.

    ``handler`` for a shard that cannot be opened or read, ``select_files`` / ``rename_files`` for its members, the
    ``storage`` context (:class:`~wds_core.io.storage.Storage`: options, cache, retries, read-ahead) and the
    ``limits`` one member and one sample may take (:class:`~wds_core.limits.DecodeLimits` or a dict of some;
    default: the configuration file's).  ``zero_copy=True`` gives the members of local uncompressed shards as
    read-only ``memoryview`` slices of the mapped file (``bytes(view)`` to keep one; they arrive as bytes in
    another process; do not rewrite a shard in place while it is read: a truncated map is ``SIGBUS``).
    ``local_path=True`` gives each sample ``"__local_path__"`` (where its shard's bytes are on this machine), as
    webdataset's ``WebDataset`` does; ``None``, the default, is the reader's own default (``WebDataset``: yes,
    ``tarfile_to_samples()``: no).  ``check_versions=False`` restores a checkpoint inside a shard whose version
    changed (a file's modification time, an object's ETag): for a dataset copied since, its bytes the same; the
    member at the checkpoint's offset is checked all the same (:mod:`~wds_core.sources.reader`).
    """

    handler: Handler = reraise_exception
    select_files: Callable[[str], bool] | None = None
    rename_files: Callable[[str], str] | None = None
    storage: Storage = field(default_factory=Storage)
    limits: Any = None
    zero_copy: bool = False
    local_path: bool | None = None
    check_versions: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.storage, Storage):
            raise TypeError(f"storage must be a Storage, got {type(self.storage).__name__}")

    def with_storage(self, storage: Storage) -> ShardReadOptions:
        """The same options with another storage context."""
        return replace(self, storage=storage)


class ShardReading(Recipe):
    """Base of the recipes that open shards: the error ``handler`` and the storage context.

    ``storage`` (a :class:`~wds_core.io.storage.Storage`) holds the storage
    options, the shard cache, the retry policy and the read-ahead plan; pickled
    with the recipe (to send it to worker processes) it carries the storage
    options and rewrites registered in this process, so that workers started
    with ``spawn`` open the same URLs the same way.  ``stats`` counts the
    remote requests it retried (``retries``), those that then succeeded
    (``recovered``) and those given up (``gave_up``), in this process (a
    worker's copy counts from zero).
    """

    handler: Handler
    storage: Storage
    check_versions = True  # a restored shard's version is checked (a recipe pickled before the option: yes)

    def _set_storage(self, storage: Storage, limits: Any = None) -> None:
        DecodeLimits.of(limits)  # a wrong limit is refused here, not in a worker
        self.limits = limits  # resolved (over the configuration file) by each reader: ShardReader.limits
        self.storage = storage
        self.stats: Counter[str] = Counter()

    @property
    def storage_options(self) -> StorageOptions | None:
        """The explicit storage options (the storage context's)."""
        return self.storage.options

    @property
    def cache(self) -> ShardCache | None:
        return self.storage.cache

    @property
    def retry(self) -> RetryPolicy:
        return self.storage.retry

    @property
    def read_ahead(self) -> ReadAhead:
        """How far ahead remote shards are requested."""
        return self.storage.read_ahead

    def open(self, url: str) -> Any:
        return self.storage.open(url, getattr(self, "stats", None))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stats": Counter()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        if "storage" not in state:  # pickled before the storage context: its loose settings
            carried = state.pop("_registered", {})
            settings = [state.pop(name, None) for name in ("storage_options", "retry", "read_ahead", "cache")]
            state["storage"] = Storage(settings[0], settings[1] or DEFAULT_RETRY, settings[2] or READ_AHEAD,
                                       settings[3], carried)  # fmt: skip
        self.__dict__.update(state)
