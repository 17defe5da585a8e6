"""TarWriter and ShardWriter: determinism, atomicity, validation, rotation, interop with webdataset and GNU tar."""

import gzip
import json
import os
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import webdataset
from hypothesis import given
from hypothesis import strategies as st

import wds_core as wds
from wds_core import EncodingError, ShardWriter, TarWriter


def samples(n, prefix="s"):
    return [{"__key__": f"{prefix}{i:04d}", "cls": i, "txt": f"text {i}", "json": {"i": i}} for i in range(n)]


def read(path, **kw):
    return list(wds.WebDataset(path, **kw).decode())


def test_same_samples_give_byte_identical_shards(tmp_path):
    for name in ("a.tar", "b.tar", "c.tar.gz", "d.tar.gz"):
        with TarWriter(str(tmp_path / name)) as sink:
            for s in samples(50):
                sink.write(s)
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    assert (tmp_path / "c.tar.gz").read_bytes() == (tmp_path / "d.tar.gz").read_bytes()
    assert gzip.decompress((tmp_path / "c.tar.gz").read_bytes()) == (tmp_path / "a.tar").read_bytes()


def test_small_samples_have_no_pax_headers(tmp_path):
    path = str(tmp_path / "a.tar")
    with TarWriter(path) as sink:
        for s in samples(10):
            sink.write(s)
    # three members of one block of data each: 2 blocks per member, then the end-of-archive blocks
    assert os.path.getsize(path) == 10 * 3 * 1024 + 1024


def test_fields_in_sorted_order_and_round_trip(tmp_path):
    path = str(tmp_path / "a.tar")
    with TarWriter(path) as sink:
        sink.write({"__key__": "dir.v1/k", "txt": "t", "cls": 1, "a.json": [1], "npy": np.arange(3)})
    with tarfile.open(path) as tf:
        assert tf.getnames() == ["dir.v1/k.a.json", "dir.v1/k.cls", "dir.v1/k.npy", "dir.v1/k.txt"]
    (got,) = read(path)
    assert got["__key__"] == "dir.v1/k" and got["a.json"] == [1] and got["cls"] == 1 and got["txt"] == "t"
    np.testing.assert_array_equal(got["npy"], np.arange(3))


def test_a_failure_inside_the_with_block_leaves_nothing(tmp_path):
    path = tmp_path / "out.tar"
    with pytest.raises(RuntimeError):
        with TarWriter(str(path)) as sink:
            sink.write(samples(1)[0])
            raise RuntimeError("crash")
    assert os.listdir(tmp_path) == []


def test_the_shard_appears_only_when_closed_and_close_is_idempotent(tmp_path):
    path = tmp_path / "out.tar"
    sink = TarWriter(str(path))
    sink.write(samples(1)[0])
    assert not path.exists() and len(os.listdir(tmp_path)) == 1  # the partial file, hidden
    sink.close()
    sink.close()
    assert os.listdir(tmp_path) == ["out.tar"]
    with pytest.raises(ValueError, match="closed"):
        sink.write(samples(1)[0])


@pytest.mark.parametrize(
    "sample,message",
    [
        ({"cls": 1}, "no __key__"),
        ({"__key__": "", "cls": 1}, "empty"),
        ({"__key__": "a.b", "cls": 1}, "has a '.'"),
        ({"__key__": "dir/", "cls": 1}, "empty or ends with"),
        ({"__key__": "/abs/k", "cls": 1}, "absolute"),
        ({"__key__": "../k", "cls": 1}, "'..'"),
        ({"__key__": 7, "cls": 1}, "must be a str"),
        ({"__key__": "k", "jpg": b"1", "JPG": b"2"}, "duplicate"),
        ({"__key__": "k", "a/b": b"1"}, "not a valid field"),
        ({"__key__": "k", "cls": "x", "txt": 3}, "text fields take str"),
        ({"__key__": "k", "xyz": object()}, "no encoder"),
        ({"__key__": "k", "pyd": {"a": 1}}, "allow_pickle"),
    ],
)
def test_bad_samples_are_refused_before_writing(tmp_path, sample, message):
    path = str(tmp_path / "a.tar")
    with TarWriter(path) as sink:
        with pytest.raises(EncodingError, match=message):
            sink.write(sample)
        sink.write(samples(1)[0])
    assert [s["__key__"] for s in read(path)] == ["s0000"]


