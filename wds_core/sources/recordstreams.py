"""Shards of concatenated CBOR or MessagePack objects, read and written as sample streams.

A ``.cbors`` shard is CBOR objects one after another (what ``cbor2.dump``
called in a loop writes); a ``.msgpacks`` shard is the same with MessagePack.
They suit collections of very small samples, which tar's 512-byte headers
would double in size.  :func:`cbors_to_samples` and
:func:`msgpacks_to_samples` are stages from shard URLs to the objects, as they
were written (webdataset's ``cbors_to_samples``); each checkpoints the shard and
the byte offset of the next object.  A shard that ends inside an object is a
:class:`TruncatedShardError` naming the offset where that object starts.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO, cast

from ..errors import OverLimitError, TarFormatError, TruncatedShardError
from ..fieldcodecs.structured import WORST_RATIO, EndsEarly, cbor_extent, msgpack_extent
from ..handlers import Handler, reraise_exception
from ..io.cache import ShardCache
from ..io.destinations import CommitOnExit
from ..io.remote.rangestream import RetryPolicy
from ..io.storage import Storage, storage_argument
from ..limits import DecodeLimits
from ..state import RunContext
from ..tar.resume import skip_to
from .reader import ShardReader
from .readoptions import ShardReading, ShardReadOptions

__all__ = ["CborsWriter", "MsgpacksWriter", "RecordsToSamples", "cbors_to_samples", "msgpacks_to_samples"]

_CHUNK = 1 << 16


class _Counting(io.IOBase):
    """A buffered read-only stream that counts the bytes handed out (decoders read a few bytes at a time) and
    keeps those of the object being read (from ``mark``), so that it can be walked and read again."""

    def __init__(self, stream: Any, position: int, limit: int = sys.maxsize) -> None:
        super().__init__()
        self.stream = stream
        self._buf = b""
        self._base = position  # stream offset of _buf[0]
        self._at = 0  # read position in _buf
        self.mark = position  # where the object being read starts
        self.limit = limit  # bytes one object may take in the decoder, checked before they are read

    @property
    def position(self) -> int:
        return self._base + self._at

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if size > 0 and self.position + size - self.mark > self.limit:
            raise _TooLarge(self.position + size - self.mark)
        if size < 0 or len(self._buf) - self._at < size:
            self._fill(size)
        at = self._at
        data = self._buf[at:] if size < 0 else self._buf[at : at + size]
        self._at = at + len(data)
        return data

    def _fill(self, size: int) -> None:
        """Read until ``size`` bytes are ahead (all when negative); bytes before ``mark`` are let go."""
        keep = max(0, min(self.mark - self._base, self._at))
        parts = [self._buf[keep:]]
        self._base += keep
        self._at -= keep
        have = len(parts[0]) - self._at
        while size < 0 or have < size:
            more = self.stream.read(_CHUNK if size < 0 else max(_CHUNK, size - have))
            if not more:
                break
            parts.append(more)
            have += len(more)
        self._buf = b"".join(parts)

    def object_bytes(self, more: int) -> bytes:
        """The bytes from ``mark`` on, with at least ``more`` beyond what was read (fewer at the end)."""
        ahead = self.mark + more - self._base - len(self._buf)
        if ahead > 0:
            self._fill(len(self._buf) - self._at + ahead)
        return self._buf[self.mark - self._base :]

    def rewind(self, offset: int) -> None:
        """Read from ``offset`` (between ``mark`` and what was read) again."""
        self._at = offset - self._base


class _TooLarge(Exception):
    """An object that would pass the reader's limit (its size so far, at least)."""


def _too_large(limits: DecodeLimits, size: int | str, url: str, offset: int, where: str) -> OverLimitError:
    return limits.over("a record of", size, "sample_bytes", where, url=url, offset=offset)


