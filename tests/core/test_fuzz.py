"""Fuzzing every decoder and reader (issue 21): random and mutated bytes give our typed errors or a value,
never another exception, a hang or a memory blow-up.

The tests run a short campaign (``WDS_FUZZ_EXAMPLES``, 60 cases per target by default, the same cases
each run, 2 s deadline per case; one setting for every property test, in tests/conftest.py);
``WDS_FUZZ_EXAMPLES=5000 python -m pytest tests/core/test_fuzz.py`` is the long one
(results in benchmarks/README.md).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import resource
import tarfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wds_core as wds
from wds_core.errors import WdsError
from wds_core.fieldcodecs.decoders import DECODERS
from wds_core.fieldcodecs.images import IMAGE_EXTENSIONS
from wds_core.sources.descriptor import resolve_descriptor
from wds_core.sources.specfile import load_spec
from wds_core.tar.tarwrite import pax_record

FUZZ = settings(deadline=2000, suppress_health_check=list(HealthCheck))  # cases: tests/conftest.py's profile
MB = 1 << 20


def _seeds() -> dict[str, bytes]:
    """A valid field of each kind, for mutation."""
    npy, npz = io.BytesIO(), io.BytesIO()
    np.save(npy, np.arange(12, dtype=np.int16).reshape(3, 4))
    np.savez_compressed(npz, a=np.zeros(5), b=np.ones((2, 2)))
    from wds_core.fieldcodecs.encoders import FieldEncoder

    encoder = FieldEncoder()

    def encode(ext: str, value: object) -> bytes:
        return bytes(encoder(ext, value))

    image = np.full((6, 5, 3), 90, np.uint8)
    seeds = {"npy": npy.getvalue(), "npz": npz.getvalue(), "json": b'{"a": [1, 2.5, null, "x"]}', "txt": b"hi"}
    seeds["cls"] = b"12"
    seeds["msgpack"] = encode("msgpack", {"a": [1, 2], "b": b"x"})
    seeds["cbor"] = encode("cbor", {"a": [1, 2], "b": b"x"})
    seeds["ten"] = encode("ten", [np.arange(4.0), np.zeros((2, 3), np.uint8)])
    for ext in ("png", "jpg", "webp", "bmp", "gif", "tiff", "ppm"):
        seeds[ext] = encode(ext, image)
    seeds["json.gz"] = gzip.compress(seeds["json"])
    return seeds


SEEDS = _seeds()
EXTENSIONS = sorted(set(DECODERS) | set(IMAGE_EXTENSIONS) | set(SEEDS))


def _mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    """``seed`` with bytes flipped, cut, inserted or repeated."""

    def mutate(draw_ops: list[tuple[int, int, int]]) -> bytes:
        data = bytearray(seed)
        for kind, position, value in draw_ops:
            if not data:
                break
            at = position % len(data)
            if kind == 0:
                data[at] = value
            elif kind == 1:
                del data[at:]
            elif kind == 2:
                data[at:at] = bytes([value]) * (value % 17 + 1)
            else:
                data[at:at] = data[at : at + value]
        return bytes(data)

    ops = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6)
    return ops.map(mutate)


def _field_bytes(ext: str) -> st.SearchStrategy[bytes]:
    seed = SEEDS.get(ext) or SEEDS.get(ext.split(".")[-1])
    random = st.binary(max_size=2048)
    return st.one_of(random, _mutations(seed)) if seed else random


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.parametrize("ext", EXTENSIONS)
def test_every_decoder_gives_a_value_or_a_decoding_error(ext):
    decoder = wds.Decoder(*(["rgb8"] if ext in IMAGE_EXTENSIONS else []), limits={"field_bytes": 64 * MB})
    start = _max_rss()

    @FUZZ
    @given(_field_bytes(ext))
    def check(data):
        try:
            decoder.decode({"__key__": "k", "__url__": "fuzz.tar", f"x.{ext}": data})
        except wds.DecodingError:
            pass

    check()
    assert _max_rss() - start < 256 * MB


def _tar_with(samples: int = 4) -> bytes:
    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i in range(samples):
            sink.write({"__key__": f"k{i}", "txt": f"sample {i}", "cls": i, "json": {"i": i}})
    return out.getvalue()


TAR = _tar_with()


def _tar_of_sizes() -> bytes:
    """Members around the sizes where the compiled walk changes course: within its window of headers read from
    the file (8 KiB), past it, and from MAPPED_COPY (16 KiB) on, views."""
    out = io.BytesIO()
    with wds.TarWriter(out) as sink:
        for i, size in enumerate([100, 7000, 9000, 16383, 16384, 20000]):
            sink.write({"__key__": f"k{i}", "bin": bytes(range(256)) * (size // 256) + b"x" * (size % 256), "cls": i})
    return out.getvalue()


@pytest.mark.parametrize("compress", ["", "gz"])
def test_the_tar_reader_on_mutated_shards_gives_typed_errors(tmp_path, compress):
    seed = gzip.compress(TAR, mtime=0) if compress else TAR
    path = tmp_path / ("fuzz.tar.gz" if compress else "fuzz.tar")

    @FUZZ
    @given(st.one_of(_mutations(seed), st.binary(max_size=4096)))
    def check(data):
        path.write_bytes(data)
        try:
            for _ in wds.WebDataset(str(path), empty_check=False):
                pass
        except (WdsError, tarfile.ReadError):
            pass

    check()


def _header_tar() -> bytes:
    """A tar with every kind of header the readers interpret: ustar, GNU long name and link, pax (global and
    per member), a directory and a symbolic link."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        long = tarfile.TarInfo("d/" + "n" * 120 + ".txt")
        long.size = 3
        tar.addfile(long, io.BytesIO(b"abc"))
        link = tarfile.TarInfo("d/l" + "k" * 110)
        link.type, link.linkname = tarfile.SYMTYPE, "t" * 120
        tar.addfile(link)
    first = out.getvalue().rstrip(b"\x00")  # without the end-of-archive blocks and the record's padding
    first += bytes(-len(first) % 512)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}) as tar:
        for name, data, pax in (("k1.txt", b"one", {"comment": "x"}), ("k1.json", b"{}", {"path": "k1.json"})):
            info = tarfile.TarInfo(name)
            info.size, info.pax_headers = len(data), pax
            tar.addfile(info, io.BytesIO(data))
        folder = tarfile.TarInfo("dir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        info = tarfile.TarInfo("k2.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"three"))
    return first + out.getvalue()


