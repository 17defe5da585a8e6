import io
import os
import subprocess
import tarfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import tar_bytes
from wds_core import TarFormatError, TruncatedShardError, WdsError
from wds_core.tar.tario import iter_members, open_decompressed
from wds_core.tar.tarwrite import encode_member, end_of_archive


def read_all(raw, url="t.tar"):
    stream, _ = open_decompressed(io.BytesIO(raw))
    return list(iter_members(stream, url))


def stdlib_members(raw):
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tf:
        return [(m.name, tf.extractfile(m).read(), m.offset) for m in tf if m.isreg()]


NAMES = ["a.txt", "dir/b.JPG", "x" * 99 + ".y", "deep/" * 30 + "long.name.bin", "ünï/cödé.txt"]
SIZES = [0, 1, 511, 512, 513, 70_000, 1_100_000]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT])
@pytest.mark.parametrize("compress", ["", "gz", "bz2", "xz"])
def test_matches_stdlib_names_data_and_offsets(fmt, compress):
    ustar_names = ["a.txt", "dir/b.JPG", "deep/" * 20 + "long.name.bin", "ünï/cödé.txt"]  # uses the prefix field
    names = NAMES if fmt != tarfile.USTAR_FORMAT else ustar_names
    members = [(name, os.urandom(size)) for name in names for size in SIZES[:4]] + [("big.bin", os.urandom(SIZES[-1]))]
    raw = tar_bytes(members, fmt, compress)
    got = read_all(raw)
    expected = stdlib_members(raw)
    assert [(n, d) for n, d, _ in got] == [(n, d) for n, d, _ in expected]
    if not compress:
        assert [o for _, _, o in got] == [o for _, _, o in expected]


def test_zstd_is_detected():
    zstandard = pytest.importorskip("zstandard")
    raw = tar_bytes([("a.txt", b"hello")])
    assert [(n, d) for n, d, _ in read_all(zstandard.ZstdCompressor().compress(raw))] == [("a.txt", b"hello")]


def test_gnu_tar_archive_with_directories_and_links(tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / ("k" * 120 + ".txt")).write_bytes(b"long")
    (src / "sub" / "a.cls").write_bytes(b"1")
    os.symlink("a.cls", src / "sub" / "link.cls")
    out = tmp_path / "g.tar"
    subprocess.run(["tar", "--format=gnu", "--sort=name", "-cf", str(out), "-C", str(src), "."], check=True)
    raw = out.read_bytes()
    got = read_all(raw)
    assert [(n, d, o) for n, d, o in got] == stdlib_members(raw)
    assert {n for n, _, _ in got} == {"./sub/a.cls", "./sub/" + "k" * 120 + ".txt"}


def test_pax_global_header_and_directory_members():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "x"}) as tf:
        info = tarfile.TarInfo("dir")
        info.type = tarfile.DIRTYPE
        tf.addfile(info)
        data = tarfile.TarInfo("dir/a.txt")
        data.size = 3
        tf.addfile(data, io.BytesIO(b"abc"))
    assert [(n, d) for n, d, _ in read_all(buf.getvalue())] == [("dir/a.txt", b"abc")]


def test_resume_from_an_offset_with_a_seekable_stream():
    raw = b"".join(encode_member(f"k{i}.txt", bytes([i]) * i) for i in range(20)) + end_of_archive()
    full = read_all(raw)
    offset = full[7][2]
    stream = io.BytesIO(raw)
    stream.seek(offset)
    assert list(iter_members(stream, start_offset=offset)) == full[7:]


def test_truncation_at_every_position_is_reported():
    raw = tar_bytes([("a.txt", b"x" * 700), ("b.txt", b"y" * 10), ("c" * 150 + ".txt", b"z")])
    complete = read_all(raw)
    end = len(raw) - 2 * 512
    while raw[end - 512 : end] == bytes(512):  # skip the record padding tarfile adds
        end -= 512
    for cut in range(0, end):
        got = []
        with pytest.raises(TarFormatError) as info:
            stream, _ = open_decompressed(io.BytesIO(raw[:cut]))
            for member in iter_members(stream, "cut.tar"):
                got.append(member)
        assert got == complete[: len(got)], cut
        assert info.value.url == "cut.tar"
        if cut > 0:
            assert isinstance(info.value, TruncatedShardError), (cut, info.value)
            assert info.value.offset is not None


def test_corrupt_header_names_the_offset():
    raw = bytearray(b"".join(encode_member(f"k{i}.txt", b"v") for i in range(10)) + end_of_archive())
    raw[5 * 1024 + 3] ^= 0x55  # damage the sixth header
    got = []
    with pytest.raises(TarFormatError, match="bad checksum") as info:
        for member in iter_members(io.BytesIO(bytes(raw)), "bad.tar"):
            got.append(member)
    assert info.value.offset == 5 * 1024
    assert [n for n, _, _ in got] == [f"k{i}.txt" for i in range(5)]


