"""wds_core.tar.tarindex: offset indexes built from headers alone agree with streaming, and forged ones are refused."""

import json
import tarfile

import pytest

import wds_core as wds
from tests.conftest import make_samples, tar_bytes, write_shard
from wds_core.errors import OverLimitError, ShardOpenError, TarFormatError, TruncatedShardError
from wds_core.limits import DecodeLimits
from wds_core.tar.tarindex import INDEX_FORMAT, ShardIndex, index_shard, stored_index, walk_headers


def build(data: bytes, url: str = "s.tar", limits: DecodeLimits | None = None) -> ShardIndex:
    return ShardIndex.build(lambda offset, n: data[offset : offset + n], len(data), url, limits)


def test_the_index_of_a_shard_gives_the_samples_streaming_gives(tmp_path):
    path = write_shard(tmp_path / "s.tar", make_samples("k", 7, ("jpg", "cls", "json")), ("jpg", "cls", "json"))
    index = ShardIndex.build_local(path)
    streamed = list(wds.WebDataset(path))
    assert len(index) == len(streamed) == 7
    data = open(path, "rb").read()
    for i, sample in enumerate(streamed):
        rows = index.sample_members(i)
        assert {name.split(".", 1)[1] for name, _, _, _ in rows} == {"jpg", "cls", "json"}
        for name, header, offset, size in rows:
            assert header + 512 <= offset and data[offset : offset + size] == sample[name.split(".", 1)[1]]


def test_long_names_and_pax_paths_point_at_their_first_header():
    long = "d" * 150 + "/k1.txt"
    data = tar_bytes([("k0.txt", b"zero"), (long, b"one"), ("k2.txt", b"two")], fmt=tarfile.GNU_FORMAT)
    rows = build(data).members
    assert [row[0] for row in rows] == ["k0.txt", long, "k2.txt"]
    header, offset = rows[1][1], rows[1][2]
    assert offset - header > 512  # the long-name header and its data come first
    assert data[offset : offset + 3] == b"one"
    pax = tar_bytes([("k0.txt", b"zero"), ("\u00e9t\u00e9/k1.txt", b"one")], fmt=tarfile.PAX_FORMAT)
    assert [row[0] for row in build(pax).members] == ["k0.txt", "\u00e9t\u00e9/k1.txt"]


def test_metadata_members_and_keyless_names_are_left_out():
    data = tar_bytes([("__meta__", b"{}"), ("__info__/a.json", b"{}"), ("noext", b"x"), ("k0.txt", b"a"),
                      ("k0.cls", b"1")])  # fmt: skip
    index = build(data)
    assert [row[0] for row in index.members] == ["k0.txt", "k0.cls"] and len(index) == 1


def test_json_round_trip():
    index = build(tar_bytes([("a.txt", b"1"), ("a.cls", b"2"), ("b.txt", b"3")]))
    again = ShardIndex.from_json(index.to_json())
    assert again == index and len(again) == 2 and json.loads(index.to_json())["format"] == INDEX_FORMAT


@pytest.mark.parametrize(
    "body",
    [
        {"format": "wds-index-0", "size": 2048, "members": []},
        {"format": INDEX_FORMAT, "size": -1, "members": []},
        {"format": INDEX_FORMAT, "size": 2048, "members": [["a.txt", 0, 512, -5]]},  # a negative size
        {"format": INDEX_FORMAT, "size": 2048, "members": [["a.txt", 0, 512, 1 << 40]]},  # past the end
        {"format": INDEX_FORMAT, "size": 4096, "members": [["a.txt", 1024, 1536, 1], ["b.txt", 0, 512, 1]]},
        {"format": INDEX_FORMAT, "size": 2048, "members": [["a.txt", 0, 100, 1]]},  # data inside its header
        {"format": INDEX_FORMAT, "size": 2048, "members": [["a.txt", 0]]},
        {"format": INDEX_FORMAT, "size": "many", "members": []},
        [1, 2, 3],
    ],
)
def test_a_forged_or_broken_sidecar_is_not_used(body):
    with pytest.raises(TarFormatError, match="not a usable shard index") as caught:
        ShardIndex.from_json(json.dumps(body), "s.tar.idx")
    assert caught.value.url == "s.tar.idx"


def test_a_sidecar_is_used_only_when_it_describes_this_size(tmp_path):
    path = write_shard(tmp_path / "s.tar", make_samples("k", 3))
    size = len(open(path, "rb").read())
    ShardIndex.build_local(path).save(path + ".idx")
    assert len(stored_index(path, size)) == 3
    assert stored_index(path, size + 512) is None  # stale: the shard changed
    assert stored_index(str(tmp_path / "other.tar"), size) is None  # none stored


def test_index_shard_refuses_a_compressed_shard(tmp_path):
    path = tmp_path / "s.tar.gz"
    path.write_bytes(tar_bytes([("a.txt", b"1")], compress="gz"))
    with pytest.raises(ShardOpenError, match="compressed") as caught:
        index_shard(str(path))
    assert str(path) in str(caught.value.url)


@pytest.mark.parametrize("cut", [100, 512 + 2, 1024 + 7])
def test_a_truncated_shard_names_where_it_ends(cut):
    data = tar_bytes([("a.txt", b"x" * 600), ("b.txt", b"y")])[:cut]
    with pytest.raises(TruncatedShardError) as caught:
        list(walk_headers(lambda offset, n: data[offset : offset + n], len(data), "s.tar"))
    assert caught.value.url == "s.tar" and 0 <= caught.value.offset <= len(data)


def test_an_empty_shard_and_a_huge_declared_size():
    with pytest.raises(TarFormatError, match="empty"):
        build(b"")
    data = bytearray(tar_bytes([("a.txt", b"x")], fmt=tarfile.USTAR_FORMAT))
    data[124:136] = b"77777777777\x00"  # 8 GiB declared in a 10 KB shard
    data[148:156] = b"%06o\x00 " % (sum(data[:148]) + 256 + sum(data[156:512]))
    with pytest.raises(TruncatedShardError) as caught:
        build(bytes(data))
    assert caught.value.member == "a.txt"


def test_extension_headers_over_the_limit_are_refused_before_their_data_is_read():
    first = tarfile.TarInfo("a.txt")
    first.size = 1
    described = tarfile.TarInfo("k.txt")
    described.pax_headers = {"comment": "c" * 5000}
    shard = first.tobuf() + b"1".ljust(512, b"\x00") + described.tobuf(tarfile.PAX_FORMAT) + bytes(1024)
    reads = []

    def read_at(offset, n):
        reads.append((offset, n))
        return shard[offset : offset + n]

    with pytest.raises(OverLimitError, match="header_bytes") as caught:
        list(walk_headers(read_at, len(shard), "s.tar", DecodeLimits(header_bytes=1024)))
    assert caught.value.offset == 1024 and caught.value.url == "s.tar"
    assert all(n <= 512 for _, n in reads)  # the 5 KB of records were never read
    assert [row[0] for row in build(shard).members] == ["a.txt", "k.txt"]  # within the default limit