HEADER_TAR = _header_tar()
HEADERS = [p for p in range(0, len(HEADER_TAR) - 511, 512) if HEADER_TAR[p + 257 : p + 262] == b"ustar"]
_SIZES = [
    b"-0000001000", b"77777777777", b"00000000099", b"0 0", b" 12", b"1_000", b"", b"\x00" * 11,
    b"\xff" + b"\xff" * 11, b"\x80" + bytes(3) + b"\x7f" + b"\xff" * 7, b"\xc0" + bytes(11), b"00000001000",
]  # fmt: skip
_RECORDS = [
    b"size=-1536", b"size=99999999999999", b"size=1_0", b"size= 12", b"path=", b"path=/etc/passwd",
    b"size=" + "\u0661\u0662".encode(), b"linkpath=x", b"x" * 300, b"=v", b"size",
]  # fmt: skip


@st.composite
def _header_mutations(draw: st.DrawFn) -> bytes:
    """The header tar with some headers' size, type or pax records changed, their checksums made right: what
    passes the checksum and still lies (issue 28)."""
    data = bytearray(HEADER_TAR)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.sampled_from(HEADERS))
        what = draw(st.sampled_from(["size", "type", "pax", "name"]))
        if what == "size":
            data[at + 124 : at + 136] = draw(st.sampled_from(_SIZES)).ljust(12, b"\x00")[:12]
        elif what == "type":
            data[at + 156] = draw(st.sampled_from(b"0x7gLKS1256\x00Zq"))
        elif what == "name":
            data[at : at + 100] = draw(st.binary(min_size=0, max_size=100)).ljust(100, b"\x00")
        else:  # the data block after the header: new pax records (or a long name)
            records = [draw(st.sampled_from(_RECORDS)).decode().partition("=") for _ in range(draw(st.integers(1, 3)))]
            body = b"".join(pax_record(key, value) for key, _, value in records)
            body = body[:512]
            data[at + 512 : at + 512 + len(body)] = body
            data[at + 124 : at + 136] = b"%011o\x00" % len(body)
        data[at + 148 : at + 156] = b" " * 8
        data[at + 148 : at + 156] = b"%06o\x00 " % sum(data[at : at + 512])
    return bytes(data)


