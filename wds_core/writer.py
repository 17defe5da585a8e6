"""Writing shards: :class:`TarWriter` (one shard) and :class:`ShardWriter` (a numbered series).

Samples are dicts ``{"__key__": "dir/abc", "jpg": ..., "seg.png": ...}``; each
field becomes the member ``dir/abc.<field>``, fields in sorted order.  Values
are encoded by extension (see :mod:`wds_core.fieldcodecs.encoders`).  Headers
carry a fixed mtime (0), mode (0444) and owner (0/0) unless told otherwise, so
the same samples always give byte-identical shards.

Keys and fields are checked before anything is written: a key whose last path
component has a dot (the reader would split it elsewhere), an empty key, an
absolute or ``..`` path, and two fields that the reader would see as one are
errors here rather than silently different samples later.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Callable, Mapping
from typing import Any

from .errors import EncodingError, ShardOpenError, SpecError
from .fieldcodecs import FieldEncoder
from .io import files
from .io.destinations import CommitOnExit, CompressedSink, compression_of
from .io.locks import PatternLock
from .io.storage import Storage, local_path, storage_argument
from .limits import parse_size
from .sources.descriptor import write_descriptor
from .tar.tarindex import ShardIndex
from .tar.tarwrite import MemberPacker, end_of_archive

__all__ = ["ShardWriter", "TarWriter", "brace_spec", "existing_shards"]

_FLUSH = 1 << 20
_BYTES = (bytes, bytearray, memoryview)
_READER_FIELDS = frozenset({"__key__", "__url__", "__local_path__"})


def check_key(key: Any) -> str:
    """``key`` if it can be written as a sample key, else a clear error."""
    if not isinstance(key, str):
        raise EncodingError(f"__key__ must be a str, got {type(key).__name__}")
    slash = key.rfind("/")
    if key and key.find(".", slash + 1) < 0 and key[:1] != "/" and "\x00" not in key and "\n" not in key:
        if slash < 0 or (slash < len(key) - 1 and "/../" not in f"/{key}/"):
            return key  # the common case, checked with a few C-level scans
    base = key[slash + 1 :]
    if not base:
        raise EncodingError(f"the sample key {key!r} is empty or ends with '/'", key=key)
    if "." in base:
        raise EncodingError(
            f"the sample key {key!r} has a '.' in its last component; readers split keys at the first dot "
            "after the last '/', so this sample would come back under another key (replace the dot)",
            key=key,
        )
    if key.startswith("/") or ".." in key.split("/") or any(c in key for c in "\x00\n"):
        raise EncodingError(f"the sample key {key!r} is absolute, has a '..' component or a control character", key=key)
    return key


def _make_encoder(encoder: Any, allow_pickle: bool) -> Callable[[dict], dict] | FieldEncoder | None:
    if encoder is True:
        return FieldEncoder(None, allow_pickle)
    if encoder is False or encoder is None:
        return None
    if isinstance(encoder, Mapping):
        return FieldEncoder(encoder, allow_pickle)
    if callable(encoder):
        return encoder
    raise SpecError(f"encoder must be True, False, a dict {{extension: function}} or a callable, got {encoder!r}")


_SHOWN_KEYS = 100  # keys a lost shard's error shows in its message (all are in its lost_keys)


class TarWriter(CommitOnExit):
    """Write samples to one tar shard: ``with TarWriter("out.tar") as sink: sink.write(sample)``.

    ``dest`` is a path, a URL (through fsspec, with ``storage``), ``-``,
    ``pipe:CMD`` or a binary stream (left open).  ``encoder``: ``True`` encodes
    by extension, ``False`` expects bytes or str, a dict ``{extension: fn}``
    replaces the encoders, a callable maps whole samples.  ``compress`` (or a
    ``.tgz``/``.tar.gz`` destination) gzips; ``"bz2"``/``"xz"`` work too.
    ``keep_meta`` also writes fields starting with ``_``.  ``allow_pickle``
    permits ``.pyd``/``.pickle``/``.pkl`` fields.  ``user``/``group`` name the
    owner; ``format`` (one of :mod:`tarfile`'s formats) is accepted for webdataset
    compatibility: every format reads the same, since members are always
    ustar, with pax headers only where a name or size needs one.
    A local shard appears under its name only once ``close()`` succeeds; leaving
    the ``with`` block by an exception discards it.
    """

    def __init__(
        self,
        dest: Any,
        *,
        encoder: Any = True,
        compress: bool | str | None = None,
        mtime: float = 0,
        mode: int = 0o444,
        uid: int = 0,
        gid: int = 0,
        user: str = "",
        group: str = "",
        keep_meta: bool = False,
        allow_pickle: bool = False,
        storage: Storage | dict | None = None,
        format: Any = None,
        storage_options: Storage | dict | None = None,
    ) -> None:
        if format not in (None, tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
            raise SpecError(
                f"format must be None or a tarfile format (USTAR_FORMAT, GNU_FORMAT, PAX_FORMAT), got {format!r}"
            )
        self._encoder = _make_encoder(encoder, allow_pickle)
        self._packer = MemberPacker(mtime=int(mtime), mode=mode, uid=uid, gid=gid, uname=user, gname=group)
        kind = compression_of(dest, compress)
        self.keep_meta = keep_meta
        sink = Storage.of(storage_argument(type(self).__name__, storage, storage_options)).create(dest)
        self.url = sink.url
        self._sink: Any = CompressedSink(sink, kind) if kind else sink
        self._pending: list[Any] = []
        self._pending_size = 0
        self._layouts: dict[tuple, list[str]] = {}  # the sample's keys, in dict order -> fields to write
        self.count = 0  # samples written
        self.keys: list[str] = []  # their keys, to name them when the shard cannot be finished
        self.size = 0  # uncompressed tar bytes written, end-of-archive blocks excluded
        self.closed = False
        self._failed: str | None = None  # why the sink cannot take more (a write failed part way)

    def pack(self, sample: dict[str, Any]) -> tuple[list[Any], int, str]:
        """The encoded pieces of ``sample``, their total size and its key, without writing them."""
        if not isinstance(sample, dict):
            raise EncodingError(f"samples to write must be dicts, got {type(sample).__name__}", url=self.url)
        if "__key__" not in sample:
            raise EncodingError("the sample has no __key__", url=self.url)
        key = check_key(sample["__key__"])
        encoder = self._encoder
        if encoder is not None and not isinstance(encoder, FieldEncoder):
            sample = encoder(sample)
            encoder = None
        layout = self._layouts.get(tuple(sample))
        if layout is None:
            layout = self._layout(sample, key)
        pieces: list[Any] = []
        size = 0
        pack_into = self._packer.pack_into
        for field in layout:
            value = sample[field]
            try:
                if encoder is not None:
                    value = encoder(field, value)
                elif isinstance(value, str):
                    value = value.encode("utf-8")
                elif not isinstance(value, _BYTES):
                    raise TypeError(f"without an encoder, values must be bytes or str, got {type(value).__name__}")
            except EncodingError:
                raise
            except Exception as exn:
                raise EncodingError(f"cannot encode: {exn}", url=self.url, key=key, field=field) from exn
            size += pack_into(pieces, f"{key}.{field}", value)
        return pieces, size, key

    def _layout(self, sample: dict[str, Any], key: str) -> list[str]:
        """The fields of samples with these keys to write, in order; checked once per set of keys."""
        layout = []
        seen: set[str] = set()
        for field in sorted(sample):
            if not isinstance(field, str):
                raise EncodingError(f"field names must be str, got {field!r}", url=self.url, key=key)
            if field[:1] == "_" and (not self.keep_meta or field in _READER_FIELDS):
                continue
            folded = field.lower()
            if not field or "/" in field or "\n" in field or "\x00" in field or folded in seen:
                what = "a duplicate (fields are case-insensitive)" if folded in seen else "not a valid field name"
                raise EncodingError(f"{field!r} is {what}", url=self.url, key=key, field=field)
            seen.add(folded)
            layout.append(field)
        if len(self._layouts) > 256:
            self._layouts.clear()
        self._layouts[tuple(sample)] = layout
        return layout

    def write(self, sample: dict[str, Any]) -> int:
        """Encode and write one sample; returns the number of tar bytes it took."""
        pieces, size, key = self.pack(sample)
        self.write_packed(pieces, size, key)
        return size

    def write_packed(self, pieces: list[Any], size: int, key: str) -> None:
        if self.closed:
            raise ValueError("write to a closed TarWriter")
        if self._failed is not None:
            raise ShardOpenError(
                f"an earlier write failed ({self._failed}); this shard can only be aborted", url=self.url
            )
        kept, kept_size = len(self._pending), self._pending_size
        self._pending += pieces
        self._pending_size += size
        if self._pending_size >= _FLUSH:
            try:
                self._flush()
            except ShardOpenError as exn:
                del self._pending[kept:]  # the sample whose write failed is not in the shard
                self._pending_size = kept_size
                if not getattr(self._sink, "rewindable", False):  # part of it may be out: nothing can follow
                    self._failed = exn.reason
                raise
        self.count += 1
        self.size += size
        self.keys.append(key)

    def _flush(self) -> None:
        """Hand the pending samples to the sink; a failure is a ShardOpenError naming the shard."""
        if self._pending:
            try:
                self._sink.write(b"".join(self._pending))
            except ShardOpenError:
                raise
            except OSError as exn:
                raise ShardOpenError(f"cannot write shard: {exn.strerror or exn}", url=self.url) from None
            self._pending.clear()
            self._pending_size = 0

    def close(self) -> None:
        """Finish the shard (end-of-archive blocks, compression trailer, rename into place).

        When it cannot be finished (disk full...), the temporary file is removed and the error says why.
        """
        if self.closed:
            return
        if self._failed is not None:
            self.abort()
            raise self._lost(f"not finished: an earlier write failed ({self._failed})")
        self.closed = True
        try:
            self._pending.append(end_of_archive())
            self._flush()
            self._sink.commit()
        except BaseException as exn:
            self._sink.abort()
            if isinstance(exn, ShardOpenError):
                raise self._lost(exn.reason, exn) from None
            if isinstance(exn, OSError):
                raise self._lost(f"cannot finish shard: {exn.strerror or exn}", exn) from None
            raise

    def _lost(self, why: str, cause: OSError | None = None) -> ShardOpenError:
        """The error for a shard that could not be finished (of ``cause``'s kind: a ``PipeError`` stays one): it
        names every sample it held (``lost_keys``), which were written by calls that returned, and must be
        written again."""
        shown = ", ".join(repr(k) for k in self.keys[:_SHOWN_KEYS])
        more = f" and {len(self.keys) - _SHOWN_KEYS} more" if len(self.keys) > _SHOWN_KEYS else ""
        lost = f"; its {len(self.keys)} samples are not written: {shown}{more} (all in the error's lost_keys)"
        kind = type(cause) if isinstance(cause, ShardOpenError) else ShardOpenError
        error = kind(why + (lost if self.keys else ""), url=self.url)
        error.lost_keys = list(self.keys)  # type: ignore[attr-defined]
        if cause is not None:
            error.errno, error.strerror = cause.errno, cause.strerror
        return error

    def abort(self) -> None:
        """Discard the shard: nothing appears under its name."""
        if self.closed:
            return
        self.closed = True
        self._pending.clear()
        self._sink.abort()


_FIELD = re.compile(r"%[-#0 +]*\d*[diu]")  # the numbered field of a shard pattern


def _numbered(pattern: str) -> tuple[str, re.Pattern[str]] | None:
    """The folder of the local ``pattern`` and a regular expression of its file names (the number a group), or
    ``None`` when that cannot be said (a remote pattern, a field in the folder, a ``%%``)."""
    path = local_path(pattern)
    if path is None:
        return None
    folder, name = os.path.split(os.path.abspath(path))
    field = _FIELD.search(name)
    if field is None or "%" in folder or "%" in name[: field.start()] + name[field.end() :]:
        return None
    return folder, re.compile(re.escape(name[: field.start()]) + r"(\d+)" + re.escape(name[field.end() :]))


def existing_shards(pattern: str, start: int = 0) -> list[tuple[int, str]]:
    """``[(number, path)]`` of the local files that ``pattern`` names as shards numbered ``start`` or more: what an
    earlier run left (none for a remote pattern, whose listing is not asked for)."""
    found = _numbered(pattern)
    if found is None:
        return []
    folder, names = found
    try:
        entries = files.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    shards = []
    for entry in entries:
        matched = names.fullmatch(entry)
        if matched and int(matched[1]) >= start and os.path.basename(pattern % int(matched[1])) == entry:
            shards.append((int(matched[1]), os.path.join(folder, entry)))
    return sorted(shards)


def brace_spec(pattern: str, first: int, last: int) -> str:
    """The brace spec of the shards ``pattern % first`` to ``pattern % last``: ``out/train-{000000..000002}.tar``
    (the name itself for one shard)."""
    if first == last:
        return pattern % first
    field = list(_FIELD.finditer(pattern))[-1]
    return f"{pattern[: field.start()]}{{{field.group() % first}..{field.group() % last}}}{pattern[field.end() :]}"


def refuse_existing(pattern: str, start: int, option: str) -> None:
    """A :class:`SpecError` naming the shards of ``pattern`` from ``start`` that are there already, and ``option``
    (how to replace them); nothing when there are none."""
    found = existing_shards(pattern, start)
    if found:
        named = ", ".join(path for _, path in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise SpecError(
            f"{len(found)} shard{'s' if len(found) > 1 else ''} of the pattern {pattern!r} are there already "
            f"({named}): an earlier run's, which would stay beside the new ones (a spec over them would read both); "
            f"{option} replaces the whole set, the shards this run does not write removed, or write elsewhere"
        )


def remove_stale(pattern: str, first_unwritten: int) -> list[str]:
    """Remove the shards of ``pattern`` numbered ``first_unwritten`` or more (and their ``.idx`` sidecars): what
    an earlier run wrote and this one did not; the paths removed."""
    removed = []
    for _, path in existing_shards(pattern, first_unwritten):
        files.remove(path)
        files.remove(path + ".idx")
        removed.append(path)
    return removed


class ShardWriter(CommitOnExit):
    """Write samples to numbered shards: ``ShardWriter("out-%06d.tar", maxcount=10000)``.

    A new shard starts when the current one holds ``maxcount`` samples or when
    the next sample would take it past ``maxsize`` bytes (uncompressed; a single
    larger sample gets a shard of its own; ``maxsize`` takes units: ``"64MB"``, ``"1GiB"``).  Shards are opened
    on the first sample they receive, so there is never an empty trailing shard.
    ``post(path)`` runs after each shard is complete.  ``descriptor`` names a
    JSON file that ``close()`` writes in the wids format
    (``{"wids_version": 1, "shardlist": [{"url", "nsamples", "filesize"}]}``);
    URLs in it are relative to its folder when the shards are below it.
    ``index=True`` writes each finished local shard's offset index next to it
    (``<shard>.idx``, :mod:`wds_core.tar.tarindex`) for indexed random access.
    Other keyword arguments go to :class:`TarWriter`.

    The writer owns its output set.  Into a local pattern that already holds shards of it (numbered from
    ``start_shard``), an earlier run's, it refuses to start (``overwrite=False``, the default: they would stay
    beside the new ones, and a spec over the pattern would read both); ``overwrite=True`` replaces the whole set,
    ``close()`` removing the shards of that earlier run this one did not write.  ``overwrite=None`` is webdataset's
    way (the drop-in's default): shards written over, the others left.  A remote pattern is not listed.
    """

    def __init__(
        self,
        pattern: str,
        maxcount: int = 100000,
        maxsize: float | str = 3e9,
        post: Callable[[str], Any] | None = None,
        start_shard: int = 0,
        verbose: int | bool = False,
        opener: Callable[[str], Any] | None = None,
        descriptor: str | None = None,
        index: bool = False,
        *,
        overwrite: bool | None = False,
        **kw: Any,
    ) -> None:
        if maxcount < 1:
            raise SpecError(f"maxcount must be >= 1, got {maxcount}")
        try:
            maxsize = parse_size(maxsize)  # 3e9, "64MB", "1GiB"
        except ValueError as exn:
            raise SpecError(f"maxsize: {exn}") from None
        if maxsize <= 0:
            raise SpecError(f"maxsize must be > 0, got {maxsize}")
        try:
            pattern % start_shard
        except TypeError:
            raise SpecError(f"the shard pattern {pattern!r} needs one %d-style field, as in 'out-%06d.tar'") from None
        self.pattern, self.maxcount, self.maxsize = pattern, maxcount, maxsize
        self.post, self.verbose, self.opener, self.descriptor = post, verbose, opener, descriptor
        self.kw, self.index = kw, index
        self.shard = start_shard  # number of the next shard to open
        self.fname: str | None = None
        self.tarstream: TarWriter | None = None
        self.total = 0  # samples written in all
        self.shards: list[dict[str, Any]] = []  # {"url", "nsamples", "filesize"} of each finished shard
        self.closed = False
        self.overwrite = overwrite
        local = opener is None and local_path(pattern) is not None
        self._lock = PatternLock(local_path(pattern) or pattern) if local else None  # one writer per pattern
        if overwrite is False and local:
            try:
                refuse_existing(pattern, start_shard, "overwrite=True")
            except SpecError:
                self._release()
                raise

    def abort(self) -> None:
        """Discard the shard being written; finished shards stay."""
        stream, self.tarstream = self.tarstream, None
        try:
            if stream is not None:
                stream.abort()
        finally:
            self.closed = True
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _open(self) -> TarWriter:
        self.fname = self.pattern % self.shard
        self.shard += 1
        dest = self.opener(self.fname) if self.opener else self.fname
        if self.verbose:
            import sys

            print(f"# writing {self.fname} ({self.total} samples so far)", file=sys.stderr)
        self.tarstream = TarWriter(dest, **self.kw)
        return self.tarstream

    @property
    def count(self) -> int:
        """Samples in the current shard."""
        return self.tarstream.count if self.tarstream is not None else 0

    @property
    def size(self) -> int:
        """Uncompressed bytes in the current shard."""
        return self.tarstream.size if self.tarstream is not None else 0

    def write(self, sample: dict[str, Any]) -> int:
        """Write one sample, starting a new shard first when the limits say so."""
        if self.closed:
            raise ValueError("write to a closed ShardWriter")
        stream = self.tarstream or self._open()
        pieces, size, key = stream.pack(sample)
        if self.count > 0 and (self.count >= self.maxcount or self.size + size > self.maxsize):
            self.finish()  # when it cannot be finished, its error names the samples it held: this one is not in
            stream = self._open()
        stream.write_packed(pieces, size, key)
        self.total += 1
        return size

    def finish(self) -> None:
        """Complete the current shard, if any (``close()`` calls it)."""
        stream, self.tarstream = self.tarstream, None
        if stream is None:
            return
        if stream.count == 0:  # opened for a sample that could not be encoded: no empty shard
            stream.abort()
            self.shard -= 1
            return
        try:
            stream.close()
        except ShardOpenError:
            self.shard -= 1  # the shard is not there: its number is used again by the next one
            raise
        assert self.fname is not None
        entry: dict[str, Any] = {"url": self.fname, "nsamples": stream.count}
        local = local_path(self.fname)
        if local is not None and files.exists(local):
            entry["filesize"] = files.getsize(local)
            if self.index:
                ShardIndex.build_local(self.fname).save(self.fname + ".idx")
        self.shards.append(entry)
        if callable(self.post):
            self.post(self.fname)

    def close(self) -> None:
        if self.closed:
            return
        self.finish()
        self.closed = True
        try:
            if self.overwrite is True and self.opener is None:
                remove_stale(self.pattern, self.shard)  # the earlier run's shards past this one's
        finally:
            self._release()
        if self.descriptor is not None:
            write_descriptor(self.descriptor, self.shards, name=os.path.basename(self.pattern))
