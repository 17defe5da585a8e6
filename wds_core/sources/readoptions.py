"""What the stages that read shards are given: :class:`ShardReadOptions` and the recipe base :class:`ShardReading`.

``WebDataset(...)`` gathers how shards are opened and read into one
:class:`ShardReadOptions` and hands it to the stages that read (the shard
reader, the balanced split, the spec-file mixer); a reading recipe holds it
whole (its :class:`~wds_core.io.storage.Storage` context included), and it
travels with the recipe into worker processes, where the readers use its
fields as they are.  The readers themselves are in :mod:`.reader` and
:mod:`.recordstreams`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..handlers import Handler, reraise_exception
from ..io.remote.readahead import READ_AHEAD
from ..io.remote.retries import DEFAULT_RETRY
from ..io.storage import Storage
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
    """Base of the recipes that open shards: what they read with is one :class:`ShardReadOptions`, ``options``,
    taken whole (its error ``handler``, member selection, ``storage`` context, limits...): a new reading option is
    a field of it and its use, nothing in between.

    The storage context (a :class:`~wds_core.io.storage.Storage`) holds the storage
    options, the shard cache, the retry policy and the read-ahead plan; pickled
    with the recipe (to send it to worker processes) it carries the storage
    options and rewrites registered in this process, so that workers started
    with ``spawn`` open the same URLs the same way.  ``stats`` counts the
    remote requests it retried (``retries``), those that then succeeded
    (``recovered``) and those given up (``gave_up``), in this process (a
    worker's copy counts from zero).
    """

    options: ShardReadOptions

    def _read_with(self, options: ShardReadOptions) -> None:
        if not isinstance(options, ShardReadOptions):
            raise TypeError(f"a reading stage reads with ShardReadOptions, got {type(options).__name__}")
        DecodeLimits.of(options.limits)  # a wrong limit is refused here, not in a worker
        self.options = options  # its limits are resolved (over the configuration file) by each reader
        self.stats: Counter[str] = Counter()

    def open(self, url: str) -> Any:
        return self.options.storage.open(url, self.stats)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stats": Counter()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        if "options" not in state:  # pickled by an older wds: its loose settings
            if "storage" not in state:
                carried = state.pop("_registered", {})
                settings = [state.pop(name, None) for name in ("storage_options", "retry", "read_ahead", "cache")]
                state["storage"] = Storage(settings[0], settings[1] or DEFAULT_RETRY, settings[2] or READ_AHEAD,
                                           settings[3], carried)  # fmt: skip
            loose = {name: state.pop(name) for name in _LOOSE if name in state}
            state["options"] = ShardReadOptions(**loose)
        state.setdefault("stats", Counter())
        self.__dict__.update(state)


_LOOSE = ("handler", "select_files", "rename_files", "storage", "limits", "zero_copy", "local_path")