@pytest.mark.parametrize("reader", ["stream", "skip", "index"])
def test_lying_headers_give_typed_errors_within_bounds(tmp_path, reader):
    """Headers with valid checksums and hostile sizes, types and pax records (issue 28): every reader ends
    with our errors, within the deadline and without growing memory."""
    from wds_core.fieldcodecs.bounded import DecodeLimits
    from wds_core.tar import ShardIndex, iter_members
    from wds_core.tar.grouping import group_members

    limits = DecodeLimits(field_bytes=MB, header_bytes=64 << 10)
    start = _max_rss()

    @FUZZ
    @given(_header_mutations())
    def check(data):
        try:
            if reader == "index":
                ShardIndex.build(lambda offset, n: data[offset : offset + n], len(data), "fuzz.tar", limits)
            else:
                mode = "raise" if reader == "stream" else "skip"
                members = iter_members(io.BytesIO(data), "fuzz.tar", limits=limits, over_limit=mode)
                for _ in group_members(members, "fuzz.tar", limits=limits, refused=lambda exn: True):
                    pass
        except (WdsError, tarfile.ReadError):
            pass

    check()
    assert _max_rss() - start < 256 * MB


class _Arriving(io.RawIOBase):
    """``data`` as a remote stream gives it (``read_arrived``: what has arrived so far), in pieces of sizes drawn
    around the block size and the walk's windows: the walk parses whatever has arrived."""

    def __init__(self, data: bytes, seed: int) -> None:
        self.data, self.at = data, 0
        self.rng = np.random.default_rng(seed)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = len(self.data) if n < 0 else n
        out = self.data[self.at : self.at + n]
        self.at += len(out)
        return out

    def read_arrived(self, n: int) -> bytes:
        return self.read(min(n, int(self.rng.choice([1, 100, 511, 512, 513, 4096, 70000, MB]))))


def _members(
    data: bytes,
    mapped,
    mode: str,
    compiled: bool = True,
    path=None,
    map_files=True,
    chunk=None,
    arriving=False,
    field_bytes=MB,
) -> tuple[list, str]:
    """What iter_members gives for ``data`` (members as bytes), and how it ended: with the compiled walk of plain
    members or in Python alone, reading the file at ``path`` (holding ``data``) when given: copying the members
    out of a map of it, or (``map_files=False``) reading them with ``pread``; ``chunk`` bytes at a time (an
    interleave lane's 4 KiB, say); ``arriving``: as a remote stream, in pieces."""
    from wds_core.fieldcodecs.bounded import DecodeLimits
    from wds_core.tar import compiled as walk
    from wds_core.tar import iter_members

    got: list = []
    saved, saved_map = walk.SCAN, walk.MAP_FILES
    walk.SCAN = saved if compiled else None
    walk.MAP_FILES = map_files
    try:
        opened = _Arriving(data, len(data)) if arriving else io.BytesIO(data)
        with opened if path is None else open(path, "rb", buffering=0) as stream:
            fd = stream.fileno() if path is not None and mapped is None else -1  # the file walk
            members = iter_members(
                stream, "fuzz.tar", limits=DecodeLimits(field_bytes=field_bytes, header_bytes=64 << 10),
                over_limit=mode, mapped=mapped, fd=fd, **({} if chunk is None else {"chunk": chunk}),
            )  # fmt: skip
            for name, value, offset in members:
                got.append((name, bytes(value) if isinstance(value, (bytes, memoryview)) else repr(value), offset))
    except (WdsError, tarfile.ReadError) as exn:
        return got, f"{type(exn).__name__}: {exn}"
    finally:
        walk.SCAN, walk.MAP_FILES = saved, saved_map
    return got, "end"


