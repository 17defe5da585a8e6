"""webdataset.gopen over wds's storage layer, and gopen_schemes entries that every reader and writer honours."""

import importlib
import json
import os

import pytest

import wds_core
from tests.conftest import make_samples, write_shard

# the module (the package's "gopen" is the function, as in webdataset)
g = importlib.import_module("wds_core.dropin.gopen")


def test_read_local_pipe_and_text(tmp_path):
    (tmp_path / "_info.json").write_text(json.dumps({"splits": {"train": {"num_samples": 3}}}))
    with wds_core.gopen(str(tmp_path / "_info.json")) as stream:  # the dataset-zoo pattern
        assert json.load(stream)["splits"]["train"]["num_samples"] == 3
    with g.gopen(f"pipe:cat {tmp_path / '_info.json'}") as stream:
        assert json.loads(stream.read())["splits"]
    with g.gopen(f"file://{tmp_path / '_info.json'}", "r") as stream:
        assert json.load(stream)["splits"]
    with pytest.raises(FileNotFoundError):
        g.gopen(str(tmp_path / "missing.json"))
    with pytest.raises(TypeError, match="timeout"):
        g.gopen(str(tmp_path / "_info.json"), timeout=3)  # no keyword is ignored
    with pytest.raises(ValueError, match="mode"):
        g.gopen(str(tmp_path / "_info.json"), "ab")


def test_write_is_atomic_locally_and_through_fsspec(tmp_path):
    target = tmp_path / "out.bin"
    with g.gopen(str(target), "wb") as stream:
        stream.write(b"abc")
        assert not target.exists()  # only complete files appear
    assert target.read_bytes() == b"abc"
    with pytest.raises(RuntimeError):
        with g.gopen(str(tmp_path / "failed.bin"), "wb") as stream:
            stream.write(b"half")
            raise RuntimeError("stop")
    assert not (tmp_path / "failed.bin").exists() and not [p for p in os.listdir(tmp_path) if "partial" in p]
    with g.gopen("memory://bucket/t.txt", "w") as stream:
        stream.write("héllo")
    with g.gopen("memory://bucket/t.txt", "r") as stream:
        assert stream.read() == "héllo"
    with g.gopen(f"pipe:cat > {tmp_path / 'piped.bin'}", "wb") as stream:
        stream.write(b"xyz")
    assert (tmp_path / "piped.bin").read_bytes() == b"xyz"


def test_a_scheme_registered_in_gopen_schemes_serves_readers_and_writers(tmp_path):
    write_shard(tmp_path / "s-0.tar", make_samples("a", 4))
    opened = []

    def local_scheme(url, mode="rb", bufsize=8192, **kw):
        opened.append((url, mode))
        return open(os.path.join(tmp_path, url.split("://", 1)[1]), mode)

    g.gopen_schemes["mine"] = local_scheme
    assert g.gopen_schemes["mine"] is local_scheme and "mine" in g.gopen_schemes
    keys = [s["__key__"] for s in wds_core.WebDataset("mine://s-{0..0}.tar")]
    assert keys == ["a00000", "a00001", "a00002", "a00003"]
    with wds_core.TarWriter("mine://copy.tar") as sink:
        sink.write({"__key__": "z", "txt": "1"})
    assert [s["__key__"] for s in wds_core.WebDataset(str(tmp_path / "copy.tar"))] == ["z"]
    assert ("mine://copy.tar", "wb") in opened
    del g.gopen_schemes["mine"]
    with pytest.raises(wds_core.ShardOpenError, match="no storage backend"):  # back to fsspec: no such protocol
        list(wds_core.WebDataset("mine://s-{0..0}.tar"))
    g.gopen_schemes["__default__"] = local_scheme  # webdataset's fallback for schemes without an entry
    assert [s["__key__"] for s in wds_core.WebDataset("other://s-0.tar")][:1] == ["a00000"]


def test_pipe_object_checks_exit_status(tmp_path):
    with g.Pipe("printf abc", mode="rb", shell=True) as pipe:
        assert pipe.read() == b"abc"
    with pytest.raises(OSError, match="exit status 3"):
        with g.Pipe("exit 3", mode="rb", shell=True) as pipe:
            pipe.read()
    with g.Pipe("exit 3", mode="rb", shell=True, ignore_status=[3]) as pipe:
        assert pipe.read() == b""
    with pytest.raises(ValueError, match="no gopen handler"):
        g.gopen_error("zzz://x")