def test_encoder_options(tmp_path):
    path = str(tmp_path / "a.tar")
    with TarWriter(path, encoder=False) as sink:
        sink.write({"__key__": "k", "cls": b"1", "txt": "str is fine"})
        with pytest.raises(EncodingError, match="bytes or str"):
            sink.write({"__key__": "k2", "cls": 1})
    with TarWriter(str(tmp_path / "b.tar"), encoder={"cls": lambda v: b"%d" % (v * 10)}) as sink:
        sink.write({"__key__": "k", "cls": 4})
    with TarWriter(str(tmp_path / "c.tar"), encoder=lambda s: {**s, "cls": b"99"}) as sink:
        sink.write({"__key__": "k", "cls": 4})
    with TarWriter(str(tmp_path / "d.tar"), allow_pickle=True) as sink:
        sink.write({"__key__": "k", "pyd": {"a": 1}})
    assert read(path)[0]["cls"] == 1
    assert read(str(tmp_path / "b.tar"))[0]["cls"] == 40
    assert read(str(tmp_path / "c.tar"))[0]["cls"] == 99
    assert list(wds.WebDataset(str(tmp_path / "d.tar")).decode(allow_pickle=True))[0]["pyd"] == {"a": 1}


def test_keep_meta_writes_underscore_fields_but_not_reader_fields(tmp_path):
    path = str(tmp_path / "a.tar")
    sample = {"__key__": "k", "__url__": "elsewhere", "_note": "n", "cls": 1}
    with TarWriter(path, keep_meta=True) as sink:
        sink.write(sample)
    with TarWriter(str(tmp_path / "b.tar")) as sink:
        sink.write(sample)
    assert tarfile.open(path).getnames() == ["k._note", "k.cls"]
    assert tarfile.open(str(tmp_path / "b.tar")).getnames() == ["k.cls"]


def test_writes_to_streams_pipes_and_fsspec(tmp_path):
    import io

    buf = io.BytesIO()
    with TarWriter(buf) as sink:
        sink.write(samples(1)[0])
    assert not buf.closed and tarfile.open(fileobj=io.BytesIO(buf.getvalue())).getnames()[0] == "s0000.cls"
    target = tmp_path / "piped.tar"
    with TarWriter(f"pipe:cat > {target}") as sink:
        sink.write(samples(1)[0])
    assert [s["__key__"] for s in read(str(target))] == ["s0000"]
    with pytest.raises(wds.PipeError, match="status 3"):
        with TarWriter("pipe:cat > /dev/null; exit 3") as sink:
            sink.write(samples(1)[0])
    with TarWriter("memory://bucket/m.tar") as sink:
        sink.write(samples(1)[0])
    assert [s["cls"] for s in wds.WebDataset("memory://bucket/m.tar").decode()] == [0]


def test_shardwriter_rotates_by_count_and_never_leaves_an_empty_shard(tmp_path):
    done = []
    pattern = str(tmp_path / "out-%03d.tar")
    with ShardWriter(pattern, maxcount=10, post=done.append, start_shard=5) as sink:
        for s in samples(30):
            sink.write(s)
    names = sorted(os.listdir(tmp_path))
    assert names == ["out-005.tar", "out-006.tar", "out-007.tar"] and done == [str(tmp_path / n) for n in names]
    assert sink.total == 30 and [e["nsamples"] for e in sink.shards] == [10, 10, 10]
    with ShardWriter(str(tmp_path / "none-%03d.tar")) as empty:
        pass
    assert empty.shards == [] and not any(n.startswith("none") for n in os.listdir(tmp_path))


