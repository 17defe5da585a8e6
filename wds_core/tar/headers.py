"""Tar header fields: the type flags, numbers, checksums, names and pax records of one header.

What the walk (:mod:`.walk`) reads each 512-byte header with, for the
streaming reader and the offset index alike; the byte layout is
POSIX ustar's (name at 0, size at 124, checksum at 148, type flag at 156,
magic at 257, prefix at 345) with GNU's base-256 numbers.
"""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np

from ..errors import OverLimitError, TarFormatError

__all__ = [
    "BLOCK",
    "EMPTY",
    "ENDS_IN_HEADER",
    "ENDS_IN_MEMBER",
    "ENDS_IN_PADDING",
    "ENDS_UNMARKED",
    "EXTENSIONS",
    "GNU_LONGLINK",
    "GNU_LONGNAME",
    "GNU_SPARSE",
    "PAX",
    "PAX_GLOBAL",
    "PAX_SOLARIS",
    "REGULAR",
    "SUM_ENDS",
    "USTAR_MAGIC",
    "ZERO_BLOCK",
    "Extensions",
    "checksum_ok",
    "corrupt_header",
    "decode_name",
    "first_bad_checksum",
    "parse_number",
    "parse_pax",
    "pax_number",
    "ustar_name",
]

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
REGULAR = (0x30, 0x00, 0x37)  # '0', NUL (old regular file), '7' (contiguous file)
GNU_LONGNAME, GNU_LONGLINK = 0x4C, 0x4B  # 'L', 'K'
PAX, PAX_GLOBAL, PAX_SOLARIS = 0x78, 0x67, 0x58  # 'x', 'g', 'X'
GNU_SPARSE = 0x53  # 'S'
EXTENSIONS = (GNU_LONGNAME, GNU_LONGLINK, PAX, PAX_GLOBAL, PAX_SOLARIS)  # headers that describe the next member
USTAR_MAGIC = b"ustar\x00"
# what a walk says of a shard that ends early or holds no tar, streaming or indexing: the same words (a
# differential test compares their errors whole)
EMPTY = "the shard is empty: expected a tar archive"
ENDS_IN_HEADER = "the shard ends inside a tar header"
ENDS_IN_MEMBER = "the shard ends inside a member"
ENDS_IN_PADDING = "the shard ends inside a member's padding"
ENDS_UNMARKED = "the shard ends without an end-of-archive block; it is probably truncated"

# how the checksum field ends after six octal digits in the common case (checksum_ok decides the others): a NUL
# ends the number whatever follows; spaces may pad it; anything else after a space makes it no number
SUM_ENDS = frozenset({b"\x00\x00", b"\x00 ", b" \x00", b"  "})
_SHIFTS = np.array([15, 12, 9, 6, 3, 0], dtype=np.uint32)


def parse_number(field: bytes, what: str) -> int:
    """A tar numeric field: octal digits (ended by NUL or space), or a positive GNU base-256 number.

    Anything else raises ``ValueError``: ``int()`` alone would take a sign,
    underscores and inner spaces, and a negative size walks a reader backwards.
    """
    if field and field[0] & 0x80:
        if field[0] & 0x40:  # negative base-256 numbers make no sense for sizes
            raise ValueError(f"negative {what}")
        return int.from_bytes(field[1:], "big") | ((field[0] & 0x3F) << (8 * (len(field) - 1)))
    text = field.split(b"\x00", 1)[0].strip(b" ")
    if not text:
        return 0
    if not text.isdigit():  # ASCII digits only (bytes.isdigit): no sign, underscore or space inside
        raise ValueError(f"{what} is not an octal number: {text[:16]!r}")
    return int(text, 8)


def pax_number(value: str, what: str, url: object, offset: int) -> int:
    """A pax record's decimal number (``size``): ASCII digits only, else a :class:`TarFormatError`."""
    if not (value.isascii() and value.isdigit()) or len(value) > 20:
        raise TarFormatError(f"bad {what} in pax header: {value[:24]!r}", url=url, offset=offset)
    return int(value)


def checksum_ok(block: bytes) -> bool:
    field = block[148:156]
    if field[6:] in SUM_ENDS and field[:6].isdigit():  # the common case: six octal digits of the unsigned sum
        try:
            if int(field[:6], 8) == sum(block) - sum(field) + 256:
                return True
        except ValueError:  # an 8 or a 9
            return False
    try:
        stored = parse_number(field, "checksum")
    except ValueError:
        return False
    unsigned = sum(block) - sum(field) + 8 * 32
    if stored == unsigned:
        return True
    signed = sum(b - 256 if b > 127 else b for b in block) - sum(b - 256 if b > 127 else b for b in field)
    return stored == signed + 8 * 32


def first_bad_checksum(buf: bytes | mmap.mmap, positions: list[int], origin: int = 0) -> int:
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
    ends = (field[:, 6] == 0) | ((field[:, 6] == 32) & ((field[:, 7] == 0) | (field[:, 7] == 32)))  # SUM_ENDS
    fast = (field[:, :6] == digits).all(axis=1) & ends
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


