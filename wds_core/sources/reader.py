"""Reading shards resumably: :class:`ShardReader`, the iterator base every reader of a shard list shares (tar
shards in :mod:`.tarsamples`, record files in :mod:`.recordstreams`, K shards at once in :mod:`.interleave`).

It opens each shard through its recipe's storage context (:class:`~wds_core.io.storage.Storage`, from
:class:`~.readoptions.ShardReadOptions`), requests the next shards ahead, hands errors to the handler, and restores
inside a shard at a byte offset.

The stage remembers, between samples, the shard it is in and its cursor (:class:`~wds_core.tar.cursor.Cursor`:
the byte offset at which the next sample starts and the member whose header is there, kept by the tar layer),
which is all a checkpoint needs.  A state names positions, never places: it holds the upstream's state from before
the shard being read was taken (its position in the epoch's order) and a digest of each shard's URL
(:func:`shard_digest`), never a URL.  Restoring takes the shards from the pipeline's own list again and checks each
against its digest before anything is opened, so a state edited to name another shard, a command or a file outside
the dataset is a :class:`~wds_core.errors.CheckpointError`, as is one restored into a pipeline whose list changed.

A state also names the bytes it resumes at: the shard's size and version (its ETag, or Last-Modified, for a remote
object; its modification time for a file) and a digest of the name of the member at the offset.  The restored
shard's version is checked when it is opened, and the header at the offset when the first member is read there,
before anything is yielded: a shard rewritten since (at the same size too), an edited offset, or one that is not
where a sample starts is a :class:`~wds_core.errors.CheckpointError` naming the shard, never samples read twice or
missed.  ``check_versions=False`` (:class:`~.readoptions.ShardReadOptions`) leaves the version out, for a dataset
copied since with new modification times; the header at the offset is checked all the same.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import stat
import warnings
from collections.abc import Generator, Iterator
from typing import Any

from ..dist import node_info, worker_info
from ..errors import (
    CheckpointError,
    EmptyDatasetError,
    NotElastic,
    OverLimitError,
    TruncatedShardError,
    WdsError,
    redact_url,
)
from ..io.remote.readahead import Allowance
from ..io.storage import local_path, remote_url, url_of
from ..limits import DecodeLimits
from ..state import BalancedPart, StageIterator, implements, state_of, state_or_error, upstream_of
from ..tar.cursor import Cursor
from ..tar.source import CHUNK

__all__ = ["ShardReader", "older_state", "shard_digest", "stream_version"]

_END = object()


def shard_digest(url: str) -> str:
    """What a state keeps of a shard's URL: 16 hex digits of its SHA-256 (enough to tell the shards of a list apart,
    and nothing a restore could open)."""
    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def older_state(what: str) -> None:
    """Warn that a state from an older wds is restored without the checks of the bytes it resumes at: ``what`` it
    lacks.  (Not an error: a long run upgraded mid-epoch keeps its place; a state taken now names them.)"""
    warnings.warn(
        f"{what} (a checkpoint of an older wds): restored without checking that the shard holds there what it "
        "held when the checkpoint was taken",
        stacklevel=4,
    )


def _check_shard_list(it: Any) -> None:
    """Let the shard list upstream (through splitters and balanced parts) check its local shards exist."""
    while it is not None:
        check = getattr(it, "check_local_shards", None)
        if callable(check):
            check()
            return
        it = upstream_of(it)


class ShardReader(StageIterator):
    """Base of the stages that read each shard URL from upstream into items.

    The state is the upstream's position before the shard being read (and those
    taken ahead of it) with their digests, and the byte offset where its next
    item starts (``-1`` once it is finished); restoring takes the same shards
    from upstream again, checks them and reopens the first there.
    Subclasses define ``_items(stream, url, start)``, which yields the items of
    the shard from ``start`` and keeps ``self.offset`` current.  The recipe has
    ``handler`` and ``storage`` (its :class:`~wds_core.io.storage.Storage`): a shard that cannot be opened or read
    goes to the handler (``True`` moves on to the next shard, ``False`` ends
    the stream), after the items read before the problem.
    """

    passes_order = False  # it reads shards: what it delivered is counted by delivered_positions()
    in_order = True  # a ReportsDelivered: it yields its part's samples in order

    def __init__(self, src: Any, recipe: Any) -> None:
        super().__init__(src)
        self.recipe = recipe
        self.url: str | None = None  # shard being read
        self.cursor = Cursor()  # where its next item starts (-1 when it is finished), and the member there
        self.left: int | None = None  # items still to read from it, when upstream gave a count
        self.plain = False  # the shard is known to be an uncompressed tar: a restore seeks without looking
        self.limits = DecodeLimits.of(recipe.options.limits)  # resolved here: the configuration file of this process
        self._stopped = False  # the handler said stop about a refused member
        # the next shards, taken from upstream while this one is read so that remote ones are requested ahead
        # (a plain shard list only: a balanced part counts what it handed out); kept in the state until started
        self.queued: list[Any] = []
        # the upstream's state before each shard held (the one being read, then the queued ones) was taken from it
        self.taken_at: list[Any] = []
        self.replay: list[str] | None = None  # after a restore: the digests of the shards to take again
        self.restored: dict[str, Any] | None = None  # ... and the state it was given, until the run starts
        self.size: int | None = None  # the size of the shard being read, when its stream knows it
        self.version: str | None = None  # what identifies its bytes (a file's modification time), when known
        self.restored_size: int | None = None  # the size a restored state says its shard had
        self.restored_version: str | None = None  # ... and its version
        self._early: list[tuple[str, Any]] = []  # (url, stream) of queued shards, opened and requested ahead
        self._allowance: Allowance | None = None  # what this reader's remote shards may request together
        self.bytes_read = 0  # of the shards finished, as their streams counted them (compressed, for those)
        self._reading: Any = None  # the stream of the shard being read
        self.chunk = CHUNK  # bytes read (or walked) at a time while a shard's headers are dense
        self.map_files = True  # local plain shards' members copied out of a map (else read: tar.compiled.walk_file)
        self.ended_by_handler = False  # the handler said to stop reading about a shard: the stream ended there
        self.barren = 0  # shards in a row that gave no item (an endless stream of them is an error: _check_barren)

    @property
    def offset(self) -> int:
        """Where the next item of the shard being read starts (``-1`` when it is finished): the cursor's."""
        return self.cursor.offset

    @offset.setter
    def offset(self, offset: int) -> None:
        self.cursor.at(offset)

    def report(self) -> dict[str, Any]:
        """The items handed out (while counted) and ``bytes``: what the shards' streams read so far."""
        report = super().report()
        report["bytes"] = self.bytes_read + _position(self._reading)
        return report

    def share_requests(self, allowance: Allowance) -> None:
        """Request this reader's remote ranges within ``allowance``, shared with other readers (the lanes of a
        reader of many shards at once), instead of within an allowance of its own; before it starts."""
        self._allowance = allowance

    def opened_ahead(self, url: str, stream: Any) -> None:
        """``stream`` is the shard ``url``, opened and requested ahead by someone else: read it when its turn
        comes (from its start) instead of opening the shard again.  Closed with the reader's run, or by
        :meth:`drop_opened_ahead` when the run never starts."""
        self._early.append((url, stream))

    def drop_opened_ahead(self) -> None:
        """Close the streams opened ahead and not read (their requests are dropped)."""
        self._drop_early()

    def reading(self) -> bool:
        """Whether a shard is being read (between two of its items)."""
        return self.url is not None and self.offset >= 0

    def state_dict(self) -> dict[str, Any]:
        if self.replay is not None and self.restored is not None:  # restored and not started: as it was given
            return dict(self.restored)
        state = self._own_state()
        held = ([self.url] if self.reading() else []) + [url_of(item) for item in self.queued]
        if held:
            parent = self.taken_at[-len(held)]
            state["parent"] = parent if not isinstance(parent, Exception) else state_of(self.src)
            state["shards"] = [shard_digest(url) for url in held]  # type: ignore[arg-type]
        else:
            state["parent"] = state_of(self.src)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        shards = state.get("shards", [])
        if "url" in state or "queued" in state:
            raise CheckpointError(
                "this state names its shards by URL (a checkpoint of an older wds): a state names positions, never "
                "places, so that one edited to name a command or a file outside the dataset cannot be restored; "
                "take the checkpoint again"
            )
        if not isinstance(shards, list) or not all(isinstance(s, str) for s in shards):
            raise CheckpointError(f"{self._where()}: 'shards' is a list of digests, got {shards!r}")
        if self.offset >= 0 and not shards:
            raise CheckpointError(f"{self._where()}: the state reads a shard but names none")
        self.replay, self.restored = list(shards), dict(state)

    def _where(self) -> str:
        return f"the checkpoint of {type(self).__name__}"

    def _own_state(self) -> dict[str, Any]:
        if not self.reading():
            return {"offset": -1, "names_bytes": True}
        state: dict[str, Any] = {"offset": self.offset, "names_bytes": True}  # a state of this wds: see older_state
        if self.left is not None:
            state["left"] = self.left
        if self.plain and self.offset > 0:
            state["plain"] = True
        if self.size is not None:
            state["size"] = self.size
        version = self.version or stream_version(self._reading)
        if version is not None:
            state["version"] = version
        return state

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.url = None
        self.offset = int(state.get("offset", -1))
        self.left = None if state.get("left") is None else int(state["left"])
        self.plain = bool(state.get("plain", False))
        self.restored_size = None if state.get("size") is None else int(state["size"])
        self.restored_version = None if state.get("version") is None else str(state["version"])

    def _take(self, source: Iterator[Any]) -> Any:
        """The next item of upstream (``_END`` at its end), its upstream's state before it kept for the state."""
        before = state_or_error(self.src)
        item = next(source, _END)
        if item is not _END:
            self.taken_at.append(before)
        return item

    def _replayed(self, source: Iterator[Any]) -> None:
        """After a restore: take the shards the state held from upstream again (it is back where the first was
        taken), each checked against its digest before anything is opened; the first is the one being read when
        the state says so, the others are queued."""
        digests, self.replay = self.replay or [], None
        items = []
        for number, digest in enumerate(digests):
            item = self._take(source)
            if item is _END:
                raise CheckpointError(
                    f"{self._where()} holds {len(digests)} shards from its position but the shard list gives "
                    f"{number}: the shard list changed since the checkpoint"
                )
            if shard_digest(url_of(item)) != digest:
                raise CheckpointError(
                    f"{self._where()} names a shard the pipeline does not have at its position (its {number + 1}. "
                    "shard's digest differs): the shard list changed since the checkpoint, or the state was edited"
                )
            items.append(item)
        if self.offset >= 0 and items:
            first = items.pop(0)
            self.url = url_of(first)
        self.queued = items

    def delivered_positions(self) -> tuple[int, Any]:
        """How many samples of its balanced part this reader has yielded (:mod:`wds_core.elastic`)."""
        if not implements(self.src, BalancedPart):
            raise NotElastic("the shards are not split by balanced=")
        left = self.left if self.url is not None and self.offset >= 0 and self.left else 0
        return self.src.samples_handed() - left, []

    def _items(self, stream: Any, url: str, start: int) -> Iterator[Any]:  # pragma: no cover - subclasses
        raise NotImplementedError

    def _starting(self, url: str) -> None:
        """Called before a shard is read from its start."""

    def _run(self) -> Iterator[Any]:
        try:
            source = iter(self.src)
            if self.replay is not None:
                self._replayed(source)
            if self.reading() and self.left != 0:
                if not (yield from self._shard(self.url, self.offset)):  # type: ignore[arg-type]
                    self.ended_by_handler = True
                    return
            self.restored_size = self.restored_version = None
            _check_shard_list(self.src)
            while True:
                del self.taken_at[: len(self.taken_at) - len(self.queued)]  # the shard just read is let go
                if self.queued:
                    item = self.queued.pop(0)
                else:
                    item = self._take(source)
                    if item is _END:
                        return
                self.url = url = url_of(item)
                # a task may start inside the shard and stop after a count (balanced epochs)
                start = int(item.get("offset", 0)) if isinstance(item, dict) else 0
                self.left = item.get("count") if isinstance(item, dict) else None
                self.offset = start
                self.plain = start > 0  # an offset inside a shard comes from its offset index: an uncompressed tar
                self._starting(url)
                self.barren += 1  # until the shard gives an item
                if not (yield from self._shard(url, start, source)):
                    self.ended_by_handler = True
                    return
                self._check_barren(url)
        finally:
            self._drop_early()

    def _check_barren(self, url: str) -> None:
        """An endless shard stream (resampled) whose shards give no samples, one draw after another, would never
        yield one: an error after ``30 x shards + 100`` draws in a row, which a list holding one shard with
        samples among ``k`` empty ones makes with a chance below ``e**-30``."""
        shards = getattr(self.src, "endless", 0)
        if shards and self.barren >= 30 * shards + 100:
            raise EmptyDatasetError(
                f"the last {self.barren} shards drawn from the {shards} of this endless (resampled) stream gave no "
                f"samples (the last: {redact_url(url)}); they are empty, or unreadable and skipped by the error "
                "handler: a stream of them would never yield one (check them with `wds verify`)"
            )

    def _check_unchanged(self, stream: Any, url: str, start: int) -> None:
        """The shard a restored state resumes inside must be the size and version it was (one request for a remote
        shard whose size is not known yet, on a restore only): a shard rewritten since is a :class:`CheckpointError`,
        never samples read from the middle of another file.  A remote shard's version is known once its first
        range has come: :meth:`check_version` then."""
        expected, self.restored_size = self.restored_size, None
        size = self.size
        if expected is not None and size is None and callable(getattr(stream, "object_size", None)):
            try:
                size = self.size = stream.object_size()
            except Exception:  # the read that follows reports what is wrong
                size = None
        if expected is not None and size is not None and size != expected:
            stream.close()
            raise self._changed(f"it was {expected:,} bytes and is {size:,} now", url, start)
        if self.version is not None:
            self.check_version(self.version, url, start, stream)

    def check_version(self, version: str | None, url: str, start: int, stream: Any = None) -> None:
        """The restored shard's ``version`` (``None``: not known) against the one its state says, once."""
        expected = self.restored_version
        if expected is None or version is None:
            return
        self.restored_version = None
        if version != expected and self.recipe.options.check_versions:
            if stream is not None:
                stream.close()
            why = f"its version was {expected} and is {version} now"
            raise self._changed(why, url, start, " (check_versions=False accepts a shard only copied since)")

    def _changed(self, why: str, url: str, start: int, accept: str = "") -> CheckpointError:
        return CheckpointError(
            f"the shard changed since the checkpoint: {why}, so its samples are not where the checkpoint says; "
            f"restore a checkpoint taken since, or start the epoch again{accept}",
            url=url,
            offset=start,
        )

    def _lead(self, stream: Any, start: int) -> bool:
        """Have ``stream`` (the shard being read, remote) requested first within what this reader may request, its
        first range now; whether the shards after it are to be requested ahead too (:meth:`_look_ahead`)."""
        if implements(self.src, BalancedPart) or not hasattr(stream, "attach"):
            return False
        if self._allowance is None:
            self._allowance = Allowance(_start_plan(self.recipe.options.storage.read_ahead))
        stream.attach(self._allowance, first=True)
        if start == 0:  # a restore inside the shard seeks first: its first request is at the offset
            stream.prefetch(size_too=False)
        return True

    def _look_ahead(self, source: Iterator[Any]) -> None:
        """Take the next shards from upstream (``ReadAhead.shards_ahead`` of them) and, the remote ones, have them
        requested within what this reader may request, after the one being read."""
        plan = self.recipe.options.storage.read_ahead
        while len(self.queued) < plan.shards_ahead:
            item = self._take(source)
            if item is _END:
                return
            self.queued.append(item)
            url = url_of(item)
            if not remote_url(url):
                continue
            try:
                early = self.recipe.open(url)
            except Exception:  # opened again, and reported through the handler, when its turn comes
                continue
            if not hasattr(early, "attach"):
                early.close()
                continue
            early.attach(self._allowance, first=False)
            self._early.append((url, early))
            early.prefetch()

    def _ahead_after_first(self, items: Iterator[Any], source: Iterator[Any]) -> Iterator[Any]:
        try:
            first = next(items, _END)
            if first is not _END:
                yield first  # to the consumer at once: the shards ahead are opened when it asks for the next one
            self._look_ahead(source)
            yield from items
        finally:
            items.close()  # type: ignore[attr-defined]

    def _drop_early(self) -> None:
        early, self._early = self._early, []
        for _, stream in early:
            stream.close()

    def _open(self, url: str, start: int) -> Any:
        if self._early and self._early[0][0] == url and start == 0:
            return self._early.pop(0)[1]
        if self._early and self._early[0][0] == url:
            self._early.pop(0)[1].close()
        return self.recipe.open(url)

    def _refused(self, exn: OverLimitError) -> bool:
        """A member or sample over the limits, streamed past (its sample dropped when it names a member): the
        handler decides whether reading goes on; ``False`` ends this shard (and the stream, unless it was the
        last sample a reading task counted)."""
        try:
            go_on = self.recipe.options.handler(exn)
        except BaseException as raised:
            raise _HandlerRaised() from raised
        if not go_on:
            self._stopped = True
            return False
        if self.left is not None and exn.member is not None:
            self.left -= 1  # the dropped sample was one of the task's
            return self.left > 0
        return True

    def _shard(self, url: str, start: int, source: Iterator[Any] | None = None) -> Generator[Any, None, bool]:
        recipe = self.recipe
        try:
            stream = self._open(url, start)
        except Exception as exn:
            self.offset = -1
            return bool(recipe.options.handler(exn))
        self.size, version = _stream_identity(stream)
        # a local shard's modification time is its version; a remote shard read from the shard cache has its
        # copy's, which the cache touches on each use: it goes by the header at the offset alone
        self.version = version if local_path(recipe.options.storage.rewrite(url)) is not None else None
        if self.restored_size is not None or self.restored_version is not None:  # a checkpoint resumes inside
            self._check_unchanged(stream, url, start)  # the shard it was?
        self._stopped = False
        self._reading = stream
        ahead = source if source is not None and self._lead(stream, start) else None
        try:
            items = self._items(stream, url, start)
            if ahead is not None:  # the first sample before the requests of the shards ahead (their bytes compete)
                items = self._ahead_after_first(items, ahead)
            if self.left is None:
                first = next(items, _END)
                if first is not _END:
                    self.barren = 0
                    yield first
                    del first  # not held while the rest of the shard is read (a lane of interleave holds one)
                    yield from items
            else:
                while self.left > 0:
                    item = next(items, _END)
                    if item is _END and (self.left <= 0 or self._stopped):  # the task's last sample was refused
                        break
                    if item is _END:  # a task's count comes from the shard's index or a manifest: never cut short
                        raise TruncatedShardError(
                            f"the shard ended {self.left} samples before the count its reading task gives "
                            "(did it change since it was indexed or counted?)",
                            url=url,
                            offset=start,
                        )
                    self.left -= 1
                    yield item
        except _HandlerRaised as raised:  # what the handler raised about a refusal: not handled twice
            self.offset = -1
            raise raised.__cause__ from None  # type: ignore[misc]
        except CheckpointError:  # a restore that cannot resume exactly: never the handler's to skip
            self.offset = -1
            raise
        except Exception as exn:
            self.offset = -1
            if not isinstance(exn, WdsError) and exn.args and isinstance(exn.args[0], str):
                exn.args = (f"{exn.args[0]} (while reading shard {redact_url(url)})",) + exn.args[1:]
            partial, self.cursor.partial = self.cursor.partial, None
            go_on = bool(recipe.options.handler(exn))
        else:
            partial, go_on = None, not self._stopped
        finally:
            self.cursor.partial = None
            self.bytes_read += _position(stream)
            self._reading = None
            stream.close()
        self.offset = -1
        if partial is not None and (self.left is None or self.left > 0):
            # the handler went on past a cut or damaged shard: the members of the sample at the cut that were
            # read whole are delivered, as webdataset does (a field it lacks is the next stage's to report)
            if self.left is not None:
                self.left -= 1
            yield partial
        return go_on


