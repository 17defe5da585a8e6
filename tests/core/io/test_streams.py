"""wds_core.io.streams: raw streams that buffered readers and decompressors can use, and salvaging a cut stream."""

import gzip
import io
import zlib

import pytest

from wds_core.io.streams import ReadStream, Salvaging


class Chunks(ReadStream):
    def __init__(self, data: bytes, step: int) -> None:
        super().__init__()
        self.data, self.step, self.at = data, step, 0

    def read(self, size: int = -1) -> bytes:
        n = self.step if size < 0 else min(size, self.step)
        piece = self.data[self.at : self.at + n]
        self.at += len(piece)
        return piece


def test_buffered_readers_and_decompressors_read_a_read_stream():
    data = bytes(range(256)) * 1000
    assert io.BufferedReader(Chunks(data, 7000)).read() == data
    assert gzip.GzipFile(fileobj=io.BufferedReader(Chunks(gzip.compress(data), 333))).read() == data
    stream = Chunks(b"abc", 10)
    buffer = bytearray(5)
    assert stream.readable() and stream.readinto(buffer) == 3 and bytes(buffer[:3]) == b"abc"


def test_a_cut_stream_gives_what_came_before_the_cut_then_the_error():
    data = b"".join(b"%08d" % i for i in range(50000))
    cut = gzip.compress(data)[:-30000]
    inner = gzip.GzipFile(fileobj=io.BytesIO(cut))
    stream = Salvaging(inner)
    got = []
    with pytest.raises((EOFError, zlib.error, OSError)):
        while chunk := stream.read(1 << 16):
            got.append(chunk)
    salvaged = b"".join(got)
    assert len(salvaged) > len(data) // 4 and data.startswith(salvaged)
    stream.close()
    assert inner.closed


def test_a_whole_stream_reads_to_its_end():
    data = b"x" * 300000
    stream = Salvaging(gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data))))
    assert stream.read() == data and stream.read(10) == b""
