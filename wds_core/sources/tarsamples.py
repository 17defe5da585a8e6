"""The stage that reads tar shards into samples (:class:`TarfileToSamples`, webdataset's ``tarfile_to_samples()``):
a :class:`~.reader.ShardReader` whose items are the samples that :func:`~wds_core.tar.tario.iter_members` and
:func:`~wds_core.tar.grouping.group_members` make of each shard.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import CheckpointError, SampleError, TarFormatError
from ..handlers import Handler, reraise_exception
from ..io.cache import ShardCache
from ..io.localfiles import file_descriptor, map_whole
from ..io.remote.rangestream import RetryPolicy
from ..io.remote.readahead import ReadAhead
from ..io.storage import Storage, storage_argument
from ..state import RunContext
from ..tar.cursor import name_digest
from ..tar.grouping import group_members, is_meta
from ..tar.members import Item, TarOptions
from ..tar.resume import skip_to
from ..tar.tario import iter_members
from .reader import ShardReader, older_state, stream_version
from .readoptions import ShardReading, ShardReadOptions

__all__ = ["TarfileToSamples", "tarfile_to_samples"]


class TarfileToSamples(ShardReading):
    """Stage: a stream of shards (URLs or ``{"url": ...}``) to a stream of samples.

    ``handler`` decides what happens when a shard cannot be opened or is
    corrupt: the samples completed before the problem are always delivered, and
    so are the members read whole of the sample in progress when the handler
    goes on (its ``True`` moves on to the next shard, ``False`` ends the
    stream).  ``select_files(name)`` keeps only the members it accepts (their
    data is not even read); ``rename_files(name)`` renames members before
    grouping.  A member larger than the ``field_bytes``
    limit, or a sample whose members pass ``sample_bytes``, is refused before it
    is read (``limits``: see :class:`ShardReadOptions`), a compressed shard's
    members included.  While a remote shard is read, the next shards of the list
    (``ReadAhead.shards_ahead``) are requested ahead (:mod:`~wds_core.io.remote.readahead`).
    ``zero_copy=True`` and ``local_path=True``: see :class:`ShardReadOptions`; :meth:`from_options` takes the
    options whole (every other reading option is one of theirs).
    """

    def __init__(
        self,
        handler: Handler = reraise_exception,
        select_files: Callable[[str], bool] | None = None,
        rename_files: Callable[[str], str] | None = None,
        storage: Storage | dict | None = None,
        cache: ShardCache | None = None,
        retry: RetryPolicy | None = None,
        limits: Any = None,
        read_ahead: ReadAhead | None = None,
        zero_copy: bool = False,
        local_path: bool = False,
        *,
        storage_options: Storage | dict | None = None,
    ) -> None:
        given = storage_argument("TarfileToSamples", storage, storage_options)
        storage = Storage.of(given, cache=cache, retry=retry, read_ahead=read_ahead)
        self._read_with(ShardReadOptions(handler, select_files, rename_files, storage, limits, bool(zero_copy),
                                         bool(local_path)))  # fmt: skip

    @classmethod
    def from_options(cls, options: ShardReadOptions) -> TarfileToSamples:
        """The stage reading shards as ``options`` say (taken whole)."""
        stage = cls.__new__(cls)
        stage._read_with(options)
        return stage

    def build(self, src: Any, ctx: RunContext) -> _TarSamplesIterator:
        return _TarSamplesIterator(src, self)

    def want(self) -> Callable[[str], bool] | None:
        select, rename = self.options.select_files, self.options.rename_files
        if select is None:
            return None
        if rename is None:
            return lambda name: not is_meta(name) and select(name)
        return lambda name: not is_meta(name) and select(rename(name))


def tarfile_to_samples(
    handler: Handler = reraise_exception,
    select_files: Callable[[str], bool] | None = None,
    rename_files: Callable[[str], str] | None = None,
    storage: Storage | dict | None = None,
    cache: ShardCache | None = None,
    retry: RetryPolicy | None = None,
    limits: Any = None,
    zero_copy: bool = False,
    *,
    storage_options: Storage | dict | None = None,
) -> TarfileToSamples:
    """webdataset's ``tarfile_to_samples()``: the stage that reads shards into samples (:class:`TarfileToSamples`)."""
    storage = storage_argument("tarfile_to_samples", storage, storage_options)
    return TarfileToSamples(handler, select_files, rename_files, storage, cache, retry, limits, zero_copy=zero_copy)


