"""Bounded decoding: what one field, and one sample, may expand to.

Shards often come from the internet: a 400 KB ``.json.gz`` may inflate to
400 MB, a ``.npy`` header may claim 37 GiB.  The decoder checks before it
spends the memory:

* ``.gz`` fields are inflated incrementally and given up on as soon as they
  pass ``field_bytes`` (memory: the limit plus one chunk);
* ``.npy`` fields (and each array of an ``.npz``) are checked from their
  header: the array's bytes must fit ``field_bytes`` and the data actually
  present, before anything is allocated;
* the fields of one sample together may decode to ``sample_bytes`` at most.

The shard readers hold members and records to the same limits before reading
them (:func:`wds_core.tar.tario.iter_members`, :mod:`wds_core.grouping`,
:mod:`wds_core.recordstreams`), since a small compressed shard can inflate to
members of any size.  MessagePack and CBOR containers and JSON nesting are
already bounded by the field's own bytes (their readers refuse lengths beyond the data and deep
nesting), which a test checks.  Defaults are far beyond any honest dataset's
fields; raise them with ``decode(..., limits={"field_bytes": 8 << 30})`` or the
configuration file's ``decode_limits`` mapping (``WDS_CONFIG``).
"""

from __future__ import annotations

import contextvars
import io
import math
import zipfile
import zlib
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from ..errors import OverLimitError

__all__ = ["DecodeLimitError", "DecodeLimits", "bounded_gunzip", "check_npy", "check_npz", "current_limits"]

GiB = 1 << 30
_CHUNK = 1 << 20  # bytes inflated per step


class DecodeLimitError(ValueError):
    """A field or sample that would decode to more than a limit allows."""


@dataclass(frozen=True)
class DecodeLimits:
    """How much one field (``field_bytes``) and one sample (``sample_bytes``) may decode to."""

    field_bytes: int = GiB
    sample_bytes: int = 4 * GiB

    @classmethod
    def of(cls, given: Any = None) -> DecodeLimits:
        """``given`` (limits, a dict of some of them, or None) over the configuration file's, over the defaults."""
        from ..io.storage_config import configured

        limits = cls()
        for layer in (configured("decode_limits"), given):
            if layer is None:
                continue
            if isinstance(layer, DecodeLimits):
                limits = layer
                continue
            known = {f.name for f in fields(cls)}
            unknown = set(layer) - known
            if unknown:
                raise ValueError(f"unknown decode limits {sorted(unknown)}; the limits are {sorted(known)}")
            limits = replace(limits, **{k: int(v) for k, v in layer.items()})
        return limits

    def refuse(self, what: str, size: int | str, limit: str, where: str = "decode") -> DecodeLimitError:
        """The error for ``what`` (``size`` bytes) over ``limit``, saying how to raise it (``where(limits=)``)."""
        value = getattr(self, limit)
        return DecodeLimitError(
            f"{what} {size if isinstance(size, str) else f'{size:,} bytes'}, over the decode limit {limit}="
            f"{value:,} (raise it with {where}(..., limits={{'{limit}': ...}}) or the config file's decode_limits)"
        )

    def over(self, what: str, size: int | str, limit: str, where: str, **located: Any) -> OverLimitError:
        """A reader's refusal (:meth:`refuse`'s message) as an :class:`OverLimitError` naming ``located``
        (``url``, ``member``, ``offset``)."""
        return OverLimitError(str(self.refuse(what, size, limit, where)), **located)


_CURRENT: contextvars.ContextVar[DecodeLimits | None] = contextvars.ContextVar("wds_decode_limits", default=None)
_DEFAULT = DecodeLimits()


def current_limits() -> DecodeLimits:
    """The limits of the decoder running in this thread (the defaults outside one)."""
    return _CURRENT.get() or _DEFAULT


def use_limits(limits: DecodeLimits) -> contextvars.Token:
    return _CURRENT.set(limits)


def reset_limits(token: contextvars.Token) -> None:
    _CURRENT.reset(token)


def bounded_gunzip(data: bytes, limits: DecodeLimits | None = None) -> bytes:
    """``gzip.decompress(data)``, refused as soon as the output passes ``field_bytes``."""
    limits = limits or current_limits()
    limit = limits.field_bytes
    chunks: list[bytes] = []
    total = 0
    rest = memoryview(data)
    while True:  # one gzip member per turn (concatenated members are one stream, as gzip.decompress reads them)
        inflater = zlib.decompressobj(wbits=31)
        pending: Any = rest
        while not inflater.eof:
            chunk = inflater.decompress(pending, _CHUNK)
            total += len(chunk)
            if total > limit:
                raise limits.refuse("the gzip data inflates to more than", total - len(chunk), "field_bytes")
            chunks.append(chunk)
            pending = inflater.unconsumed_tail
            if not chunk and not pending:  # it needs input that is not there
                break
        if not inflater.eof:
            raise EOFError("the gzip data ends before its end-of-stream marker")
        rest = memoryview(inflater.unused_data)
        if not bytes(rest[:2]) == b"\x1f\x8b":  # trailing zeros (padding) are allowed; anything else is not gzip
            if bytes(rest).strip(b"\x00"):
                raise zlib.error("trailing bytes after the gzip data that are not another gzip member")
            return b"".join(chunks)


def _array_bytes(stream: Any, available: int, what: str, limits: DecodeLimits) -> int:
    """Check one ``.npy`` from its header (``stream`` at its start, ``available`` bytes in all): its data bytes."""
    start = stream.tell()
    version = np.lib.format.read_magic(stream)
    reader = getattr(np.lib.format, "_read_array_header", None)
    if reader is not None:
        shape, _, dtype = reader(stream, version)
    elif version == (1, 0):  # pragma: no cover - numpy without the private reader
        shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
    else:  # pragma: no cover
        shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > limits.field_bytes:
        raise limits.refuse(f"{what} declares {shape} {dtype}:", nbytes, "field_bytes")
    present = available - (stream.tell() - start)
    if not dtype.hasobject and nbytes > present:
        raise ValueError(f"{what} declares {shape} {dtype} ({nbytes:,} bytes) but holds {present:,} bytes of data")
    return nbytes


def check_npy(data: bytes, limits: DecodeLimits | None = None) -> int:
    """Refuse an ``.npy`` whose header claims more than ``field_bytes`` or than it holds; its array's bytes."""
    return _array_bytes(io.BytesIO(data), len(data), "the .npy header", limits or current_limits())


def check_npz(data: bytes, limits: DecodeLimits | None = None) -> int:
    """Check every array of an ``.npz`` from its header and its zip entry's size; their bytes together."""
    limits = limits or current_limits()
    total = 0
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            if info.file_size > limits.field_bytes:
                raise limits.refuse(f"the .npz member {info.filename} inflates to", info.file_size, "field_bytes")
            if not info.filename.endswith(".npy"):
                continue
            with archive.open(info) as member:
                head = io.BytesIO(member.read(min(info.file_size, 1 << 16)))  # the header is within the first 64 KB
            total += _array_bytes(head, info.file_size, f"the .npz member {info.filename}", limits)
            if total > limits.field_bytes:
                raise limits.refuse("the .npz arrays together hold", total, "field_bytes")
    return total


def decoded_size(value: Any) -> int:
    """About how many bytes a decoded field holds (arrays and bytes exactly; other objects: not counted)."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], np.ndarray):
        return sum(v.nbytes for v in value if isinstance(v, np.ndarray))
    if isinstance(value, dict) and value and isinstance(next(iter(value.values())), np.ndarray):
        return sum(v.nbytes for v in value.values() if isinstance(v, np.ndarray))
    return 0