def _walked(stream: _Counting, fmt: str, url: str, limits: DecodeLimits, where: str) -> Any:
    """The object at ``stream.mark``, too large for the quick bound, walked first (:mod:`.structured`): its
    encoded bytes and the objects it decodes to must both fit ``sample_bytes``.  The stream is left after it."""
    extent = cbor_extent if fmt == "cbor" else msgpack_extent
    start, budget = stream.mark, limits.sample_bytes
    want = 1 << 20
    while True:
        data = stream.object_bytes(want)
        try:
            cost, end = extent(data, budget)
            break
        except EndsEarly as short:
            if short.needed > budget:  # a length that is over the limit by itself: not read
                raise _too_large(limits, f"at least {short.needed:,} bytes", url, start, where) from None
            if len(data) < want:
                kind = "a CBOR" if fmt == "cbor" else "a MessagePack"
                raise TruncatedShardError(f"the shard ends inside {kind} object", url=url, offset=start) from None
            want = max(2 * len(data), short.needed)
    if end > budget:
        raise _too_large(limits, end, url, start, where)
    if cost > budget:
        what = f"a record ({end:,} bytes) that could decode to objects of"
        raise limits.over(what, cost, "sample_bytes", where, url=url, offset=start)
    stream.rewind(start + end)
    stream.mark = start + end
    if fmt == "cbor":
        import cbor2

        return cbor2.loads(data[:end])
    import msgpack

    return msgpack.unpackb(data[:end], raw=False, strict_map_key=False)


