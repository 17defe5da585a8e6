"""The ``tenbin`` format of webdataset (``.ten``/``.tb`` fields): lists of numpy arrays, no pickle.

A buffer is a sequence of *chunks*: the 8 bytes ``~TenBin~``, the length of
the data as a little-endian int64, the data, then zero bytes up to a multiple
of 64.  Each array takes two chunks: a header (int64 values: the dtype code
such as ``f4`` and an info string of at most 8 ASCII characters, each packed
into 8 bytes, the number of dimensions, the shape) and the raw C-order data.
Supported dtypes: float16/32/64, int8/16/32/64, uint8/16/32/64.

Decoding checks every length against the buffer, so a damaged field is a
``ValueError`` naming what is wrong, never a short or garbled array.
"""

from __future__ import annotations

import struct
import sys
from typing import Any, BinaryIO

import numpy as np

from ..io import files

__all__ = ["decode_buffer", "encode_buffer", "load", "read", "save", "write"]

MAGIC = b"~TenBin~"
_ALIGN = 64
_CODES = {
    "float16": "f2", "float32": "f4", "float64": "f8",
    "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8",
}  # fmt: skip
_DTYPES = {code: np.dtype(name) for name, code in _CODES.items()}


def _pack8(text: str) -> int:
    raw = text.encode("ascii")
    if len(raw) > 8:
        raise ValueError(f"tenbin: an info string holds at most 8 ASCII characters, got {text!r}")
    return int(struct.unpack("<q", raw.ljust(8, b"\0"))[0])


def _unpack8(value: int) -> str:
    return struct.pack("<q", value).rstrip(b"\0").decode("ascii", "replace")


def _padded(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _header(array: np.ndarray, info: str) -> bytes:
    code = _CODES.get(array.dtype.name)
    if code is None:
        raise ValueError(f"tenbin cannot store {array.dtype.name} arrays (supported: {', '.join(_CODES)})")
    if array.ndim >= 10:
        raise ValueError(f"tenbin stores arrays of at most 9 dimensions, got {array.ndim}")
    values = [_pack8(code), _pack8(info), array.ndim, *array.shape]
    return np.asarray(values, dtype="<i8").tobytes()


def _pieces(arrays: Any, infos: list[str] | None) -> list[bytes | memoryview]:
    if isinstance(arrays, np.ndarray):
        arrays = [arrays]
    arrays = list(arrays)
    if infos is not None and len(infos) != len(arrays):
        raise ValueError(f"tenbin: {len(infos)} infos for {len(arrays)} arrays")
    pieces: list[bytes | memoryview] = []
    for i, array in enumerate(arrays):
        array = np.asarray(array)
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a 0-d array 1-d)
            array = array.copy(order="C")
        little = array.astype(array.dtype.newbyteorder("<"), copy=False)
        pieces += [_header(little, "" if infos is None else infos[i]), little.reshape(-1).view(np.uint8).data]
    return pieces


def encode_buffer(arrays: Any, infos: list[str] | None = None) -> bytes:
    """The tenbin bytes of a list of arrays (or of one array)."""
    out = bytearray()
    for piece in _pieces(arrays, infos):
        out += MAGIC + struct.pack("<q", len(piece)) + piece
        out += bytes(_padded(len(piece)) - len(piece))
    return bytes(out)


def _chunks(buffer: bytes | memoryview) -> list[memoryview]:
    view, offset, chunks = memoryview(buffer).cast("B"), 0, []
    while offset < len(view):
        if bytes(view[offset : offset + 8]) != MAGIC:
            raise ValueError(f"tenbin: no chunk marker at byte {offset}")
        if offset + 16 > len(view):
            raise ValueError(f"tenbin: the buffer ends inside the chunk header at byte {offset}")
        (size,) = struct.unpack("<q", view[offset + 8 : offset + 16])
        start = offset + 16
        if size < 0 or start + size > len(view):
            raise ValueError(
                f"tenbin: the chunk at byte {offset} claims {size} bytes, the buffer has {len(view) - start}"
            )
        chunks.append(view[start : start + size])
        offset = start + _padded(size)
    return chunks


def _arrays(chunks: list[Any], infos: bool) -> Any:
    if len(chunks) % 2:
        raise ValueError("tenbin: an array header without its data")
    arrays, names = [], []
    for header, data in zip(chunks[::2], chunks[1::2]):
        values = np.frombuffer(header, dtype="<i8")
        if len(values) < 3 or len(values) < 3 + int(values[2]):
            raise ValueError("tenbin: a truncated array header")
        dtype = _DTYPES.get(_unpack8(int(values[0])))
        if dtype is None:
            raise ValueError(f"tenbin: unknown dtype code {_unpack8(int(values[0]))!r}")
        shape = tuple(int(n) for n in values[3 : 3 + int(values[2])])
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if any(n < 0 for n in shape) or expected != len(data):
            raise ValueError(f"tenbin: an array of shape {shape} and dtype {dtype} cannot hold {len(data)} bytes")
        arrays.append(np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape))
        names.append(_unpack8(int(values[1])))
    return (arrays, names) if infos else arrays


def decode_buffer(buffer: bytes | memoryview, infos: bool = False) -> Any:
    """The arrays of a tenbin buffer (with ``infos=True``: ``(arrays, info strings)``)."""
    return _arrays(_chunks(buffer), infos)


def write(stream: BinaryIO, arrays: Any, infos: list[str] | None = None) -> None:
    """Write arrays to a binary stream in tenbin format."""
    stream.write(encode_buffer(arrays, infos))


def _read_chunk(stream: BinaryIO) -> bytes | None:
    head = stream.read(16)
    if not head:
        return None
    if len(head) < 16 or head[:8] != MAGIC:
        raise ValueError("tenbin: the stream does not continue with a chunk")
    (size,) = struct.unpack("<q", head[8:])
    data = stream.read(size) if size >= 0 else b""
    if size < 0 or len(data) != size:
        raise ValueError(f"tenbin: a chunk of {size} bytes is cut short")
    stream.read(_padded(size) - size)
    return data


def read(stream: BinaryIO, n: int = sys.maxsize, infos: bool = False) -> Any:
    """Read up to ``n`` arrays from a binary stream in tenbin format."""
    chunks: list[bytes] = []
    for _ in range(n):
        header = _read_chunk(stream)
        if header is None:
            break
        data = _read_chunk(stream)
        if data is None:
            raise ValueError("tenbin: the stream ends after an array header")
        chunks += [header, data]
    return _arrays(chunks, infos)


def save(fname: str, *arrays: Any, infos: list[str] | None = None, nocheck: bool = False) -> None:
    """Write arrays to a ``.ten`` file (``nocheck=True`` allows another name)."""
    if not nocheck and not str(fname).endswith(".ten"):
        raise ValueError(f"a tenbin file name should end in .ten, got {fname!r} (pass nocheck=True)")
    with files.open_file(fname, "wb") as stream:
        write(stream, list(arrays), infos)


def load(fname: str, infos: bool = False, nocheck: bool = False) -> Any:
    """The arrays of a ``.ten`` file (``nocheck=True`` allows another name)."""
    if not nocheck and not str(fname).endswith(".ten"):
        raise ValueError(f"a tenbin file name should end in .ten, got {fname!r} (pass nocheck=True)")
    with files.open_file(fname, "rb") as stream:
        return read(stream, infos=infos)
