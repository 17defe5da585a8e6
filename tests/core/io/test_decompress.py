"""Compressed shards: every format, members after members, and what a cut or damaged stream gives."""

import bz2
import gzip
import io
import lzma

import pytest

import wds_core as wds
from tests.conftest import make_samples, tar_bytes
from wds_core.io.decompress import decompressing

COMPRESS = {
    "gz": lambda data: gzip.compress(data, mtime=0),
    "bz2": bz2.compress,
    "xz": lzma.compress,
}


def _zstd(data):
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor().compress(data)


def _read_all(stream, size):
    parts = []
    while True:
        chunk = stream.read(size)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz", "zst"])
@pytest.mark.parametrize("size", [1, 1000, 1 << 20, -1])
def test_round_trip_of_concatenated_members(kind, size):
    compress = _zstd if kind == "zst" else COMPRESS[kind]
    plain = [bytes(range(256)) * 3000, b"", b"second member " * 5000]
    data = b"".join(compress(p) for p in plain)
    stream = decompressing(data[:6], io.BytesIO(data))
    assert stream is not None
    assert _read_all(stream, size) == b"".join(plain)
    assert decompressing(b"ustar\x00", io.BytesIO(b"")) is None


def test_gzip_padding_crc_and_cut_streams():
    member = gzip.compress(b"x" * 100_000, mtime=0)
    padded = member + b"\x00" * 1024 + member
    assert _read_all(decompressing(padded[:6], io.BytesIO(padded)), 4096) == b"x" * 200_000
    bad_crc = bytearray(member)
    bad_crc[-8] ^= 0xFF
    stream = decompressing(bytes(bad_crc[:6]), io.BytesIO(bytes(bad_crc)))
    with pytest.raises(ValueError):
        _read_all(stream, 1 << 20)
    big = gzip.compress(bytes(range(256)) * 40_000, mtime=0)
    stream = decompressing(big[:6], io.BytesIO(big[: len(big) // 2]))
    first = stream.read(1 << 30)  # what came before the cut arrives first...
    assert 0 < len(first) < 256 * 40_000 and first == (bytes(range(256)) * 40_000)[: len(first)]
    with pytest.raises(EOFError):  # ...then the problem
        stream.read(1)


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_a_cut_compressed_shard_delivers_the_samples_before_the_cut(tmp_path, kind):
    samples = [{**s, "txt": bytes(range(256)) * 240 + s["txt"]} for s in make_samples("c", 40)]  # bz2: 3 blocks
    members = [(f"{s['__key__']}.{f}", s[f]) for s in samples for f in ("cls", "txt")]
    data = COMPRESS[kind](tar_bytes(members))
    (tmp_path / f"cut.tar.{kind}").write_bytes(data[: len(data) * 3 // 4])
    got = []
    with pytest.raises(wds.TruncatedShardError, match="compressed data ends"):
        for sample in wds.WebDataset(str(tmp_path / f"cut.tar.{kind}")):
            got.append(sample["__key__"])
    assert got and got == [s["__key__"] for s in samples[: len(got)]]
    assert len(got) >= 20  # the samples of the first three quarters, less the one cut


def test_corrupt_compressed_data_is_a_tar_format_error(tmp_path):
    data = bytearray(gzip.compress(tar_bytes([("k.txt", bytes(range(256)) * 400)]), mtime=0))
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "bad.tgz").write_bytes(bytes(data))
    with pytest.raises(wds.TarFormatError, match="corrupt compressed data"):
        list(wds.WebDataset(str(tmp_path / "bad.tgz")))