def _stream_identity(stream: Any) -> tuple[int | None, str | None]:
    """The size of a shard's stream when it knows it without a request (a local file; a remote one once its first
    range came), and a local file's version (its modification time; a remote one's is :func:`stream_version`)."""
    size = getattr(stream, "size", None)
    if isinstance(size, int):
        return size, None
    try:
        info = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None, None
    if not stat.S_ISREG(info.st_mode):
        return None, None
    return info.st_size, f"mtime:{info.st_mtime_ns}"


def stream_version(stream: Any) -> str | None:
    """What identifies a remote shard's bytes, once a range of it has come (its ETag, or Last-Modified)."""
    version = getattr(stream, "version", None)
    return version() if callable(version) else None


def _position(stream: Any) -> int:
    """How far ``stream`` has read (0 for none, or one that cannot say)."""
    if stream is None:
        return 0
    try:
        return max(int(stream.tell()), 0)
    except (AttributeError, OSError, ValueError):
        return 0


class _HandlerRaised(Exception):
    """Carries (as its cause) what a handler raised about a refusal out of the reader, past its own handling."""


def _start_plan(plan: Any) -> Any:
    """``plan`` for a reader that is one of many (a loader's worker, a rank): its start bounded (``ReadAhead.ramp``),
    so that they do not all ask the store for everything at once; a reader alone starts at full speed."""
    if plan.ramp and worker_info()[1] <= 1 and node_info()[1] <= 1:
        return dataclasses.replace(plan, ramp=0)
    return plan
