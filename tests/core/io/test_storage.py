import subprocess
import sys

import fsspec
import pytest

from wds_core import PipeError, ShardNotFoundError, ShardOpenError, WebDataset, open_shard
from wds_core.errors import redact_url


def test_local_and_file_url(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"hello")
    with open_shard(str(path)) as f:
        assert f.read(100) == b"hello"
    with open_shard(f"file://{path}") as f:
        assert f.read() == b"hello"


def test_missing_shard_is_oserror_naming_url(tmp_path):
    url = str(tmp_path / "nope.tar")
    with pytest.raises(ShardNotFoundError) as info:
        open_shard(url)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, OSError)
    assert url in str(info.value) and info.value.url == url


def test_pipe_reads_command_output():
    with open_shard("pipe:printf abc") as f:
        assert f.read(10) == b"abc"


def test_pipe_failure_names_command_status_and_stderr():
    f = open_shard("pipe:printf partial; echo 'disk on fire' >&2; exit 3")
    with pytest.raises(PipeError) as info:
        while f.read(1 << 16):
            pass
    f.close()
    message = str(info.value)
    assert "status 3" in message and "disk on fire" in message and "pipe:printf partial" in message


def test_pipe_closed_early_is_not_an_error():
    f = open_shard("pipe:yes")
    assert f.read(4) == b"y\ny\n"
    f.close()


def test_pipe_failure_through_webdataset(tmp_path, shards):
    spec, paths, keys = shards
    ds = WebDataset(f"pipe:head -c 3000 {paths[0]}; exit 7")
    with pytest.raises(PipeError, match="status 7"):
        list(ds)


def test_stdin_shard(shards):
    spec, paths, keys = shards
    code = "import wds_core as w; print(sum(1 for _ in w.WebDataset('-')))"
    with open(paths[0], "rb") as stdin:
        out = subprocess.run([sys.executable, "-c", code], stdin=stdin, capture_output=True, check=True)
    assert out.stdout.strip() == b"25"


def test_memory_fsspec_url(shards):
    spec, paths, keys = shards
    fs = fsspec.filesystem("memory")
    with open(paths[1], "rb") as src:
        fs.pipe("/bucket/shard.tar", src.read())
    samples = list(WebDataset("memory://bucket/shard.tar"))
    assert [s["__key__"] for s in samples] == keys[25:50]
    assert all("__local_path__" not in s for s in samples)
    with pytest.raises(ShardNotFoundError):
        open_shard("memory://bucket/missing.tar").read(1)


def test_unknown_protocol_has_a_clear_error():
    with pytest.raises(ShardOpenError, match="no storage backend"):
        open_shard("nosuchproto://bucket/x.tar")


def test_credentials_are_redacted():
    assert "hunter2" not in redact_url("https://user:hunter2@host/x.tar")
    assert "abc" not in redact_url("https://host/x.tar?X-Amz-Signature=abc&part=1")
    assert redact_url("https://host/x.tar?part=1") == "https://host/x.tar?part=1"
