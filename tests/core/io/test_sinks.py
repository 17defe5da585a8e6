"""Shard destinations: atomic local files, stdout, clear errors."""

import subprocess
import sys

import pytest

from wds_core import ShardOpenError
from wds_core.io.sinks import create_shard


def test_local_shards_appear_on_commit_and_vanish_on_abort(tmp_path):
    sink = create_shard(str(tmp_path / "sub" / "a.tar"))  # missing folders are created
    sink.write(b"abc")
    assert not (tmp_path / "sub" / "a.tar").exists()
    sink.commit()
    assert (tmp_path / "sub" / "a.tar").read_bytes() == b"abc"
    other = create_shard(str(tmp_path / "b.tar"))
    other.write(b"x")
    other.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


def test_unwritable_destinations_are_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ShardOpenError, match="cannot create shard") as info:
        create_shard(str(blocker / "a.tar"))
    assert str(blocker / "a.tar") in str(info.value)


def test_dash_writes_to_stdout(tmp_path):
    code = "from wds_core import TarWriter\nwith TarWriter('-') as s: s.write({'__key__': 'k', 'txt': 'hi'})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    listing = subprocess.run(["tar", "tf", "-"], input=out, capture_output=True, check=True).stdout
    assert listing == b"k.txt\n"


# ---------------------------------------------------------------- remote destinations


def _samples(n, size):
    return [{"__key__": f"k{i:04d}", "bin": bytes([i % 256]) * size, "txt": f"sample {i}"} for i in range(n)]


def _read_back(url, **kw):
    import wds_core

    return [(s["__key__"], s["bin"], s["txt"]) for s in wds_core.WebDataset(url, shardshuffle=False, **kw)]


def test_shard_writer_to_s3_with_post_hooks(s3):
    import wds_core

    wds_core.register_storage("s3://team-a/", **s3["team-a"].client_options("team-a"))
    finished = []
    samples = _samples(100, 20_000)
    with wds_core.ShardWriter("s3://team-a/written/part-%03d.tar", maxcount=30, post=finished.append) as sink:
        for sample in samples:
            sink.write(sample)
    assert finished == [f"s3://team-a/written/part-{i:03d}.tar" for i in range(4)]
    expected = [(s["__key__"], s["bin"], s["txt"].encode()) for s in samples]
    assert _read_back("s3://team-a/written/part-{000..003}.tar") == expected


def test_s3_object_appears_only_when_complete(s3):
    import s3fs

    import wds_core

    options = dict(s3["team-a"].client_options("team-a"), default_block_size=5 << 20)  # multipart after 5 MiB
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3["team-a"].client_options("team-a"))
    url = "s3://team-a/atomic/big.tar"
    with pytest.raises(RuntimeError, match="stop here"):
        with wds_core.TarWriter(url, storage_options=options) as sink:
            for sample in _samples(12, 1 << 20):
                sink.write(sample)
            fs.invalidate_cache()
            assert not fs.exists(url)  # 12 MiB sent as parts, nothing visible yet
            raise RuntimeError("stop here")
    fs.invalidate_cache()
    assert not fs.exists(url)
    assert fs.list_multipart_uploads("team-a") == []  # the upload was cancelled, not left behind
    with wds_core.TarWriter(url, storage_options=options) as sink:
        for sample in _samples(12, 1 << 20):
            sink.write(sample)
    fs.invalidate_cache()
    assert fs.size(url) > 12 << 20
    assert len(_read_back(url, storage_options=options)) == 12


def test_other_fsspec_targets_are_written_then_moved(tmp_path):
    import fsspec

    import wds_core

    fs = fsspec.filesystem("memory")
    with pytest.raises(RuntimeError):
        with wds_core.TarWriter("memory://moved/a.tar") as sink:
            sink.write({"__key__": "x", "txt": "hello"})
            assert [p.rsplit("/", 1)[1] for p in fs.ls("/moved", detail=False)][0].endswith(".partial")
            raise RuntimeError
    assert fs.find("/moved") == []
    with wds_core.TarWriter("memory://moved/a.tar") as sink:
        sink.write({"__key__": "x", "txt": "hello"})
    assert fs.ls("/moved", detail=False) == ["/moved/a.tar"]
    assert [s["txt"] for s in wds_core.WebDataset("memory://moved/a.tar")] == [b"hello"]


def test_shard_writer_to_gcs(gcs_server):
    import wds_core

    wds_core.register_storage("gs://gbucket/", **gcs_server.client_options())
    samples = _samples(20, 1000)
    with wds_core.ShardWriter("gs://gbucket/w/part-%02d.tar", maxcount=10) as sink:
        for sample in samples:
            sink.write(sample)
    assert _read_back("gs://gbucket/w/part-{00..01}.tar") == [
        (s["__key__"], s["bin"], s["txt"].encode()) for s in samples
    ]
