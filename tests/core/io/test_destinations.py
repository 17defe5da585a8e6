"""Shard destinations: atomic local files, stdout, clear errors."""

import json
import os
import subprocess
import sys

import pytest

import wds_core as wds
from wds_core import ShardOpenError
from wds_core.io.storage import create_shard


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

    return [(s["__key__"], s["bin"], s["txt"]) for s in wds_core.WebDataset(url, **kw)]


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
        with wds_core.TarWriter(url, storage=options) as sink:
            for sample in _samples(12, 1 << 20):
                sink.write(sample)
            fs.invalidate_cache()
            assert not fs.exists(url)  # 12 MiB sent as parts, nothing visible yet
            raise RuntimeError("stop here")
    fs.invalidate_cache()
    assert not fs.exists(url)
    assert fs.list_multipart_uploads("team-a") == []  # the upload was cancelled, not left behind
    with wds_core.TarWriter(url, storage=options) as sink:
        for sample in _samples(12, 1 << 20):
            sink.write(sample)
    fs.invalidate_cache()
    assert fs.size(url) > 12 << 20
    assert len(_read_back(url, storage=options)) == 12


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


FULL_DISK = r"""
import json, os, resource, signal, sys
import wds_core as wds
folder, limit = sys.argv[1], int(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past RLIMIT_FSIZE: EFBIG instead of death
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
report = {"written": [], "failed": []}
sink = wds.TarWriter(os.path.join(folder, "out.tar"))
for i in range(40):
    sample = {"__key__": f"k{i:04d}", "bin": bytes([i]) * 200_000}
    try:
        sink.write(sample)
        report["written"].append(sample["__key__"])
    except OSError as exn:
        report["failed"].append(sample["__key__"])
        report.update(error=str(exn), errno=exn.errno, wds=isinstance(exn, wds.WdsError))
        break
report["partials"] = [n for n in os.listdir(folder) if n.endswith(".partial")]
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
failed = report["failed"][0]
sink.write({"__key__": failed, "bin": bytes([int(failed[1:])]) * 200_000})  # the failed write, retried
report["written"].append(failed)
sink.close()
print(json.dumps(report))
"""


def test_a_full_disk_fails_the_write_cleanly_and_a_retry_writes_exactly_once(tmp_path):
    """Issue 21: the failed sample is not in the shard, the error names it, a retried write lands once."""
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path), str(3_000_000)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] and report["wds"] and report["errno"] == 27  # EFBIG, as ENOSPC would be 28
    assert "cannot write shard" in report["error"] and "out.tar" in report["error"]
    keys = [s["__key__"] for s in wds.WebDataset(str(tmp_path / "out.tar"))]
    assert keys == report["written"] and len(keys) == len(set(keys)) > 10  # every sample once, none lost
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]


FULL_AT_CLOSE = r"""
import os, resource, signal, sys
import wds_core as wds
folder = sys.argv[1]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
try:
    with wds.ShardWriter(os.path.join(folder, "s-%02d.tar"), maxcount=5) as sink:
        for i in range(12):
            sink.write({"__key__": f"k{i:03d}", "bin": b"x" * 30_000})
            if i == 10:  # shards 0 and 1 are complete; shard 2 holds 1 sample in memory
                resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
except OSError as exn:
    print(type(exn).__name__, isinstance(exn, wds.WdsError), exn)
print(sorted(os.listdir(folder)))
"""


def test_a_shard_that_cannot_be_finished_leaves_no_temporary_file(tmp_path):
    done = subprocess.run([sys.executable, "-c", FULL_AT_CLOSE, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "ShardOpenError True cannot" in done.stdout and "s-02.tar" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "['s-00.tar', 's-01.tar']"  # earlier shards intact, no .partial
    assert [len(list(wds.WebDataset(str(tmp_path / f"s-0{s}.tar")))) for s in (0, 1)] == [5, 5]


def test_a_new_writer_removes_what_killed_writers_left(tmp_path):
    from wds_core.io.destinations import stale_partials

    dead = subprocess_pid_that_exited()
    stale = tmp_path / f".out.tar.{dead}.0123abcd.partial"
    stale.write_bytes(b"half a shard")
    live = tmp_path / f".out.tar.{os.getpid()}.89abcdef.partial"  # a writer that still runs
    live.write_bytes(b"being written")
    other = tmp_path / f".other.tar.{dead}.0123abcd.partial"
    other.write_bytes(b"another shard's")
    assert stale_partials(str(tmp_path)) == sorted([str(other), str(stale)])
    with wds.TarWriter(str(tmp_path / "out.tar")) as sink:
        sink.write({"__key__": "a", "txt": "b"})
    assert not stale.exists() and live.exists() and other.exists()
    live.unlink()


def subprocess_pid_that_exited():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
