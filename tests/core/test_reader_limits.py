"""Readers within the decode limits (issue 21): a small compressed shard can inflate to members and records of
any size; the readers refuse them before reading them, naming shard, member and offset."""

import json
import subprocess
import sys
import tarfile
import zlib

import pytest

import wds_core as wds
from wds_core.errors import OverLimitError, SampleError
from wds_core.fieldcodecs.bounded import DecodeLimits
from wds_core.sources.recordstreams import cbors_to_samples, msgpacks_to_samples
from wds_core.tar.tario import iter_members

MB = 1 << 20


def member_header(name, size):
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def gzip_tar(path, members):
    """A .tar.gz of ``[(name, size or bytes)]``; a size is that many zero bytes, compressed without holding them."""
    deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        for name, body in members:
            size = body if isinstance(body, int) else len(body)
            out.write(deflater.compress(member_header(name, size)))
            if isinstance(body, int):
                block = bytes(MB)
                for start in range(0, size, MB):
                    out.write(deflater.compress(block[: min(MB, size - start)]))
            else:
                out.write(deflater.compress(body))
            out.write(deflater.compress(bytes(-size % 512)))
        out.write(deflater.compress(bytes(1024)) + deflater.flush())
    return str(path)


CHILD = r"""
import json, resource, sys
import wds_core as wds
from wds_core.sources.recordstreams import cbors_to_samples, msgpacks_to_samples
url, kind, limits, select = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
errors = []
handler = lambda exn: errors.append(str(exn)) or True
if kind == "tar":
    chosen = None if not select else (lambda name: name.endswith(select))
    stage = wds.tarfile_to_samples(handler=handler, limits=limits, select_files=chosen)
else:
    stage = (cbors_to_samples if kind == "cbor" else msgpacks_to_samples)(handler, limits=limits)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
keys = [s["__key__"] if isinstance(s, dict) else len(s) for s in wds.DataPipeline(wds.SimpleShardList([url]), stage)]
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"keys": keys, "errors": errors, "grown": grown}))
"""


def in_child(url, kind, limits, select=""):
    args = [sys.executable, "-c", CHILD, url, kind, json.dumps(limits), select]
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_a_compressed_shard_inflating_to_a_huge_member_is_refused_before_it_is_read(tmp_path):
    url = gzip_tar(tmp_path / "bomb.tar.gz", [("k0.txt", b"fine"), ("k1.bin", 300 * MB), ("k2.txt", b"after")])
    assert (tmp_path / "bomb.tar.gz").stat().st_size < 2 * MB
    result = in_child(url, "tar", {"field_bytes": 32 * MB})
    assert result["keys"] == ["k0", "k2"]  # the member was streamed past and the shard went on
    (error,) = result["errors"]
    assert "bomb.tar.gz" in error and "member 'k1.bin'" in error and "offset 1024" in error, error
    assert "314,572,800 bytes" in error and "field_bytes=33,554,432" in error and "tarfile_to_samples(" in error
    assert result["grown"] < 48 * MB, result  # nothing of the member was read


@pytest.mark.slow
def test_a_skipped_member_costs_no_memory_whatever_its_size(tmp_path):
    url = gzip_tar(tmp_path / "skip.tar.gz", [("k0.txt", b"a"), ("k1.bin", 300 * MB), ("k1.txt", b"b")])
    result = in_child(url, "tar", {"field_bytes": 32 * MB}, select=".txt")
    assert result["keys"] == ["k0", "k1"] and result["errors"] == []
    assert result["grown"] < 48 * MB, result  # dropped a megabyte at a time


def test_the_members_of_one_sample_are_bounded_together(tmp_path):
    members = [("k0.a", 20 * MB), ("k0.b", 20 * MB), ("k0.c", 20 * MB), ("k1.txt", b"x")]
    url = gzip_tar(tmp_path / "wide.tar.gz", members)
    result = in_child(url, "tar", {"field_bytes": 32 * MB, "sample_bytes": 50 * MB})
    (error,) = result["errors"]
    assert "sample 'k0'" in error and "'k0.c'" in error and "62,914,560 bytes" in error and "sample_bytes" in error
    assert result["keys"] == ["k1"]  # k0 dropped, the shard goes on


def test_small_members_are_held_to_a_small_limit_too(tmp_path):
    path = tmp_path / "small.tar"
    with wds.TarWriter(str(path), encoder=False) as sink:
        for i, size in enumerate([100, 900, 5000, 100]):
            sink.write({"__key__": f"k{i}", "bin": bytes(size)})
    with pytest.raises(SampleError, match=r"member 'k2.bin' is 5,000 bytes.*field_bytes=1,000") as caught:
        list(iter_members(open(path, "rb"), str(path), limits=DecodeLimits(field_bytes=1000)))
    assert caught.value.offset == 2560 and caught.value.member == "k2.bin"  # headers at 0, 1024, 2560
    assert isinstance(caught.value, OverLimitError)
    got = []
    stage = wds.tarfile_to_samples(handler=lambda exn: True, limits={"field_bytes": 1000})
    got = [s["__key__"] for s in wds.DataPipeline(wds.SimpleShardList([str(path)]), stage)]
    assert got == ["k0", "k1", "k3"]  # k2 streamed past


def test_the_config_file_bounds_webdataset_readers(tmp_path, monkeypatch):
    url = gzip_tar(tmp_path / "c.tar.gz", [("k0.txt", b"fine"), ("k1.bin", 3 * MB)])
    config = tmp_path / "config.yaml"
    config.write_text("decode_limits:\n  field_bytes: 1048576\n")
    monkeypatch.setenv("WDS_CONFIG", str(config))
    with pytest.raises(SampleError, match="k1.bin.*field_bytes=1,048,576"):
        list(wds.WebDataset(url))
    monkeypatch.delenv("WDS_CONFIG")
    assert len(list(wds.WebDataset(url))) == 2


def record_bomb(path, head, size):
    deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        out.write(deflater.compress(head + size.to_bytes(4, "big")))
        for start in range(0, size, MB):
            out.write(deflater.compress(bytes(min(MB, size - start))))
        out.write(deflater.flush())
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("kind,head", [("cbor", b"\x5a"), ("msgpack", b"\xc6")])  # a byte string, 4-byte length
def test_a_compressed_record_stream_inflating_to_a_huge_record_is_refused(tmp_path, kind, head):
    url = record_bomb(tmp_path / f"bomb.{kind}s.gz", head, 300 * MB)
    result = in_child(url, kind, {"sample_bytes": 32 * MB})
    (error,) = result["errors"]
    assert f"bomb.{kind}s.gz" in error and "sample_bytes=33,554,432" in error and f"{kind}s_to_samples(" in error
    assert result["grown"] < 2 * 32 * MB + 48 * MB, result  # MessagePack's buffer and the object: twice the limit


@pytest.mark.parametrize("stage", [cbors_to_samples, msgpacks_to_samples])
def test_records_within_the_limit_read_as_before(tmp_path, stage):
    path = tmp_path / "r.records"
    writer = wds.CborsWriter if stage is cbors_to_samples else wds.MsgpacksWriter
    with writer(str(path)) as sink:
        for i in range(50):
            sink.write({"i": i, "data": bytes(i * 1000)})
    got = list(wds.DataPipeline(wds.SimpleShardList([str(path)]), stage(limits={"sample_bytes": 60_000})))
    assert [r["i"] for r in got] == list(range(50))
    with pytest.raises(SampleError, match="sample_bytes=40,000"):
        list(wds.DataPipeline(wds.SimpleShardList([str(path)]), stage(limits={"sample_bytes": 40_000})))
