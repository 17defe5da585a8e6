"""Tar header fields: the type flags, numbers, checksums, names and pax records of one header.

Shared by the streaming reader (:mod:`.tario`) and the offset indexer
(:mod:`.tarindex`), which parse the same 512-byte headers; the byte layout is
POSIX ustar's (name at 0, size at 124, checksum at 148, type flag at 156,
magic at 257, prefix at 345) with GNU's base-256 numbers.
"""

from __future__ import annotations

import numpy as np

from ..errors import TarFormatError

__all__ = [
    "BLOCK",
    "GNU_LONGLINK",
    "GNU_LONGNAME",
    "GNU_SPARSE",
    "PAX",
    "PAX_GLOBAL",
    "PAX_SOLARIS",
    "REGULAR",
    "USTAR_MAGIC",
    "ZERO_BLOCK",
    "checksum_ok",
    "corrupt_header",
    "decode_name",
    "first_bad_checksum",
    "member_size",
    "parse_number",
    "parse_pax",
    "special_header",
    "ustar_name",
]

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
REGULAR = (0x30, 0x00, 0x37)  # '0', NUL (old regular file), '7' (contiguous file)
GNU_LONGNAME, GNU_LONGLINK = 0x4C, 0x4B  # 'L', 'K'
PAX, PAX_GLOBAL, PAX_SOLARIS = 0x78, 0x67, 0x58  # 'x', 'g', 'X'
GNU_SPARSE = 0x53  # 'S'
USTAR_MAGIC = b"ustar\x00"
_SHIFTS = np.array([15, 12, 9, 6, 3, 0], dtype=np.uint32)


def parse_number(field: bytes, what: str) -> int:
    """A tar numeric field: octal text, or GNU base-256 when the top bit is set."""
    if field and field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        if field[0] & 0x40:  # negative base-256 numbers make no sense for sizes
            raise ValueError(f"negative {what}")
        return value | ((field[0] & 0x3F) << (8 * (len(field) - 1)))
    text = field.split(b"\x00", 1)[0].strip(b" ")
    if not text:
        return 0
    return int(text, 8)


def checksum_ok(block: bytes) -> bool:
    field = block[148:156]
    try:
        stored = parse_number(field, "checksum")
    except ValueError:
        return False
    unsigned = sum(block) - sum(field) + 8 * 32
    if stored == unsigned:
        return True
    signed = sum(b - 256 if b > 127 else b for b in block) - sum(b - 256 if b > 127 else b for b in field)
    return stored == signed + 8 * 32


def first_bad_checksum(buf: bytes, positions: list[int], origin: int = 0) -> int:
    """Index into ``positions`` of the first header with a wrong checksum, or -1.

    Headers sit at ``origin`` plus multiples of the block size in ``buf``.
    """
    if len(positions) < 4:
        for i, pos in enumerate(positions):
            if not checksum_ok(buf[pos : pos + BLOCK]):
                return i
        return -1
    count = ((len(buf) - origin) // BLOCK) * BLOCK
    blocks = np.frombuffer(buf, np.uint8, count=count, offset=origin).reshape(-1, BLOCK)
    rows = blocks[(np.array(positions) - origin) // BLOCK]
    field = rows[:, 148:156]
    expected = rows.sum(axis=1, dtype=np.uint32) - field.sum(axis=1, dtype=np.uint32) + 8 * 32
    digits = ((expected[:, None] >> _SHIFTS) & 7) + 48
    fast = (field[:, :6] == digits).all(axis=1) & ((field[:, 6] == 0) | (field[:, 6] == 32))
    if fast.all():
        return -1
    for i in np.flatnonzero(~fast).tolist():
        pos = positions[i]
        if not checksum_ok(buf[pos : pos + BLOCK]):
            return i
    return -1


def parse_pax(data: bytes, url: object, offset: int) -> dict[str, str]:
    records: dict[str, str] = {}
    i, n = 0, len(data)
    while i < n:
        if data[i] == 0:  # some writers pad the record block with NULs
            break
        space = data.find(b" ", i)
        try:
            length = int(data[i:space])
        except ValueError:
            length = 0
        if space < 0 or length <= 0 or i + length > n or data[i + length - 1] != 0x0A:
            raise TarFormatError("malformed pax header record", url=url, offset=offset)
        key, sep, value = data[space + 1 : i + length - 1].partition(b"=")
        if not sep:
            raise TarFormatError("malformed pax header record", url=url, offset=offset)
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        i += length
    return records


def decode_name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def ustar_name(buf: bytes, pos: int) -> bytes:
    end = buf.find(b"\x00", pos, pos + 100)
    raw = buf[pos : end if end >= 0 else pos + 100]
    if buf[pos + 345] and buf[pos + 257 : pos + 263] == USTAR_MAGIC:
        pend = buf.find(b"\x00", pos + 345, pos + 500)
        raw = buf[pos + 345 : pend if pend >= 0 else pos + 500] + b"/" + raw
    return raw


def member_size(header: bytes, pax: dict[str, str] | None, url: object, offset: int) -> int:
    try:
        size = parse_number(header[124:136], "size")
        if pax is not None and "size" in pax:
            size = int(pax["size"])
    except ValueError:
        raise TarFormatError("bad member size in tar header", url=url, offset=offset) from None
    return size


def special_header(
    buf: bytes,
    pos: int,
    kind: int,
    data: bytes,
    longname: bytes | None,
    pax: dict[str, str] | None,
    glob: dict[str, str],
    url: object,
    offset: int,
) -> tuple[str | None, bytes | None, dict[str, str] | None]:
    """Handle a header that is not a plain regular file.

    Returns ``(name, longname, pax)``: the name of a regular member to yield (or
    ``None``) and the extension state for the headers that follow.
    """
    if kind == GNU_LONGNAME:
        return None, data.split(b"\x00", 1)[0], pax
    if kind == GNU_LONGLINK:
        return None, longname, pax
    if kind in (PAX, PAX_SOLARIS):
        records = parse_pax(data, url, offset)
        return None, longname, records if pax is None else {**pax, **records}
    if kind == PAX_GLOBAL:
        glob.update(parse_pax(data, url, offset))
        return None, longname, pax
    if kind == GNU_SPARSE:
        raise TarFormatError("GNU sparse members are not supported", url=url, offset=offset)
    if kind not in REGULAR:
        return None, None, None  # directories, links, devices: skipped with their extensions
    path = (pax or {}).get("path") or glob.get("path")
    if path is not None:
        return path, None, None
    return decode_name(longname if longname is not None else ustar_name(buf, pos)), None, None


def corrupt_header(offset: int, url: object) -> TarFormatError:
    if offset == 0:
        return TarFormatError("not a tar archive: the first header has a bad checksum", url=url, offset=0)
    return TarFormatError("corrupt tar header (bad checksum)", url=url, offset=offset)
