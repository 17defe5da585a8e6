"""wds_core.tar.walk: the one walk of tar headers, over a stream, a map, or a shard read by offset."""

import io
import tarfile

import pytest

from tests.conftest import tar_bytes
from wds_core.errors import TarFormatError, TruncatedShardError
from wds_core.tar.members import TarOptions
from wds_core.tar.source import ByOffset
from wds_core.tar.walk import Walk, members_before


def stream_walk(data: bytes, **options) -> list:
    walk = Walk(io.BytesIO(data), "s.tar", 0, None, TarOptions(chunk=options.pop("chunk", 1 << 20)), None, -1)
    return list(walk.members())


def spans(data: bytes, read_at=None) -> list:
    reader = read_at or (lambda offset, n: data[offset : offset + n])
    return list(Walk.by_offset(ByOffset(reader, len(data)), "s.tar", None).members())


def long_link_shard(target_size: int) -> bytes:
    link = tarfile.TarInfo("k0.lnk")
    link.type, link.linkname = tarfile.SYMTYPE, "t" * target_size  # a GNU 'K' header carries the long target
    plain = tarfile.TarInfo("k0.txt")
    plain.size = 3
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as archive:
        archive.addfile(link)
        archive.addfile(plain, io.BytesIO(b"abc"))
    return buf.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_by_offset_gives_each_members_range_of_offsets_where_the_stream_gives_its_bytes(fmt):
    members = [("k0.txt", b"zero"), ("d" * 120 + "/k1.bin", bytes(3000)), ("\u00e9/k2.json", b"{}")]
    data = tar_bytes(members, fmt=fmt)
    streamed = stream_walk(data, chunk=1024)  # windows that cut members: the walk reads past them
    walked = spans(data)
    assert [(name, at) for name, _, at in walked] == [(name, at) for name, _, at in streamed]
    assert [data[span.start : span.stop] for _, span, _ in walked] == [body for _, body in members]
    assert [bytes(body) for _, body, _ in streamed] == [body for _, body in members]


def test_by_offset_reads_the_headers_alone():
    data = tar_bytes([("k0.bin", bytes(1 << 20)), ("k1.bin", bytes(5000)), ("k1.txt", b"x")])
    reads = []

    def read_at(offset, n):
        reads.append((offset, n))
        return data[offset : offset + n]

    assert [name for name, _, _ in spans(data, read_at)] == ["k0.bin", "k1.bin", "k1.txt"]
    assert all(n <= 512 for _, n in reads) and len(reads) <= 8  # pax headers, member headers, the end block


def test_a_long_link_target_is_never_read():
    """A 'K' header's data (a link's target) is walked past, not read: nothing bounds it, and nothing needs it."""
    data = long_link_shard(50_000)
    reads = []

    def read_at(offset, n):
        reads.append(n)
        return data[offset : offset + n]

    assert [name for name, _, _ in spans(data, read_at)] == ["k0.txt"] and max(reads) == 512
    assert [(name, body) for name, body, _ in stream_walk(data)] == [("k0.txt", b"abc")]


@pytest.mark.parametrize(
    "damage, error, words",
    [
        (lambda d: d[:700], TruncatedShardError, "ends inside a member"),
        (lambda d: d[: 1536 + 100], TruncatedShardError, "ends inside a tar header"),
        (lambda d: d[:2560], TruncatedShardError, "without an end-of-archive block"),
        (lambda d: d[:1536] + b"j" + d[1537:], TarFormatError, "bad checksum"),  # k1.txt made j1.txt
        (lambda d: b"", TarFormatError, "empty"),
    ],
)
def test_the_stream_and_the_walk_by_offset_fail_alike(damage, error, words):
    data = damage(tar_bytes([("k0.txt", b"x" * 600), ("k1.txt", b"y")], fmt=tarfile.USTAR_FORMAT))
    for walk in (stream_walk, spans):
        with pytest.raises(error, match=words) as caught:
            walk(data)
        assert caught.value.url == "s.tar" and 0 <= caught.value.offset <= len(data)


def test_members_before_keeps_those_that_start_before_an_offset():
    out = [("a", b"1", 0), ("b", b"2", 1024), ("c", b"3", 2048)]
    assert members_before(out, 2048) == out[:2] and members_before(out, 0) == []