class _TarSamplesIterator(ShardReader):
    def __init__(self, src: Any, recipe: TarfileToSamples) -> None:
        super().__init__(src, recipe)
        self.pax_global: dict[str, str] = {}
        self.restored_member: str | None = None  # the digest of the member a restored state's offset is at

    def _own_state(self) -> dict[str, Any]:
        state = super()._own_state()
        if self.reading() and self.pax_global:
            state["pax_global"] = dict(self.pax_global)
        if self.reading() and self.offset > 0:  # "": a refusal of extension headers, which have no name yet
            state["member"] = name_digest(self.cursor.name) if self.cursor.name is not None else ""
        return state

    def _load_own_state(self, state: dict[str, Any]) -> None:
        super()._load_own_state(state)
        self.pax_global = dict(state.get("pax_global", {}))
        member = state.get("member")
        if self.offset > 0 and not isinstance(member, str):
            what = f"{self._where()} resumes at offset {self.offset} of its shard without saying which member is there"
            if state.get("names_bytes"):  # a state of this wds, edited
                raise CheckpointError(f"{what}: the state was edited")
            older_state(what)
        self.restored_member = member if self.offset > 0 and isinstance(member, str) else None

    def _starting(self, url: str) -> None:
        self.pax_global = {}

    def _items(self, stream: Any, url: str, start: int) -> Iterator[dict[str, Any]]:
        recipe, options = self.recipe, self.recipe.options
        try:
            tar, self.plain = skip_to(stream, start, url, self.plain)
        except SampleError as exn:
            if self.restored_member is None:
                raise
            why = f"{exn.reason}: the shard changed since the checkpoint"
            raise CheckpointError(why, url=url, offset=start) from None
        limits = self.limits
        mapped = map_whole(stream) if options.zero_copy and self.plain else None
        fd = file_descriptor(stream) if self.plain and mapped is None else -1  # a local plain shard: read directly
        walking = TarOptions(recipe.want(), limits, True, self.chunk, self.map_files)
        members = iter_members(tar, url, start_offset=start, pax_global=self.pax_global, mapped=mapped, fd=fd,
                               options=walking)  # fmt: skip
        if self.restored_member is not None:
            members = self._resumed(members, url, start, stream)
        refused = self._refused
        path = options.storage.local_copy(url) if options.local_path else None
        yield from group_members(
            members, url, path=path, cursor=self.cursor, rename=options.rename_files, limits=limits, refused=refused
        )

    def _resumed(self, members: Iterator[Item], url: str, start: int, stream: Any) -> Iterator[Item]:
        """The members of a restored shard from its offset, the first checked before any is grouped: it must be the
        member the state names, its header at the offset (and a remote shard the version it was, now that a range of
        it has come); anything else is a :class:`CheckpointError`."""
        expected, self.restored_member = self.restored_member, None
        where = f"the checkpoint's offset {start:,}"
        try:
            first = next(members, None)
        except (TarFormatError, SampleError) as exn:  # no valid header there, or the shard ends before it
            reason = getattr(exn, "reason", str(exn))
            raise CheckpointError(f"{where} is not where a member starts ({reason})", url=url, offset=start) from None
        self.check_version(stream_version(stream), url, start)
        if first is None:
            raise CheckpointError(f"{where} is at the end of the shard, not at a member", url=url, offset=start)
        name, _, offset = first
        if offset != start or (name_digest(name) if name is not None else "") != expected:
            found = f"the member {name!r} at offset {offset:,}" if name is not None else f"a header at {offset:,}"
            raise CheckpointError(
                f"{where} is not where the sample it resumes at starts: the shard has {found} there (the state was "
                "edited, or the shard rewritten since); restore a checkpoint taken since, or start the epoch again",
                url=url,
                offset=start,
            )
        return itertools.chain((first,), members)