def test_a_bad_first_sample_does_not_leave_an_empty_shard(tmp_path):
    with ShardWriter(str(tmp_path / "out-%03d.tar")) as sink:
        with pytest.raises(EncodingError):
            sink.write({"__key__": "bad.key", "cls": 1})
    assert os.listdir(tmp_path) == [] and sink.shards == []
    with ShardWriter(str(tmp_path / "out-%03d.tar")) as sink:
        with pytest.raises(EncodingError):
            sink.write({"__key__": "bad.key", "cls": 1})
        sink.write(samples(1)[0])
    assert os.listdir(tmp_path) == ["out-000.tar"]


def test_shardwriter_keeps_shards_under_maxsize(tmp_path):
    pattern = str(tmp_path / "out-%03d.tar")
    with ShardWriter(pattern, maxsize=10_000) as sink:
        for i in range(40):
            sink.write({"__key__": f"k{i:03d}", "bin": bytes(1000)})
    sizes = [os.path.getsize(tmp_path / n) for n in sorted(os.listdir(tmp_path))]
    assert all(size - 1024 <= 10_000 for size in sizes)  # payload within the limit; end blocks on top
    # a sample takes 512 + 1024 bytes, so six fit in 10,000: 40 samples make seven shards
    assert len(sizes) == 7 and [e["nsamples"] for e in sink.shards] == [6] * 6 + [4]


def test_shardwriter_descriptor_is_wids_compatible(tmp_path):
    (tmp_path / "shards").mkdir()
    with ShardWriter(str(tmp_path / "shards" / "d-%02d.tar"), maxcount=7, descriptor=str(tmp_path / "d.json")) as sink:
        for s in samples(20):
            sink.write(s)
    desc = json.loads((tmp_path / "d.json").read_text())
    assert desc["wids_version"] == 1
    assert [e["url"] for e in desc["shardlist"]] == ["shards/d-00.tar", "shards/d-01.tar", "shards/d-02.tar"]
    assert [e["nsamples"] for e in desc["shardlist"]] == [7, 7, 6]
    assert all(e["filesize"] == os.path.getsize(tmp_path / e["url"]) for e in desc["shardlist"])


def test_shardwriter_checks_its_arguments(tmp_path):
    with pytest.raises(wds.SpecError, match="maxcount must be >= 1, got 0"):
        ShardWriter(str(tmp_path / "x-%d.tar"), maxcount=0)
    with pytest.raises(wds.SpecError, match="%d"):
        ShardWriter(str(tmp_path / "x.tar"))


# ---------------------------------------------------------------- interoperability


def test_webdataset_reads_what_we_write(tmp_path):
    path = str(tmp_path / "ours.tar")
    rows = [
        {"__key__": "d" * 120 + "/long", "txt": "long key", "cls": 1},
        {"__key__": "dir.v2/k", "seg.png": np.zeros((3, 3, 3), np.uint8), "txt.gz": "zipped", "cls": 2},
        {"__key__": "e" * 300, "cls": 3, "empty": b""},
    ]
    with TarWriter(path) as sink:
        for row in rows:
            sink.write(row)
    theirs = list(webdataset.WebDataset(path, shardshuffle=False).decode("rgb8"))
    ours = read(path)
    assert [s["__key__"] for s in theirs] == [s["__key__"] for s in ours] == [r["__key__"] for r in rows]
    assert [s["cls"] for s in theirs] == [1, 2, 3] and theirs[1]["txt.gz"] == "zipped"
    assert theirs[2]["empty"] == b"" and theirs[1]["seg.png"].shape == (3, 3, 3)


