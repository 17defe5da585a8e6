"""JSON, MessagePack and CBOR fields decoded within the decode limits, their objects counted before they exist.

A structured field expands when decoded: every empty list in 20 MB of
MessagePack is a 56-byte Python object plus its slot, 1.5 GB in all, and cbor2
hangs after running out of memory.  So a field is decoded only once an upper
bound of what its objects will take (containers included) is known to fit
``field_bytes``:

* small fields need no look: each format's worst case per encoded byte
  (:data:`WORST_RATIO`, measured on CPython: JSON ~32x, MessagePack ~78x,
  CBOR ~101x) times the field's bytes already fits;
* larger JSON is bounded from counts of its brackets, separators, quotes and
  digits (C-speed ``bytes.count``), larger MessagePack and CBOR by walking their
  item headers without building anything (:func:`msgpack_cost`,
  :func:`cbor_cost`), which also refuses lengths beyond the data.  The walk
  stops as soon as the bound passes the limit.

The bound is charged to the sample (:func:`~.limits.charge`), so
``sample_bytes`` counts structured fields by what they may hold too.
"""

from __future__ import annotations

import json
from typing import Any

from .bounded import DecodeLimits, charge, current_limits

__all__ = [
    "WORST_RATIO",
    "EndsEarly",
    "cbor_cost",
    "cbor_extent",
    "decode_cbor",
    "decode_json",
    "decode_msgpack",
    "json_cost",
    "msgpack_cost",
    "msgpack_extent",
]

# Python bytes per encoded byte at worst (CPython 3.11, 64-bit), rounded up: see the module doc.
WORST_RATIO = {"json": 40, "msgpack": 128, "cbor": 160}

# What one decoded item may take besides its payload: its slot in a list (16 with slack), plus the object: an
# int or float (<= 40), a str/bytes head (<= 80), a list head (<= 72), a tagged object (<= 200); a dict takes
# 224 bytes with up to five pairs and <= 60 a pair beyond (so 224 + 64 a pair bounds it), a set up to 120 bytes
# an element just after it grows (128).  Decoding itself holds a few kilobytes (_BASE).
_SLOT, _NUMBER, _STRING, _CONTAINER, _TAGGED = 16, 40, 80, 72, 200
_DICT, _PAIR, _SET_ITEM, _BASE = 224, 64, 128, 4096


def _bounded(data: Any, fmt: str, cost: Any, limits: DecodeLimits) -> int:
    """The bound on what ``data`` decodes to, refused when over ``field_bytes``; charged to the sample."""
    n = len(data)
    bound = n * WORST_RATIO[fmt]
    if bound > limits.field_bytes:
        bound = cost(data, limits.field_bytes)
        if bound > limits.field_bytes:
            what = f"the {fmt} field ({n:,} bytes) could decode to objects of"
            raise limits.refuse(what, bound, "field_bytes")
    charge(bound, f"a {fmt} field of {n:,} bytes")
    return bound


# ---------------------------------------------------------------- JSON


