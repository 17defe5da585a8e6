"""wds_core.tar.source: exact reads from a stream, and a shard read by offset."""

import io

import pytest

from wds_core.errors import ShardOpenError, TruncatedShardError
from wds_core.tar.source import ByOffset, ExactSource, discard


class Trickle(io.RawIOBase):
    """A stream that gives at most ``step`` bytes a read and fails after ``fail_after`` bytes (when given)."""

    def __init__(self, data: bytes, step: int, fail_after: int = -1) -> None:
        self.data, self.step, self.fail_after, self.at = data, step, fail_after, 0

    def read(self, n: int = -1) -> bytes:
        if 0 <= self.fail_after <= self.at:
            raise ConnectionResetError("reset by peer")
        piece = self.data[self.at : self.at + min(n, self.step)]
        self.at += len(piece)
        return piece


def test_reads_are_whole_however_the_stream_trickles():
    source = ExactSource(Trickle(bytes(range(256)) * 8, step=7), "s.tar")
    assert source.read(1000) == (bytes(range(256)) * 8)[:1000]
    assert len(source.read(5000)) == 1048 and source.read(10) == b""


def test_a_failure_after_some_bytes_is_kept_until_those_are_delivered():
    source = ExactSource(Trickle(bytes(4096), step=100, fail_after=1000), "s.tar")
    assert len(source.read(2048)) == 1000  # what arrived before the failure
    assert isinstance(source.pending, ShardOpenError) and "reset by peer" in str(source.pending)
    with pytest.raises(ShardOpenError):
        source.read(1)
    assert source.short("the shard ends inside a member") is source.pending


def test_short_is_a_truncation_when_nothing_failed():
    error = ExactSource(io.BytesIO(b""), "s.tar").short("the shard ends inside a member", offset=512)
    assert isinstance(error, TruncatedShardError) and error.offset == 512 and error.url == "s.tar"


def test_discard_counts_what_was_there():
    stream = io.BytesIO(bytes(3 << 20))
    assert discard(stream.read, 2 << 20) == 2 << 20 and discard(stream.read, 5 << 20) == 1 << 20


def test_by_offset_slices_and_reads_within_the_shard():
    data = bytes(range(200))
    asked = []

    def read_at(offset, n):
        asked.append((offset, n))
        return data[offset : offset + n]

    shard = ByOffset(read_at, len(data))
    assert len(shard) == 200 and shard[10:20] == data[10:20] and shard[190 : 1 << 40] == data[190:]
    assert shard[300:400] == b"" and asked[-1] == (190, 10)  # nothing asked past the end
    shard.seek(195)
    assert shard.read(10) == data[195:] and shard.read(10) == b""