def test_the_compiled_walk_gives_what_the_python_walk_gives(tmp_path):
    """tarscan.c takes the plain members and leaves every other header to the Python walk: on hostile shards,
    read as a stream, straight from the file (copied out of a map of it, or read), from a map, and from a map
    whose headers it reads from the file, the same members, the same error at the same offset as the Python walk
    alone."""
    import mmap

    from wds_core.tar import compiled_walk

    if not compiled_walk():
        if os.environ.get("WDS_REQUIRE_COMPILED") == "1":
            pytest.fail("the compiled tar walk (wds_core/tar/tarscan.c) was not built")
        pytest.skip("the compiled tar walk is not built here or is turned off (WDS_PURE_PYTHON)")
    path = tmp_path / "fuzz.tar"

    shards = st.one_of(_mutations(TAR), _mutations(_tar_of_sizes()), _header_mutations())

    @FUZZ
    @given(shards, st.sampled_from(["raise", "skip"]))
    def check(data, mode):
        expected = _members(data, None, mode, compiled=False)
        assert _members(data, None, mode) == expected
        if not data:
            return  # nothing to map: the reader streams an empty file
        path.write_bytes(data)
        assert _members(data, None, mode, path=path) == expected
        assert _members(data, None, mode, path=path, map_files=False) == expected
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        assert _members(data, mapped, mode, compiled=False) == expected
        assert _members(data, mapped, mode) == expected
        assert _members(data, mapped, mode, path=path) == expected

    check()


@pytest.mark.parametrize("shard", ["samples", "sizes"])
def test_the_compiled_walk_gives_what_the_python_walk_gives_at_every_cut(tmp_path, shard):
    """The same comparison on a shard cut at every 97th byte: inside headers, data and padding alike (random
    mutations seldom cut inside the padding of a member, where the file walk has to stop before the member)."""
    from wds_core.tar import compiled_walk

    if not compiled_walk():
        pytest.skip("the compiled tar walk is not built here or is turned off (WDS_PURE_PYTHON)")
    whole = TAR if shard == "samples" else _tar_of_sizes()
    path = tmp_path / "cut.tar"
    for cut in range(1, len(whole), 97):
        data = whole[:cut]
        expected = _members(data, None, "raise", compiled=False)
        path.write_bytes(data)
        assert _members(data, None, "raise", path=path) == expected, cut
        assert _members(data, None, "raise", path=path, map_files=False) == expected, cut


@pytest.mark.parametrize("seed", ["samples", "headers"])
def test_reading_a_mapped_shard_gives_what_reading_the_stream_gives(tmp_path, seed):
    """zero_copy reading walks the memory-mapped file with the same code: on hostile shards it yields the same
    members (as views) and ends with the same error at the same offset."""
    import mmap

    path = tmp_path / "fuzz.tar"

    @FUZZ
    @given(_mutations(TAR) if seed == "samples" else _header_mutations(), st.sampled_from(["raise", "skip"]))
    def check(data, mode):
        if not data:
            return  # nothing to map: the reader streams an empty file
        path.write_bytes(data)
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        assert _members(data, mapped, mode) == _members(data, None, mode)

    check()


# the sizes where a walk changes course: an interleave lane's chunk, the compiled walk's header window,
# MAPPED_COPY, DIRECT, a lane's range, the walk's chunk (and the mapped window that takes in a member past it)
BOUNDARIES = [4 << 10, 8 << 10, 16 << 10, 64 << 10, 256 << 10, MB]
NEAR = [-513, -512, -511, -1, 0, 1, 511, 512, 513]


