r"""Bounded decoding: what one field, and one sample, may expand to.

Shards often come from the internet: a 400 KB ``.json.gz`` may inflate to
400 MB, a ``.npy`` header may claim 37 GiB, 20 MB of MessagePack may decode to
1.5 GB of empty lists.  Every decoder checks before it spends the memory
(:meth:`DecodeLimits.allowed` is what one field may take):

* ``field_bytes`` bounds what one field decodes to: arrays from their headers,
  images from their headers (output pixels x channels x bytes per value, on
  every decoding path), structured fields (JSON, MessagePack, CBOR) from an
  upper bound of their decoded objects, containers included
  (:mod:`.structured`), before anything is decoded;
* ``expansion`` bounds compressed data: a ``.gz`` field, or an ``.npz``'s
  members, may inflate to ``expansion`` times their compressed bytes (but
  always to ``expansion_floor``); inflating stops as soon as it passes;
* ``sample_bytes`` bounds the fields of one sample together: each decoder
  :func:`charge`\ s what it allocates, and the sample is refused as soon as the
  total passes.

The shard readers hold members and records to the same limits before reading
them (:func:`wds_core.tar.tario.iter_members`, :mod:`wds_core.tar.grouping`,
:mod:`wds_core.sources.recordstreams`); ``header_bytes`` bounds a tar member's
extension headers (long names and pax records).  Defaults are far beyond any
honest dataset's fields; raise them with
``decode(..., limits={"field_bytes": 8 << 30})`` or the configuration file's
``decode_limits`` mapping (``WDS_CONFIG``).
"""

from __future__ import annotations

import contextvars
import io
import math
import sys
import zipfile
import zlib
from typing import Any

import numpy as np

from ..limits import DecodeLimitError, DecodeLimits

__all__ = [
    "DecodeLimitError",
    "DecodeLimits",
    "bounded_gunzip",
    "charge",
    "charged",
    "check_npy",
    "check_npz",
    "check_pixels",
    "current_limits",
    "decoded_size",
]

_CHUNK = 1 << 20  # bytes inflated per step


def check_pixels(width: int, height: int, bands: int, kind: object = "image", value_bytes: int = 1) -> int:
    """Refuse an image whose decoding would take more than a field may (before decoding); what the result takes.

    ``bands`` x ``value_bytes`` is what one pixel of the result takes (an ``rgb`` float32 array: 3 x 4).
    Pillow's own decompression-bomb check only warns below twice its limit, and a damaged header can claim
    anything: the decode limit (``field_bytes``, :mod:`.bounded`) bounds what is spent.
    """
    limits = current_limits()
    nbytes = width * height * max(bands, 1) * value_bytes
    if nbytes > limits.field_bytes:
        shown = f"{width}x{height}x{bands}" + (f" of {value_bytes}-byte values" if value_bytes > 1 else "")
        raise limits.refuse(f"the {kind} header says {shown}:", nbytes, "field_bytes")
    return nbytes


class _Decoding:
    """The limits of the decoder running in this thread, and what the sample being decoded has taken."""

    __slots__ = ("limits", "charged")

    def __init__(self, limits: DecodeLimits) -> None:
        self.limits, self.charged = limits, 0


_CURRENT: contextvars.ContextVar[_Decoding | None] = contextvars.ContextVar("wds_decoding", default=None)


def current_limits() -> DecodeLimits:
    """The limits of the decoder running in this thread (outside one: the configuration file's, or the defaults)."""
    decoding = _CURRENT.get()
    return DecodeLimits.of() if decoding is None else decoding.limits


def use_limits(limits: DecodeLimits) -> contextvars.Token:
    """Decode a sample under ``limits`` in this thread, its charges counted from zero (until :func:`reset_limits`)."""
    return _CURRENT.set(_Decoding(limits))


def reset_limits(token: contextvars.Token) -> None:
    _CURRENT.reset(token)


def charged() -> int:
    """What the sample being decoded in this thread has been charged so far (0 outside a decoder)."""
    decoding = _CURRENT.get()
    return 0 if decoding is None else decoding.charged


def charge(nbytes: int, what: str) -> None:
    """Count ``nbytes`` that decoding ``what`` is about to take against the sample's ``sample_bytes``; refused
    (a :class:`DecodeLimitError`) before it is taken when the sample would pass it.  Outside a decoder, only
    counted against nothing."""
    decoding = _CURRENT.get()
    if decoding is None:
        return
    total = decoding.charged + nbytes
    if total > decoding.limits.sample_bytes:
        raise decoding.limits.refuse(f"the sample's fields would decode to ({what})", total, "sample_bytes")
    decoding.charged = total


def bounded_gunzip(data: bytes, limits: DecodeLimits | None = None) -> bytes:
    """``gzip.decompress(data)``, refused as soon as the output passes what the field may inflate to
    (:meth:`DecodeLimits.allowed`: ``expansion`` times its bytes, at least ``expansion_floor``, at most
    ``field_bytes``)."""
    limits = limits or current_limits()
    limit = limits.allowed(len(data))
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
                raise limits.refuse(
                    f"the gzip data ({len(data):,} bytes) inflates to more than", total - len(chunk),
                    f"allowed:{len(data)}",
                )  # fmt: skip
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
    """Check an ``.npz`` from its zip directory and its arrays' headers before anything is inflated; the bytes
    its members inflate to together (every member, arrays or not, is read by ``numpy.load``).

    They may take what a compressed field may (:meth:`DecodeLimits.allowed`), and each array's header must
    agree with its member's size.
    """
    limits = limits or current_limits()
    allowed = limits.allowed(len(data))
    total = 0
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = archive.infolist()
        total = sum(info.file_size + _ZIP_ENTRY for info in members)  # ZipInfo objects cost too
        if total > allowed:
            what = f"the {len(members)} members of the .npz ({len(data):,} bytes) inflate to"
            raise limits.refuse(what, total, f"allowed:{len(data)}")
        for info in members:
            if not info.filename.endswith(".npy"):
                continue
            with archive.open(info) as member:
                head = io.BytesIO(member.read(min(info.file_size, 1 << 16)))  # the header is within the first 64 KB
            _array_bytes(head, info.file_size, f"the .npz member {info.filename}", limits)
    return total


_ZIP_ENTRY = 512  # bytes of Python objects per zip directory entry, about


def decoded_size(value: Any, limit: int = sys.maxsize) -> int:
    """About how many bytes a decoded value holds, containers and what they hold included (arrays and bytes
    exactly); counting stops once it passes ``limit``.  Objects met twice are counted once."""
    total = 0
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, np.ndarray):
            total += item.nbytes if item.base is None else 0  # a view's bytes are its base's
        elif isinstance(item, (bytes, bytearray, memoryview, str, int, float, bool)) or item is None:
            total += sys.getsizeof(item) if item is not None else 0
        elif isinstance(item, (list, tuple, dict, set, frozenset)):
            if id(item) in seen:
                continue
            seen.add(id(item))
            total += sys.getsizeof(item)
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            else:
                stack.extend(item)
        else:
            total += sys.getsizeof(item, 64)
        if total > limit:
            break
    return total