def test_not_a_tar_and_empty():
    with pytest.raises(TarFormatError, match="not a tar archive"):
        read_all(b"hello world, this is plain text" * 40)
    with pytest.raises(TarFormatError, match="empty"):
        read_all(b"")


@given(st.binary(max_size=4096))
def test_random_bytes_raise_only_our_errors(data):
    try:
        read_all(data)
    except WdsError:
        pass


_valid = tar_bytes([("a.txt", b"hello"), ("dir/b.cls", b"7"), ("c" * 140 + ".json", b"{}")])


@given(st.lists(st.tuples(st.integers(0, len(_valid) - 1), st.integers(0, 255)), min_size=1, max_size=8))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_mutated_tars_raise_only_our_errors(edits):
    raw = bytearray(_valid)
    for pos, value in edits:
        raw[pos] = value
    try:
        read_all(bytes(raw))
    except WdsError:
        pass


name_chars = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\x00")
member_names = st.lists(st.text(name_chars, min_size=1, max_size=40), min_size=1, max_size=6).map("/".join)


@given(st.lists(st.tuples(member_names, st.binary(max_size=2000)), max_size=12))
def test_encode_roundtrip_agrees_with_stdlib(members):
    raw = b"".join(encode_member(n, d) for n, d in members) + end_of_archive()
    got = read_all(raw)
    assert [(n, d) for n, d, _ in got] == members
    assert got == stdlib_members(raw)


def _read_all(data: bytes, mapped, start: int = 0, path=None) -> tuple[list, str]:
    """Members (as bytes) iter_members gives, from ``start``, and how it ended (read from the file at ``path``,
    holding ``data``, when given: the compiled walk then reads a map's headers from the file)."""
    with io.BytesIO(data) if path is None else open(path, "rb", buffering=0) as stream:
        stream.seek(start)
        got = []
        try:
            for name, value, offset in iter_members(stream, "big.tar", start_offset=start, mapped=mapped):
                got.append((name, type(value).__name__, bytes(value), offset))
        except WdsError as exn:
            return got, f"{type(exn).__name__}: {exn}"
        return got, "end"


@pytest.mark.parametrize("span", [64 << 20, 1 << 20, 0])  # how far a window of the map takes in large members
def test_a_mapped_shard_gives_views_across_windows_and_the_same_errors_when_cut(tmp_path, monkeypatch, span):
    import mmap

    from wds_core.tar import walk
    from wds_core.tar.source import CHUNK
    from wds_core.tar.walk import MAPPED_COPY

    monkeypatch.setattr(walk, "MAPPED_SPAN", span)

    rng = np.random.default_rng(0)
    sizes = [100, CHUNK * 2 + 300, 700_000, 700_000, 700_000, 1024, 0, CHUNK - 512, 5, CHUNK + 1]
    out = io.BytesIO()
    for i, size in enumerate(sizes):
        out.write(encode_member(f"s{i // 2}.f{i}", rng.integers(0, 256, size, dtype=np.uint8).tobytes()))
    out.write(end_of_archive())
    whole = out.getvalue()
    path = tmp_path / "big.tar"

    def both(data: bytes, start: int = 0) -> tuple:
        path.write_bytes(data)
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        views = _read_all(data, mapped, start)
        plain = _read_all(data, None, start)
        assert [m[:1] + m[2:] for m in views[0]] == [m[:1] + m[2:] for m in plain[0]] and views[1] == plain[1]
        # members from MAPPED_COPY bytes on are views, smaller ones copies
        assert all(kind == ("memoryview" if len(value) >= MAPPED_COPY else "bytes") for _, kind, value, _ in views[0])
        assert _read_all(data, mapped, start, path) == views  # headers read from the file, not the map
        return views

    members, ending = both(whole)
    assert ending == "end" and [len(data) for _, _, data, _ in members] == sizes
    offsets = [offset for _, _, _, offset in members]
    for start in offsets[1:]:  # a resumed read starts at a member's header
        assert both(whole, start)[0] == members[offsets.index(start) :]
    cuts = {CHUNK, CHUNK + 512, 2 * CHUNK, 3 * CHUNK + 1024, len(whole) - 1024, len(whole) - 1}
    cuts |= {int(c) for c in rng.integers(1, len(whole), 12)} | {o + 100 for o in offsets} | {o + 512 for o in offsets}
    for cut in sorted(cuts):
        got, ending = both(whole[:cut])
        complete = cut >= len(whole) - len(end_of_archive()) + 512  # the first end-of-archive block is whole
        assert ending == "end" if complete else ending.startswith("TruncatedShardError"), (cut, ending)
        assert got == members[: len(got)]