@st.composite
def _boundary_shards(draw: st.DrawFn) -> bytes:
    """Shards of members whose sizes (and so whose headers' positions) fall around every window and chunk
    boundary of the walks, some with long names (GNU ``L`` or pax ``path`` headers before them), whole, cut
    anywhere, or with one byte of one header changed (issue 43)."""
    fmt = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for i in range(draw(st.integers(1, 10))):
            long = fmt != tarfile.USTAR_FORMAT and draw(st.booleans())
            key = ("d" * draw(st.integers(90, 300)) + "/" if long else "") + f"k{i}"
            for ext in draw(st.lists(st.sampled_from(["bin", "txt", "cls"]), min_size=1, max_size=3, unique=True)):
                size = draw(
                    st.one_of(
                        st.builds(lambda b, d, k: max(b + d - 512 * k, 0), st.sampled_from(BOUNDARIES),
                                  st.sampled_from(NEAR), st.integers(0, 3)),
                        st.integers(0, 1500),
                    )
                )  # fmt: skip
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = size
                tar.addfile(info, io.BytesIO(bytes([i + 1, len(ext)]) * (size // 2 + 1)))
    data = bytearray(out.getvalue())
    damage = draw(st.sampled_from(["none", "cut", "header"]))
    if damage == "cut":
        return bytes(data[: draw(st.integers(1, len(data) - 1))])
    if damage == "header":
        headers = [p for p in range(0, len(data) - 511, 512) if data[p + 257 : p + 262] == b"ustar"]
        at = draw(st.sampled_from(headers)) + draw(st.sampled_from([0, 99, 124, 135, 148, 154, 155, 156, 345]))
        data[at] ^= draw(st.sampled_from([0x01, 0x55, 0x80]))
    return bytes(data)


def _indexed(data: bytes, path) -> tuple[list, str]:
    """What indexing the shard at ``path`` finds (members with the bytes it would read for them), and how it
    ended: the same as streaming (:func:`_members`)."""
    import mmap

    from wds_core.fieldcodecs.bounded import DecodeLimits
    from wds_core.tar.tarindex import walk_headers

    got: list = []
    limits = DecodeLimits(field_bytes=4 * MB, header_bytes=64 << 10)
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        try:
            for name, header, start, size in walk_headers(
                lambda at, n: view[at : at + n], len(data), "fuzz.tar", limits
            ):
                got.append((name, view[start : start + size], header))
        except (WdsError, tarfile.ReadError) as exn:
            return got, f"{type(exn).__name__}: {exn}"
    return got, "end"


def test_every_read_path_gives_the_stream_walks_members_around_window_boundaries(tmp_path):
    """Issue 43: a valid shard read from a map lost its members after one whose data ran past the window (the
    window then ended off a block boundary), and a member named by a long-name header was yielded before its own
    corrupt header on some paths.  Every way of reading a shard (a stream, remote-style arrivals, the compiled
    walk of the file copied from a map or read, an interleave lane's small chunks, a map with and without the
    compiled walk, the index) gives the plain stream walk's members, and then its error, word for word."""
    import mmap

    from wds_core.tar import compiled_walk

    path = tmp_path / "fuzz.tar"
    lane = 4 << 10

    @FUZZ
    @given(_boundary_shards())
    def check(data):
        def read(*args, **kwargs):  # every member is taken: the index does not read members, so it refuses none
            return _members(*args, field_bytes=4 * MB, **kwargs)

        expected = read(data, None, "raise", compiled=False)
        ways = {
            "stream": read(data, None, "raise"),
            "arriving, Python": read(data, None, "raise", compiled=False, arriving=True),
            "arriving": read(data, None, "raise", arriving=True),
            "stream in a lane's chunks": read(data, None, "raise", chunk=lane),
        }
        path.write_bytes(data)
        if compiled_walk():
            ways["file, mapped"] = read(data, None, "raise", path=path)
            ways["file, read"] = read(data, None, "raise", path=path, map_files=False)
            ways["file, a lane"] = read(data, None, "raise", path=path, map_files=False, chunk=lane)
        with open(path, "rb") as handle:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        ways["map, Python"] = read(data, mapped, "raise", compiled=False)
        ways["map"] = read(data, mapped, "raise")
        ways["map, a lane"] = read(data, mapped, "raise", chunk=lane)
        ways["map, headers from the file"] = read(data, mapped, "raise", path=path)
        found, ended = _indexed(data, path)
        ways["index"] = ([(name, bytes(view), at) for name, view, at in found], ended)
        for way, got in ways.items():
            assert got == expected, way

    check()


@pytest.mark.parametrize("kind", ["cbor", "msgpack"])
def test_the_record_stream_readers_give_typed_errors(tmp_path, kind):
    path = tmp_path / f"fuzz.{kind}s"
    writer = wds.CborsWriter if kind == "cbor" else wds.MsgpacksWriter
    with writer(str(path)) as sink:
        for i in range(5):
            sink.write({"__key__": f"k{i}", "n": i, "data": b"x" * i})
    seed = path.read_bytes()
    stage = wds.cbors_to_samples() if kind == "cbor" else wds.msgpacks_to_samples()

    @FUZZ
    @given(st.one_of(_mutations(seed), st.binary(max_size=2048)))
    def check(data):
        path.write_bytes(data)
        try:
            for _ in wds.DataPipeline(wds.SimpleShardList([str(path)]), stage):
                pass
        except WdsError:
            pass

    check()


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
DESCRIPTOR_KEYS = st.sampled_from(["wids_version", "name", "base", "shardlist", "datasets", "url", "nsamples",
                                   "source_url", "weight", "filesize"])  # fmt: skip
DESCRIPTORS = st.recursive(
    JSONISH,
    lambda inner: st.dictionaries(DESCRIPTOR_KEYS, inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=30,
)


@FUZZ
@given(DESCRIPTORS)
def test_the_descriptor_parser_gives_spec_errors(body):
    try:
        resolve_descriptor(body, "/data/d.json")
    except WdsError:
        pass


SPEC_KEYS = st.sampled_from(["dataset", "datasets", "prefix", "buckets", "longest", "shards", "name", "weight",
                             "resample", "choose", "repeat", "extensions", "subsample"])  # fmt: skip
SPECS = st.recursive(
    JSONISH,
    lambda inner: st.dictionaries(SPEC_KEYS, inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=30,
)


@FUZZ
@given(st.one_of(SPECS, SPECS.map(lambda spec: json.dumps(spec).encode()), st.binary(max_size=512)))
def test_the_spec_file_parser_gives_spec_errors(tmp_path_factory, spec):
    if isinstance(spec, bytes):
        path = tmp_path_factory.mktemp("spec") / "spec.json"
        path.write_bytes(spec)
        spec = str(path)
    try:
        load_spec(spec)
    except WdsError:
        pass


def test_what_the_long_campaign_found():
    """Cases the long campaign (5,000 examples per target) found, fixed and kept here."""
    with pytest.raises(wds.SpecError, match="shardlist is a list"):
        resolve_descriptor({"shardlist": None}, "/data/d.json")
    with pytest.raises(wds.SpecError, match="buckets is a URL prefix"):
        load_spec([{"buckets": {"": None}, "shards": None}])
    # a GIF whose header claims 12000x12000 pixels (Pillow only warns below twice its limit): refused before 144 MB
    gif = bytearray(SEEDS["gif"])
    gif[6:10] = (12000).to_bytes(2, "little") * 2
    with pytest.raises(wds.DecodingError, match="header says 12000x12000"):
        wds.Decoder("rgb8", limits={"field_bytes": 64 * MB}).decode({"__key__": "k", "x.gif": bytes(gif)})