def _quick(limits: DecodeLimits, fmt: str) -> int:
    """Encoded bytes of an object that cannot decode to more than ``sample_bytes`` (:data:`WORST_RATIO`)."""
    return max(1, limits.sample_bytes // WORST_RATIO[fmt])


def _cbor_objects(stream: _Counting, url: str, where: Any, limits: DecodeLimits) -> Iterator[Any]:
    import cbor2

    stream.limit = _quick(limits, "cbor")
    decoder = cbor2.CBORDecoder(cast(BinaryIO, stream))
    while True:
        start = stream.mark = stream.position
        try:
            obj = decoder.decode()
        except cbor2.CBORDecodeEOF:
            if stream.position == start:
                return
            raise TruncatedShardError("the shard ends inside a CBOR object", url=url, offset=start) from None
        except (_TooLarge, cbor2.CBORDecodeError) as exn:
            too = exn if isinstance(exn, _TooLarge) else exn.__cause__ or exn.__context__  # cbor2 may wrap it
            if not isinstance(too, _TooLarge):
                raise TarFormatError(f"invalid CBOR: {exn}", url=url, offset=start) from None
            obj = _record_walked(stream, "cbor", url, limits, "cbors_to_samples")
            decoder = cbor2.CBORDecoder(cast(BinaryIO, stream))  # the last one stopped inside that object
        except EOFError:  # from the decompressor: the compressed data is cut short
            raise TruncatedShardError("the compressed shard ends early", url=url, offset=start) from None
        except ValueError as exn:  # the decompressor's: the compressed data is damaged
            raise TarFormatError(f"invalid compressed data: {exn}", url=url, offset=start) from None
        where.offset = stream.position
        yield obj


def _record_walked(stream: _Counting, fmt: str, url: str, limits: DecodeLimits, where: str) -> Any:
    """:func:`_walked`, with a bad object said as invalid data and a damaged compressed shard as such."""
    start = stream.mark
    try:
        return _walked(stream, fmt, url, limits, where)
    except (OverLimitError, TruncatedShardError):
        raise
    except EOFError:
        raise TruncatedShardError("the compressed shard ends early", url=url, offset=start) from None
    except Exception as exn:  # the walk's or the decoder's: not a valid object
        kind = "CBOR" if fmt == "cbor" else "MessagePack"
        raise TarFormatError(f"invalid {kind}: {exn}", url=url, offset=start) from None


def _msgpack_objects(stream: _Counting, url: str, where: Any, limits: DecodeLimits) -> Iterator[Any]:
    import msgpack

    quick = min(_quick(limits, "msgpack"), (1 << 31) - 1)  # the unpacker's buffer holds one object at least
    while True:
        base = stream.mark = stream.position
        unpacker = msgpack.Unpacker(stream, raw=False, strict_map_key=False, max_buffer_size=quick)
        end = base
        try:
            for obj in unpacker:
                end = stream.mark = base + unpacker.tell()
                where.offset = end
                yield obj
        except msgpack.BufferFull:  # an object over the quick bound: walked, then read on after it
            stream.rewind(end)
            where.offset = stream.mark
            obj = _record_walked(stream, "msgpack", url, limits, "msgpacks_to_samples")
            where.offset = stream.mark
            yield obj
            continue
        except (
            msgpack.UnpackValueError,
            msgpack.ExtraData,
            ValueError,
            TypeError,
        ) as exn:  # TypeError: an unhashable map key
            raise TarFormatError(f"invalid MessagePack: {exn}", url=url, offset=end) from None
        except EOFError:  # from the decompressor: the compressed data is cut short
            raise TruncatedShardError("the compressed shard ends early", url=url, offset=end) from None
        if stream.position > end:
            raise TruncatedShardError("the shard ends inside a MessagePack object", url=url, offset=end)
        return


class RecordsToSamples(ShardReading):
    """Stage: shard URLs to the objects of CBOR (``format="cbor"``) or MessagePack shards."""

    def __init__(
        self,
        format: str = "cbor",
        handler: Handler = reraise_exception,
        storage: Storage | dict | None = None,
        cache: ShardCache | None = None,
        retry: RetryPolicy | None = None,
        limits: Any = None,
        *,
        storage_options: Storage | dict | None = None,
    ):
        if format not in ("cbor", "msgpack"):
            raise ValueError(f"format must be 'cbor' or 'msgpack', got {format!r}")
        self.format = format
        storage = Storage.of(storage_argument("RecordsToSamples", storage, storage_options), cache=cache, retry=retry)
        self._read_with(ShardReadOptions(handler, storage=storage, limits=limits))

    def build(self, src: Any, ctx: RunContext) -> _RecordsIterator:
        return _RecordsIterator(src, self)


class _RecordsIterator(ShardReader):
    def _items(self, stream: Any, url: str, start: int) -> Iterator[Any]:
        cbor = self.recipe.format == "cbor"
        counting = _Counting(skip_to(stream, start, url)[0], start)
        yield from (_cbor_objects if cbor else _msgpack_objects)(counting, url, self, self.limits)


def cbors_to_samples(
    handler: Handler = reraise_exception, storage: Storage | dict | None = None, limits: Any = None, *,
    storage_options: Storage | dict | None = None,
) -> RecordsToSamples:  # fmt: skip
    """Stage: the objects of concatenated-CBOR shards, as webdataset's ``cbors_to_samples()``.

    An object is at most ``limits``' ``sample_bytes`` (default: the configuration file's ``decode_limits``, else
    4 GiB), and so are the Python objects it decodes to, checked before it is read: a small compressed shard
    can inflate to an object of any size, and a small object to many empty containers
    (:mod:`wds_core.fieldcodecs.structured`).
    """
    return RecordsToSamples(
        "cbor", handler, storage_argument("cbors_to_samples", storage, storage_options), limits=limits
    )


def msgpacks_to_samples(
    handler: Handler = reraise_exception, storage: Storage | dict | None = None, limits: Any = None, *,
    storage_options: Storage | dict | None = None,
) -> RecordsToSamples:  # fmt: skip
    """Stage: the objects of concatenated-MessagePack shards (``limits``: as :func:`cbors_to_samples`)."""
    storage = storage_argument("msgpacks_to_samples", storage, storage_options)
    return RecordsToSamples("msgpack", handler, storage, limits=limits)


class _RecordWriter(CommitOnExit):
    def __init__(
        self, dest: Any, storage: Storage | dict | None = None, *, storage_options: Storage | dict | None = None
    ) -> None:
        self._sink = Storage.of(storage_argument(type(self).__name__, storage, storage_options)).create(dest)
        self.count = 0
        self.closed = False

    def _dumps(self, obj: Any) -> bytes:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def write(self, obj: Any) -> int:
        if self.closed:
            raise ValueError(f"write to a closed {type(self).__name__}")
        data = self._dumps(obj)
        self._sink.write(data)
        self.count += 1
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._sink.commit()

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            self._sink.abort()


class CborsWriter(_RecordWriter):
    """Write objects to a concatenated-CBOR shard (atomically, for local paths)."""

    def _dumps(self, obj: Any) -> bytes:
        import cbor2

        return cbor2.dumps(obj)


class MsgpacksWriter(_RecordWriter):
    """Write objects to a concatenated-MessagePack shard (atomically, for local paths)."""

    def _dumps(self, obj: Any) -> bytes:
        import msgpack

        return msgpack.packb(obj, use_bin_type=True)
