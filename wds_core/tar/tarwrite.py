"""Tar headers out: members encoded as ustar bytes, deterministic and compact.

:class:`MemberPacker` turns ``(name, data)`` into the header(s), data and
padding of one regular member.  Every header field but the name and size is
fixed per packer (mtime, mode, uid, gid, owner names), so its share of the
checksum is computed once and a member costs a few byte joins.

Names that fit in 100 bytes go in the name field; names up to 255 bytes that
split at a ``/`` use the ustar ``prefix`` field; anything longer, and sizes of
8 GiB or more, get a pax extended header.  No pax header is written when none
is needed, so a small-sample shard stays half the size of one with a pax header
per member.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BLOCK", "MemberPacker", "encode_member", "end_of_archive", "pax_record"]

BLOCK = 512
_MAX_SIZE = 8**11 - 1  # what 11 octal digits hold
_ZEROS = bytes(BLOCK)


def end_of_archive() -> bytes:
    """The two zero blocks that end a tar archive."""
    return _ZEROS * 2


def _octal(value: int, width: int) -> bytes:
    return b"%0*o\x00" % (width - 1, value)


def _text_field(value: str, width: int) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) >= width:
        raise ValueError(f"{value!r} does not fit in a {width}-byte tar header field")
    return raw.ljust(width, b"\x00")


def pax_record(key: str, value: str) -> bytes:
    """One pax record, ``"<length> key=value\\n"``, its length counting itself."""
    body = f" {key}={value}\n".encode("utf-8", "surrogateescape")
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return str(length).encode() + body


def _split_long_name(raw: bytes) -> tuple[bytes, bytes] | None:
    """``(prefix, name)`` for the ustar prefix field, or ``None`` when it cannot hold ``raw``."""
    if len(raw) > 255:
        return None
    cut = raw.find(b"/", len(raw) - 101)
    while cut != -1:
        if 0 < cut <= 155 and len(raw) - cut - 1 <= 100 and cut < len(raw) - 1:
            return raw[:cut], raw[cut + 1 :]
        cut = raw.find(b"/", cut + 1)
    return None


class MemberPacker:
    """Encodes members with fixed ``mtime``, ``mode``, ``uid``/``gid`` and owner names."""

    def __init__(
        self, *, mtime: int = 0, mode: int = 0o444, uid: int = 0, gid: int = 0, uname: str = "", gname: str = ""
    ) -> None:
        if mtime < 0 or mtime > _MAX_SIZE:
            raise ValueError(f"mtime must be between 0 and {_MAX_SIZE}, got {mtime}")
        self._middle = _octal(mode, 8) + _octal(uid, 8) + _octal(gid, 8)
        self._mtime = _octal(int(mtime), 12)
        self._owner = bytes(100) + b"ustar\x0000" + _text_field(uname, 32) + _text_field(gname, 32) + bytes(16)
        # checksum of everything but name, size, prefix and type flag, the checksum field counted as spaces
        self._base_sum = sum(self._middle) + sum(self._mtime) + 8 * 32 + sum(self._owner)
        self._plain_tail = self._owner + bytes(155 + 12)  # after the type flag, when there is no prefix
        self._sizes: dict[int, tuple[bytes, int]] = {}  # size -> (size field, its checksum share)

    def _size_field(self, size: int) -> tuple[bytes, int]:
        known = self._sizes.get(size)
        if known is None:
            field = _octal(size, 12)
            known = (field, sum(field) + self._base_sum)
            if len(self._sizes) < 65536:
                self._sizes[size] = known
        return known

    def header(self, raw_name: bytes, size: int, kind: bytes = b"0", prefix: bytes = b"") -> bytes:
        size_field, partial_sum = self._size_field(size)
        chksum = partial_sum + sum(raw_name) + kind[0] + sum(prefix)
        return b"".join(
            (
                raw_name.ljust(100, b"\x00"),
                self._middle,
                size_field,
                self._mtime,
                b"%06o\x00 " % chksum,
                kind,
                self._owner,
                prefix.ljust(155, b"\x00"),
                bytes(12),
            )
        )

    def pack_into(self, out: list[Any], name: str, data: bytes | bytearray | memoryview) -> int:
        """Append the pieces of one member to ``out``; return how many bytes they take."""
        raw = name.encode("utf-8", "surrogateescape")
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        if len(raw) <= 100 and size <= _MAX_SIZE:  # the common case, header() inlined
            size_field, partial_sum = self._sizes.get(size) or self._size_field(size)
            header = b"".join(
                (
                    raw.ljust(100, b"\x00"),
                    self._middle,
                    size_field,
                    self._mtime,
                    b"%06o\x00 0" % (partial_sum + sum(raw) + 48),
                    self._plain_tail,
                )
            )
            pad = (-size) % BLOCK
            out += (header, data, _ZEROS[:pad])
            return BLOCK + size + pad
        pieces = self.pack(name, data)
        out += pieces
        return sum(len(p) if type(p) is bytes else memoryview(p).nbytes for p in pieces)

    def pack(self, name: str, data: bytes | bytearray | memoryview) -> list[bytes | bytearray | memoryview]:
        """The pieces (headers, data, padding) of one member, to be written in order."""
        raw = name.encode("utf-8", "surrogateescape")
        size = len(data) if type(data) is bytes else memoryview(data).nbytes
        pad = _ZEROS[: (-size) % BLOCK]
        if len(raw) <= 100 and size <= _MAX_SIZE:
            return [self.header(raw, size), data, pad]
        records = b""
        prefix = b""
        if len(raw) > 100:
            split = _split_long_name(raw)
            if split is None:
                records += pax_record("path", name)
            else:
                prefix, raw = split
        if size > _MAX_SIZE:
            records += pax_record("size", str(size))
        pieces: list[bytes | bytearray | memoryview] = []
        if records:
            pax_name = b"PaxHeaders/" + raw[-80:].rsplit(b"/", 1)[-1]
            pieces += [self.header(pax_name[:100], len(records), b"x"), records, _ZEROS[: (-len(records)) % BLOCK]]
        pieces += [self.header(raw[-100:], min(size, _MAX_SIZE), b"0", prefix), data, pad]
        return pieces


_DEFAULT = MemberPacker()


def encode_member(name: str, data: bytes, *, mtime: int = 0, mode: int = 0o444, uid: int = 0, gid: int = 0) -> bytes:
    """The header(s), data and padding of one regular member, as one bytes object."""
    packer = (
        _DEFAULT
        if (mtime, mode, uid, gid) == (0, 0o444, 0, 0)
        else MemberPacker(mtime=mtime, mode=mode, uid=uid, gid=gid)
    )
    return b"".join(packer.pack(name, data))