def json_cost(data: Any, limit: int = 0) -> int:
    """An upper bound of the bytes of Python objects ``json.loads(data)`` makes, from counts of its bytes.

    Every value or key follows a ``[``, ``{``, ``,`` or ``:`` (or starts the text); strings are two quotes
    each and take at most 4 bytes a character; numbers take a digit each.
    """
    raw = bytes(data)
    brackets, braces = raw.count(b"["), raw.count(b"{")
    colons, quotes = raw.count(b":"), raw.count(b'"')
    items = brackets + braces + raw.count(b",") + colons + 1
    digits = len(raw) - len(raw.translate(None, b"0123456789"))
    numbers = min(items, digits)
    return (
        _BASE
        + _SLOT * items
        + _NUMBER * numbers
        + _STRING * (quotes // 2 + 1)
        + _CONTAINER * brackets
        + _DICT * braces
        + _PAIR * colons
        + 4 * len(raw)
    )


def decode_json(data: Any) -> Any:
    _bounded(data, "json", json_cost, current_limits())
    return json.loads(data)


# ---------------------------------------------------------------- MessagePack and CBOR

# MessagePack one-byte items that make no new object (fixints 0..127 and -5..-1 are cached, nil, bools,
# the empty string) and those that do (negative fixints below -5, empty map, empty array).
_MP_FREE = bytes(range(0x00, 0x80)) + bytes(range(0xFB, 0x100)) + b"\xc0\xc2\xc3\xa0"
_MP_ONE_BYTE = _MP_FREE + bytes(range(0xE0, 0xFB)) + b"\x80\x90"
_CB_FREE = bytes(range(0x00, 0x18)) + bytes(range(0x20, 0x25)) + b"\xf4\xf5\xf6\xf7\x40\x60"
_CB_ONE_BYTE = _CB_FREE + bytes(range(0x25, 0x38)) + b"\x80\xa0" + bytes(range(0xE0, 0xF4))


def _run_cost(data: bytes, i: int, count: int, one_byte: bytes, free: bytes) -> int:
    """The cost of ``count`` items at ``data[i:]`` when all are one-byte items, else -1 (walk them)."""
    run = data[i : i + count]
    if len(run) < count or run.translate(None, one_byte):
        return -1
    return _SLOT * count + _CONTAINER * len(run.translate(None, free))


class EndsEarly(ValueError):
    """The data ends inside the object being walked; ``needed`` is how many bytes the walk needed at least."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


class _Walk:
    """A walk over item headers: ``pending`` items still to read at each open container level."""

    __slots__ = ("data", "i", "cost", "pending", "fmt", "in_set")

    def __init__(self, data: Any, fmt: str) -> None:
        self.data, self.i, self.cost, self.pending, self.fmt = bytes(data), 0, _BASE, [1], fmt
        self.in_set = False  # the next container is a CBOR set's (tag 258): its elements take table slots

    def container(self, count: int, pairs: bool) -> None:
        """What a list (or, with ``pairs``, a dict of ``count // 2`` pairs) takes itself."""
        if pairs:
            self.cost += _SLOT + (_DICT + _PAIR * (count // 2) if count else 64)
        else:
            self.cost += _SLOT + _CONTAINER + (_SET_ITEM * count if self.in_set else 0)
        self.in_set = False

    def need(self, n: int) -> None:
        """``n`` more bytes must be there (a length beyond the data is refused before a decoder sees it)."""
        if n < 0 or self.i + n > len(self.data):
            message = f"the {self.fmt} data ends early: an item at byte {self.i} needs {n:,} more bytes"
            raise EndsEarly(message, self.i + max(n, 0))

    def take(self, n: int) -> int:
        """A big-endian unsigned number of ``n`` bytes."""
        self.need(n)
        value = int.from_bytes(self.data[self.i : self.i + n], "big")
        self.i += n
        return value

    def open(self, count: int, pairs: bool, one_byte: bytes, free: bytes) -> None:
        """A container of ``count`` items starts here: what it takes, and its items to walk (all at once when
        they are one-byte items: :func:`_run_cost`)."""
        self.container(count, pairs)
        if count == 0:
            self.done()
            return
        run = _run_cost(self.data, self.i, count, one_byte, free)
        if run >= 0:
            self.cost += run
            self.i += count
            self.done()
            return
        self.need(count)  # each item takes a byte at least
        self.pending.append(count)

    def done(self) -> None:
        """One item finished: close the containers it completes."""
        pending = self.pending
        pending[-1] -= 1
        while pending and pending[-1] == 0:
            pending.pop()
            if pending:
                pending[-1] -= 1


def msgpack_cost(data: Any, limit: int = 1 << 62) -> int:
    """An upper bound of the bytes of Python objects ``msgpack.unpackb(data)`` makes (stops past ``limit``)."""
    return msgpack_extent(data, limit)[0]


def msgpack_extent(data: Any, limit: int = 1 << 62) -> tuple[int, int]:
    """``(cost, end)``: :func:`msgpack_cost` of the first object of ``data`` and where it ends (the walk stops
    past ``limit``; the end is then where it stopped).  :class:`EndsEarly` when the data ends inside it."""
    walk = _Walk(data, "MessagePack")
    buf = walk.data
    while walk.pending and walk.cost <= limit:
        walk.need(1)
        b = buf[walk.i]
        walk.i += 1
        count = -1  # items of a container opened here
        if b < 0x80 or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3):  # fixints, nil, bools: below -5 a new int
            walk.cost += _SLOT + (_NUMBER if 0xE0 <= b < 0xFB else 0)
        elif b <= 0x8F:
            count, pairs = (b & 0x0F) * 2, True
        elif b <= 0x9F:
            count, pairs = b & 0x0F, False
        elif b <= 0xBF:
            walk.cost += _string(walk, b & 0x1F, str_=True)
        elif b in (0xC4, 0xC5, 0xC6):
            walk.cost += _string(walk, walk.take(1 << (b - 0xC4)), str_=False)
        elif b in (0xD9, 0xDA, 0xDB):
            walk.cost += _string(walk, walk.take(1 << (b - 0xD9)), str_=True)
        elif b in (0xC7, 0xC8, 0xC9):  # ext 8/16/32: length, type, data
            length = walk.take(1 << (b - 0xC7))
            walk.cost += _SLOT + _TAGGED + _skip(walk, 1 + length)
        elif 0xD4 <= b <= 0xD8:  # fixext 1/2/4/8/16
            walk.cost += _SLOT + _TAGGED + _skip(walk, 1 + (1 << (b - 0xD4)))
        elif 0xCA <= b <= 0xD3:  # float32/64, uint8..64, int8..64
            _skip(walk, (4, 8, 1, 2, 4, 8, 1, 2, 4, 8)[b - 0xCA])
            walk.cost += _SLOT + _NUMBER
        elif b in (0xDC, 0xDD):
            count, pairs = walk.take(2 if b == 0xDC else 4), False
        elif b in (0xDE, 0xDF):
            count, pairs = walk.take(2 if b == 0xDE else 4) * 2, True
        else:  # 0xC1 is never used
            raise ValueError(f"the MessagePack data holds the unused byte 0xc1 at byte {walk.i - 1}")
        if count < 0:
            walk.done()
            continue
        walk.open(count, pairs, _MP_ONE_BYTE, _MP_FREE)
    return walk.cost, walk.i


def _string(walk: _Walk, length: int, str_: bool) -> int:
    """Skip a string or byte string of ``length`` bytes: what its object takes."""
    walk.need(length)
    payload = walk.data[walk.i : walk.i + length]
    walk.i += length
    if not str_ or payload.isascii():
        return _SLOT + _STRING + length
    return _SLOT + _STRING + 4 * length


def _skip(walk: _Walk, n: int) -> int:
    walk.need(n)
    walk.i += n
    return n


def cbor_cost(data: Any, limit: int = 1 << 62) -> int:
    """An upper bound of the bytes of Python objects ``cbor2.loads(data)`` makes (stops past ``limit``).

    Indefinite-length items are walked to their break; tags cost an object each (sets, dates, decimals...)
    on top of what they tag, and a set's elements a hash-table slot more.
    """
    return cbor_extent(data, limit)[0]


def cbor_extent(data: Any, limit: int = 1 << 62) -> tuple[int, int]:
    """``(cost, end)`` of the first CBOR object of ``data``, as :func:`msgpack_extent`."""
    walk = _Walk(data, "CBOR")
    buf = walk.data
    while walk.pending and walk.cost <= limit:
        walk.need(1)
        b = buf[walk.i]
        walk.i += 1
        major, info = b >> 5, b & 0x1F
        if major == 7 and info == 31:  # the break of an indefinite container or string
            if walk.pending[-1] >= 0:
                raise ValueError(f"the CBOR data has a break outside an indefinite item at byte {walk.i - 1}")
            walk.cost += _SET_ITEM * (-1 - walk.pending.pop())  # its items, as a set's or a dict's would take
            if walk.pending:
                walk.done()
            continue
        if info < 24:
            argument = info
        elif info <= 27:
            argument = walk.take(1 << (info - 24))
        elif info == 31 and major in (2, 3, 4, 5):
            argument = -1  # indefinite length
        else:
            raise ValueError(f"the CBOR data has a reserved length {info} at byte {walk.i - 1}")
        if major in (0, 1):
            walk.cost += _SLOT + _NUMBER
        elif major in (2, 3):
            if argument < 0:  # chunks until a break: each chunk is an item of this string
                walk.cost += _SLOT + _STRING
                walk.pending.append(-1)
                continue
            walk.cost += _string(walk, argument, str_=major == 3)
        elif major in (4, 5):
            pairs = major == 5
            if argument < 0:  # its length is not known: each item counts as a set's or a dict's element
                walk.cost += _SLOT + _DICT
                walk.in_set = False
                walk.pending.append(-1)
                continue
            walk.open(argument * 2 if pairs else argument, pairs, _CB_ONE_BYTE, _CB_FREE)
            continue
        elif major == 6:  # a tag: an object around the next item, which completes it
            walk.cost += _TAGGED
            walk.in_set = argument == 258
            walk.pending.append(1)
            continue
        else:  # simple values and floats
            walk.cost += _SLOT + (_NUMBER if info >= 25 else _TAGGED if info < 20 or info == 24 else 0)
        walk.done()
    return walk.cost, walk.i


def decode_msgpack(data: Any) -> Any:
    import msgpack

    _bounded(data, "msgpack", msgpack_cost, current_limits())
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def decode_cbor(data: Any) -> Any:
    import cbor2

    _bounded(data, "cbor", cbor_cost, current_limits())
    return cbor2.loads(data)
