"""wds_core.tar.headers: the numbers, checksums, names and pax records of one 512-byte header."""

import io
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wds_core.errors import OverLimitError, TarFormatError
from wds_core.limits import DecodeLimits
from wds_core.tar import headers


def header_block(name: str = "k.txt", size: int = 5, fmt: int = tarfile.USTAR_FORMAT) -> bytes:
    """The first header block tarfile writes for one member."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, io.BytesIO(bytes(size)))
    return out.getvalue()[: headers.BLOCK]


@given(st.integers(0, 8**11 - 1), st.sampled_from([b"\x00", b" ", b" \x00", b""]))
def test_octal_numbers_with_any_usual_ending(value, ending):
    field = (b"%011o" % value + ending).ljust(12, b"\x00")[:12]
    assert headers.parse_number(field, "size") == value


def test_base256_numbers_are_read_and_negative_ones_refused():
    huge = 3 << 40  # over what 11 octal digits hold: GNU writes base-256
    field = bytes([0x80]) + huge.to_bytes(11, "big")
    assert headers.parse_number(field, "size") == huge
    with pytest.raises(ValueError, match="negative size"):
        headers.parse_number(bytes([0xFF]) + bytes(11), "size")


@pytest.mark.parametrize("text", [b"-0001536", b"+17", b"1_000", b"12 34", b"0x10", b"\xd9\xa3".rjust(4, b"1")])
def test_anything_but_octal_digits_is_no_number(text):
    with pytest.raises(ValueError, match="not an octal number"):
        headers.parse_number(text.ljust(12, b"\x00"), "size")


def test_an_empty_field_is_zero():
    assert headers.parse_number(bytes(12), "size") == 0
    assert headers.parse_number(b" " * 11 + b"\x00", "size") == 0


@pytest.mark.parametrize("value", ["-1536", "1e9", " 12", "１２", "9" * 21])
def test_pax_numbers_are_ascii_digits_of_bounded_length(value):
    with pytest.raises(TarFormatError, match="bad size in pax header") as caught:
        headers.pax_number(value, "size", "shard.tar", 1024)
    assert caught.value.url == "shard.tar" and caught.value.offset == 1024


def test_pax_number():
    assert headers.pax_number("123456789", "size", None, 0) == 123456789


def test_checksums_of_written_headers_and_of_changed_ones():
    block = header_block()
    assert headers.checksum_ok(block)
    changed = bytearray(block)
    changed[0] ^= 1  # the name
    assert not headers.checksum_ok(bytes(changed))
    garbage = bytearray(block)
    garbage[148:156] = b"zzzzzz\x00 "
    assert not headers.checksum_ok(bytes(garbage))


@pytest.mark.parametrize(
    "field",
    [None, b"0000000\x00", b"%06o\x00 ", b"%06o  ", b"%06o \x00", b"%06o\x00\x00", b" %06o\x00", b"%06o x", b"%06o 9"],
)
def test_the_common_checksum_field_and_the_others_agree_with_the_sum(field):
    """checksum_ok's common case (six octal digits, then a NUL or spaces) against the rule it shortens: a number
    ended by a NUL or a space, equal to the sum of the header with the field as spaces."""
    block = bytearray(header_block("a.txt"))
    total = sum(block[:148]) + 8 * 32 + sum(block[156:])
    if field is not None:
        block[148:156] = field % total if b"%" in field else field
    text = bytes(block[148:156]).split(b"\x00", 1)[0].strip(b" ")
    expected = text.isdigit() and int(text, 8) == total
    assert headers.checksum_ok(bytes(block)) is expected


def test_a_signed_checksum_is_accepted():
    """Old writers summed the bytes as signed chars: a name with bytes over 127 differs between the two sums."""
    block = bytearray(header_block("\u00e9t\u00e9.txt"))
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + b" " * 8 + block[156:])
    block[148:156] = b"%06o\x00 " % signed
    assert headers.checksum_ok(bytes(block))


@pytest.mark.parametrize("count", [2, 9])  # the plain loop, and the vectorised one
def test_first_bad_checksum_finds_the_first(count):
    blocks = [header_block(f"k{i}.txt") for i in range(count)]
    buf = bytearray(b"".join(blocks))
    positions = [i * headers.BLOCK for i in range(count)]
    assert headers.first_bad_checksum(bytes(buf), positions) == -1
    bad = count - 1
    buf[bad * headers.BLOCK + 3] ^= 0x20
    assert headers.first_bad_checksum(bytes(buf), positions) == bad


def test_pax_records_and_their_padding():
    data = headers_pax({"path": "a/b.txt", "size": "12"}) + bytes(20)
    assert headers.parse_pax(data, None, 0) == {"path": "a/b.txt", "size": "12"}


def headers_pax(records: dict[str, str]) -> bytes:
    from wds_core.tar.tarwrite import pax_record

    return b"".join(pax_record(key, value) for key, value in records.items())


@pytest.mark.parametrize(
    "data",
    [b"0 path=x\n", b"7 path=x\n", b"10 path=xy", b"8 pathx\n", b"99 path=x\n", b"x path=x\n", b"-8 path=x\n"],
)
def test_malformed_pax_records_are_a_format_error(data):
    with pytest.raises(TarFormatError, match="malformed pax header record") as caught:
        headers.parse_pax(data, "s.tar", 512)
    assert caught.value.offset == 512


def test_ustar_names_with_a_prefix():
    long_dir = "d" * 120
    block = header_block(f"{long_dir}/k.txt")
    assert headers.ustar_name(block, 0) == f"{long_dir}/k.txt".encode()
    assert headers.ustar_name(header_block("k.txt"), 0) == b"k.txt"


def test_corrupt_header_names_shard_and_offset():
    error = headers.corrupt_header(1536, "s3://bucket/shard.tar")
    assert isinstance(error, TarFormatError) and error.offset == 1536 and "shard.tar" in str(error)


def test_extensions_validate_the_member_size():
    block = bytearray(header_block())
    block[124:136] = b"-0000001536\x00"
    with pytest.raises(TarFormatError, match="bad member size") as caught:
        headers.Extensions("s.tar", DecodeLimits()).size(bytes(block), 2048)
    assert caught.value.offset == 2048


def test_extensions_name_a_member_pax_path_first_then_long_name_then_its_header():
    block = header_block("short.txt")
    ext = headers.Extensions("s.tar", DecodeLimits())
    assert ext.plain and ext.name(block, 0, block[156], 0) == "short.txt"
    ext.extend(headers.GNU_LONGNAME, b"a/long/name.txt\x00", 0)
    assert not ext.plain and ext.name(block, 0, block[156], 1024) == "a/long/name.txt"
    ext.extend(headers.PAX, headers_pax({"path": "from/pax.txt"}), 512)
    assert ext.name(block, 0, block[156], 1024) == "from/pax.txt" and ext.first(1024) == 0
    ext.done()
    assert ext.plain and ext.name(block, 0, block[156], 1536) == "short.txt" and ext.first(1536) == 1536


def test_directories_and_links_are_no_members_and_sparse_files_are_refused():
    ext = headers.Extensions("s.tar", DecodeLimits())
    block = header_block()
    assert ext.name(block, 0, ord("5"), 0) is None  # a directory
    assert ext.name(block, 0, ord("2"), 0) is None  # a symbolic link
    with pytest.raises(TarFormatError, match="sparse"):
        ext.name(block, 0, headers.GNU_SPARSE, 0)


def test_extensions_over_header_bytes_refuse_the_member_once_with_its_first_offset():
    ext = headers.Extensions("s.tar", DecodeLimits(header_bytes=1000))
    assert ext.fits(headers.PAX, 600)
    ext.extend(headers.PAX, headers_pax({"comment": "x" * 580}), 512)
    assert not ext.fits(headers.PAX, 600)
    assert ext.skip(headers.PAX, 600, 1536) is None  # kept for the member
    early = ext.early()
    assert isinstance(early, OverLimitError) and early.offset == 512 and ext.early() is None
    refusal = ext.refusal("k.txt")
    assert isinstance(refusal, OverLimitError) and refusal.member == "k.txt" and refusal.offset == 512
    assert "header_bytes" in str(refusal)
    ext.done()
    assert ext.refusal("next.txt") is None


def test_global_records_over_the_limit_are_refused_at_once():
    ext = headers.Extensions("s.tar", DecodeLimits(header_bytes=100))
    assert not ext.fits(headers.PAX_GLOBAL, 200)
    refusal = ext.skip(headers.PAX_GLOBAL, 200, 0)
    assert isinstance(refusal, OverLimitError) and refusal.offset == 0
    ext.extend(headers.PAX_GLOBAL, headers_pax({"path": "every.txt"}), 0)
    assert ext.name(header_block(), 0, ord("0"), 512) == "every.txt"  # a global path names every member