def test_gnu_tar_lists_and_extracts_what_we_write(tmp_path):
    path = str(tmp_path / "ours.tar")
    with TarWriter(path) as sink:
        sink.write({"__key__": "x" * 150 + "/k", "txt": "a"})
        sink.write({"__key__": "y" * 100 + "/" + "z" * 160, "txt": "b"})  # needs a pax header
    names = subprocess.run(["tar", "tf", path], capture_output=True, text=True, check=True).stdout.split("\n")
    assert names[:2] == ["x" * 150 + "/k.txt", "y" * 100 + "/" + "z" * 160 + ".txt"]
    out = tmp_path / "x"
    out.mkdir()
    subprocess.run(["tar", "xf", path, "-C", str(out)], check=True)
    assert (out / ("x" * 150) / "k.txt").read_text() == "a"
    assert (out / ("y" * 100) / ("z" * 160 + ".txt")).read_text() == "b"


def test_we_read_what_webdataset_writes(tmp_path):
    path = str(tmp_path / "theirs.tar")
    rows = [
        {"__key__": "d" * 110 + "/long", "txt": "a", "cls": 1},
        {"__key__": "dir.v2/k", "Seg.PNG": b"raw-bytes", "txt.gz": "zipped", "cls": 2},
        {"__key__": "k3", "a.b.c.json": {"x": 1}, "empty.bin": b"", "cls": 3},
    ]
    with webdataset.TarWriter(path) as sink:
        for row in rows:
            sink.write(row)
    ours = list(wds.WebDataset(path).decode())
    theirs = list(webdataset.WebDataset(path, shardshuffle=False).decode())
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert {k: v for k, v in a.items() if k != "__local_path__"} == {
            k: v for k, v in b.items() if k != "__local_path__"
        }