class Extensions:
    """The extension headers in force for a shard's next member, with what they hold counted.

    GNU long names (``L``) and pax records (``x``; ``g`` for the rest of the
    shard) rename and resize the member after them; the readers (streaming and
    indexing) keep them here between headers, so both interpret a header the
    same way and are held to the same bounds:

    * sizes are validated (:meth:`size`): octal or base-256 digits in the
      header, decimal digits in a pax ``size``; never negative;
    * a member's own extensions together, and the shard's global records
      together, may hold ``limits.header_bytes``: :meth:`fits` says whether
      the next extension's data may be read at all.  An extension that does
      not fit is skipped (:meth:`skip`) and the member it describes is
      refused (:meth:`refusal`).
    """

    __slots__ = ("longname", "pax", "glob", "start", "held", "glob_held", "limits", "url", "refused", "reported")

    def __init__(self, url: object, limits: Any, glob: dict[str, str] | None = None) -> None:
        self.url, self.limits = url, limits
        self.glob = {} if glob is None else glob
        self.glob_held = sum(len(k) + len(v) for k, v in self.glob.items())
        self.longname: bytes | None = None
        self.pax: dict[str, str] | None = None
        self.start = -1  # offset of the first extension header of the pending member
        self.held = 0  # bytes of the pending member's extensions
        self.refused: tuple[int, int] | None = None  # (bytes, offset) of an extension over the limit
        self.reported = False  # the refusal was reported when its first extension was met (:meth:`early`)

    @property
    def plain(self) -> bool:
        """Nothing pending: the next regular member is named and sized by its own header alone."""
        return self.longname is None and self.pax is None and self.refused is None and "path" not in self.glob

    def size(self, header: bytes, offset: int) -> int:
        """The size field of the ``header`` at ``offset``, validated (a pending pax ``size`` is applied by the
        caller to the member's own header: :func:`pax_number`)."""
        try:
            return parse_number(header[124:136], "size")
        except ValueError as exn:
            raise TarFormatError(f"bad member size in tar header ({exn})", url=self.url, offset=offset) from None

    def fits(self, kind: int, size: int) -> bool:
        """Whether an extension header with ``size`` bytes of data stays within the limit (read it only then)."""
        if kind == PAX_GLOBAL:
            return self.glob_held + size <= self.limits.header_bytes
        return kind == GNU_LONGLINK or self.held + size <= self.limits.header_bytes

    def skip(self, kind: int, size: int, offset: int) -> OverLimitError | None:
        """Skip an extension that does not fit: the refusal of the shard's global records (returned), or of
        the member this one describes (kept until that member's header: :meth:`refusal`)."""
        if kind == PAX_GLOBAL:
            what = "the shard's global pax records would hold"
            where = {"url": self.url, "offset": offset}
            return self.limits.over(what, self.glob_held + size, "header_bytes", "tarfile_to_samples", **where)
        if self.start < 0:
            self.start = offset
        self.refused = (self.held + size, offset)
        return None

    def extend(self, kind: int, data: bytes, offset: int) -> None:
        """Take the data of an extension header (one that :meth:`fits`) at ``offset``."""
        if kind == PAX_GLOBAL:  # not part of the next member: it starts at its own headers
            self.glob_held += len(data)
            self.glob.update(parse_pax(data, self.url, offset))
            return
        if self.start < 0:
            self.start = offset
        if kind == GNU_LONGNAME:
            self.held += len(data)
            self.longname = data.split(b"\x00", 1)[0]
        elif kind in (PAX, PAX_SOLARIS):
            self.held += len(data)
            records = parse_pax(data, self.url, offset)
            self.pax = records if self.pax is None else {**self.pax, **records}
        # GNU_LONGLINK: a link's target, nothing a regular member needs

    def name(self, buf: bytes, pos: int, kind: int, offset: int) -> str | None:
        """The name of the member whose (non-extension) header is at ``buf[pos]``; ``None`` unless it is a
        regular file.  Call :meth:`done` once the member is dealt with."""
        if kind == GNU_SPARSE:
            raise TarFormatError("GNU sparse members are not supported", url=self.url, offset=offset)
        if kind not in REGULAR:
            return None  # directories, links, devices: skipped with their extensions
        path = (self.pax or {}).get("path") or self.glob.get("path")
        if path is not None:
            return path
        return decode_name(self.longname if self.longname is not None else ustar_name(buf, pos))

    def first(self, offset: int) -> int:
        """Where the member whose header is at ``offset`` starts: at its first extension header, if any."""
        return self.start if self.start >= 0 else offset

    def refusal(self, name: str | None) -> OverLimitError | None:
        """The refusal of the pending member (``name``) when one of its extensions was over the limit."""
        if self.refused is None:
            return None
        held, offset = self.refused
        member = "the member after them" if name is None else f"member {name!r}"
        what = f"the extension headers (long name, pax records) of {member} hold"
        where = {"url": self.url, "member": name, "offset": self.first(offset)}
        error = self.limits.over(what, held, "header_bytes", "tarfile_to_samples", **where)
        error.repeats = self.reported and name is not None
        return error

    def early(self) -> OverLimitError | None:
        """The refusal of the pending member, once, as soon as one of its extensions is over the limit: before the
        rest is streamed past (a shard of 1 GiB pax headers takes seconds to inflate), unnamed as yet."""
        if self.reported or self.refused is None:
            return None
        self.reported = True
        return self.refusal(None)

    def done(self) -> None:
        """Forget the pending member's extensions (its header has been read)."""
        self.longname = self.pax = self.refused = None
        self.start, self.held, self.reported = -1, 0, False


def corrupt_header(offset: int, url: object) -> TarFormatError:
    if offset == 0:
        return TarFormatError("not a tar archive: the first header has a bad checksum", url=url, offset=0)
    return TarFormatError("corrupt tar header (bad checksum)", url=url, offset=offset)
