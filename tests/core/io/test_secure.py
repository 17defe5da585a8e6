"""Secure mode (issue 21): no commands, no local paths outside the allowed roots, no pickles; each refusal says why."""

import json
import os
import pickle

import pytest

import wds_core as wds
from tests.conftest import make_samples, write_shard
from wds_core import SpecError
from wds_core.io import secure_mode, set_secure


@pytest.fixture
def allowed(tmp_path, monkeypatch):
    root = tmp_path / "allowed"
    root.mkdir()
    write_shard(root / "a.tar", make_samples("a-", 3))
    outside = tmp_path / "outside"
    outside.mkdir()
    write_shard(outside / "b.tar", make_samples("b-", 3))
    monkeypatch.setenv("WDS_SECURE", "1")
    monkeypatch.setenv("WDS_SECURE_ROOTS", str(root))
    return root, outside


def keys(url):
    return [s["__key__"] for s in wds.WebDataset(url, shardshuffle=False)]


def test_local_paths_inside_the_roots_only(allowed):
    root, outside = allowed
    assert secure_mode() and keys(str(root / "a.tar")) == ["a-00000", "a-00001", "a-00002"]
    assert keys(f"file://{root}/a.tar")[0] == "a-00000"
    for url in (str(outside / "b.tar"), f"file://{outside}/b.tar", str(root / ".." / "outside" / "b.tar")):
        with pytest.raises(SpecError, match="not under an allowed root .*WDS_SECURE_ROOTS"):
            keys(url)
    os.symlink(outside / "b.tar", root / "link.tar")  # a link inside a root to a file outside it
    with pytest.raises(SpecError, match="refusing to read the local path"):
        keys(str(root / "link.tar"))


def test_commands_stdin_and_rewrites_to_them_are_refused(allowed, monkeypatch):
    root, outside = allowed
    with pytest.raises(SpecError, match="refuses pipe: commands"):
        keys(f"pipe:cat {root}/a.tar")
    with pytest.raises(SpecError, match="standard input"):
        keys("-")
    wds.register_rewrite("s3://mirror/", str(outside) + "/")  # a rewrite does not get around it
    with pytest.raises(SpecError, match="not under an allowed root"):
        keys("s3://mirror/b.tar")
    monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
    monkeypatch.setenv("WDS_REWRITE", f"s3://cmd/=pipe:cat {outside}/")
    with pytest.raises(SpecError, match="refuses pipe: commands"):
        keys("s3://cmd/b.tar")


def test_writing_is_held_to_the_same_rules(allowed):
    root, outside = allowed
    with wds.TarWriter(str(root / "new.tar")) as sink:
        sink.write({"__key__": "x", "txt": "y"})
    for dest in (str(outside / "new.tar"), "pipe:cat > /dev/null", "-"):
        with pytest.raises(SpecError, match="refusing to write"):
            wds.TarWriter(dest)
    assert not (outside / "new.tar").exists()


def test_pickles_are_refused_even_when_asked_for(allowed):
    with pytest.raises(SpecError, match="refusing allow_pickle=True: secure mode is on"):
        wds.Decoder(allow_pickle=True)
    sample = {"__key__": "k", "x.pyd": pickle.dumps({"a": 1})}
    with pytest.raises(wds.DecodingError, match="allow_pickle"):
        wds.Decoder().decode(sample)


def test_the_switch_the_config_file_and_remote_urls(tmp_path, monkeypatch):
    monkeypatch.delenv("WDS_SECURE", raising=False)
    monkeypatch.delenv("WDS_SECURE_ROOTS", raising=False)
    assert not secure_mode()
    write_shard(tmp_path / "c.tar", make_samples("c-", 2))
    config = tmp_path / "wds.json"
    config.write_text(json.dumps({"secure": True, "secure_roots": [str(tmp_path / "data")]}))
    monkeypatch.setenv("WDS_CONFIG", str(config))
    assert secure_mode()
    with pytest.raises(SpecError, match=r"allowed root \(.*data\)"):
        keys(str(tmp_path / "c.tar"))
    monkeypatch.setenv("WDS_SECURE", "0")  # the environment wins over the file
    assert keys(str(tmp_path / "c.tar")) == ["c-00000", "c-00001"]
    monkeypatch.delenv("WDS_CONFIG")
    try:
        set_secure(True, roots=[tmp_path])  # for this process and the workers it starts
        assert os.environ["WDS_SECURE"] == "1" and keys(str(tmp_path / "c.tar")) == ["c-00000", "c-00001"]
        from tests import synthstore

        synthstore.install(3)  # remote URLs are not restricted
        assert len(keys("synth://bucket/shard-000001.tar")) == synthstore.SAMPLES
    finally:
        set_secure(False)