@given(
    st.lists(
        st.dictionaries(
            st.text(alphabet="abcdefgh", min_size=1, max_size=6).map(lambda f: f + ".bin"),
            st.binary(max_size=700),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=8,
    ),
    st.text(alphabet="abcxyz/", min_size=0, max_size=140),
)
def test_write_then_read_round_trips(tmp_path_factory, rows, prefix):
    prefix = "/".join(part for part in prefix.split("/") if part)
    path = str(tmp_path_factory.mktemp("rt") / "rt.tar")
    keys = [f"{prefix}/k{i}" if prefix else f"k{i}" for i in range(len(rows))]
    with TarWriter(path) as sink:
        for key, row in zip(keys, rows):
            sink.write({"__key__": key, **row})
    got = list(wds.WebDataset(path))
    assert [s["__key__"] for s in got] == keys
    assert [{k: v for k, v in s.items() if not k.startswith("__")} for s in got] == rows


LOST_AT_ROTATION = r"""
import json, os, resource, signal, sys
import wds_core as wds
folder = sys.argv[1]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
samples = [{"__key__": f"k{i:03d}", "bin": b"x" * 30_000} for i in range(17)]
sink = wds.ShardWriter(os.path.join(folder, "s-%02d.tar"), maxcount=5)
report = {"lost": None}
i = 0
while i < len(samples):
    if i == 7:  # shard 1 holds 2 samples in memory; it is finished (and lost) by the write of sample 10
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
    try:
        sink.write(samples[i])
    except OSError as exn:
        report.update(lost=exn.lost_keys, error=str(exn), at=samples[i]["__key__"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again: write them again
        for key in exn.lost_keys:
            sink.write(samples[int(key[1:])])
        continue  # the sample that found the shard full was not written either
    i += 1
sink.close()
report["files"] = sorted(os.listdir(folder))
print(json.dumps(report))
"""


def test_a_shard_lost_at_rotation_names_its_samples_and_they_can_be_written_again(tmp_path):
    """Issue 28: 8 samples whose write() returned were gone with the discarded shard."""
    done = subprocess.run([sys.executable, "-c", LOST_AT_ROTATION, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["at"] == "k010" and report["lost"] == ["k005", "k006", "k007", "k008", "k009"], report
    assert "s-01.tar" in report["error"] and "'k005', 'k006'" in report["error"] and "lost_keys" in report["error"]
    assert report["files"] == ["s-00.tar", "s-01.tar", "s-02.tar", "s-03.tar"]  # no lock, no .partial left
    keys = [s["__key__"] for s in wds.WebDataset(str(tmp_path / "s-{00..03}.tar"))]
    assert sorted(keys) == [f"k{i:03d}" for i in range(17)]  # every sample once


def test_two_writers_of_one_pattern_fail_fast(tmp_path):
    pattern = str(tmp_path / "out-%03d.tar")
    first = wds.ShardWriter(pattern, maxcount=2)
    first.write({"__key__": "a", "txt": "1"})
    with pytest.raises(wds.SpecError, match=rf"another writer \(process {os.getpid()}\) is writing shards of"):
        wds.ShardWriter(pattern)
    other = subprocess.run(
        [sys.executable, "-c", "import sys, wds_core as wds; wds.ShardWriter(sys.argv[1])", pattern],
        capture_output=True,
        text=True,
    )
    assert other.returncode != 0 and "another writer" in other.stderr
    first.close()
    with wds.ShardWriter(pattern, overwrite=True) as second:  # released: the next one may write
        second.write({"__key__": "b", "txt": "2"})
    assert sorted(os.listdir(tmp_path)) == ["out-000.tar"]  # b replaced a's shard: one writer at a time
    killed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, wds_core as wds; w = wds.ShardWriter(sys.argv[1]); print(1, flush=True); time.sleep(60)",
            pattern,
        ],
        stdout=subprocess.PIPE,
    )
    killed.stdout.readline()
    killed.kill()
    killed.wait()
    with wds.ShardWriter(pattern, overwrite=True) as third:  # a killed writer's lock went with its process
        third.write({"__key__": "c", "txt": "3"})
    with wds.ShardWriter(str(tmp_path / "other-%03d.tar")), wds.ShardWriter(str(tmp_path / "x" / "out-%03d.tar")):
        pass  # other patterns are not held


def test_a_writer_owns_its_output_set(tmp_path):
    """Issue 67: a ShardWriter into a pattern that holds an earlier run's shards refuses (they would stay beside the
    new ones); overwrite=True replaces the set, removing those it did not write (and their indexes); the drop-in's
    ShardWriter keeps webdataset's way (written over, the others left)."""
    from wds_core.dropin.writer import ShardWriter as DropinShardWriter

    pattern = str(tmp_path / "s-%02d.tar")
    with wds.ShardWriter(pattern, maxcount=2, index=True) as sink:
        for i in range(7):
            sink.write({"__key__": f"a{i}", "txt": "x"})
    assert len(sink.shards) == 4
    with pytest.raises(wds.SpecError, match=r"4 shards of the pattern .* are there already .*s-00\.tar"):
        wds.ShardWriter(pattern)
    with wds.ShardWriter(pattern, maxcount=2, overwrite=True) as sink:
        for i in range(3):
            sink.write({"__key__": f"b{i}", "txt": "y"})
    assert sorted(os.listdir(tmp_path)) == ["s-00.tar", "s-00.tar.idx", "s-01.tar", "s-01.tar.idx"]
    assert [s["__key__"] for s in wds.WebDataset(str(tmp_path / "s-{00..01}.tar"))] == ["b0", "b1", "b2"]
    with wds.ShardWriter(pattern, maxcount=2, start_shard=2) as sink:  # numbers past the set: nothing is there
        sink.write({"__key__": "c0", "txt": "z"})
    with DropinShardWriter(pattern, maxcount=10) as sink:  # webdataset's way: written over, the others left
        sink.write({"__key__": "d0", "txt": "w"})
    shards = sorted(name for name in os.listdir(tmp_path) if name.endswith(".tar"))
    assert shards == ["s-00.tar", "s-01.tar", "s-02.tar"]
    assert wds.writer.brace_spec("out/t-%06d.tar", 0, 2) == "out/t-{000000..000002}.tar"
    assert wds.writer.brace_spec("t-%d.tar", 7, 7) == "t-7.tar"
