"""``import wids`` without a framework (issue 44): the switch gives wds_core's wids; wids's sample shape."""

import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import wds_core
from wds_core.dropin import wids

CODE = textwrap.dedent(
    """
    import sys
    import wds_core
    wds_core.install_as_webdataset(verbose=False)
    import wids
    from wids import wids as inner
    from wids.wids_decode import default_decoder
    ds = wids.ShardListDataset([{"url": sys.argv[1], "nsamples": 5}], transformations=[default_decoder])
    print(wids.__wds__, wids.__version__, len(ds), ds[3][".txt"], ds[3][".cls"], ds[3]["__shardindex__"])
    print(sorted(m for m in ("torch", "jax", "tensorflow") if m in sys.modules))
    try:
        import wids.wids_mmtar
    except ModuleNotFoundError as exn:
        print("refused:", exn)
    wds_core.dropin.uninstall()
    """
)


@pytest.mark.slow
def test_import_wids_through_the_core_switch(tmp_path):
    shard = tmp_path / "w.tar"
    with wds_core.TarWriter(str(shard)) as sink:
        for i in range(5):
            sink.write({"__key__": f"k{i}", "txt": f"t{i}", "cls": i})
    out = subprocess.run([sys.executable, "-c", CODE, str(shard)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "wds_core 0.1.11 5 t3 3 3" and lines[1] == "[]"
    assert lines[2].startswith("refused: No module named 'wids.wids_mmtar'")


def test_wids_sample_shape_and_decoding(tmp_path):
    shard = tmp_path / "w.tar"
    array = io.BytesIO()
    np.save(array, np.arange(3))
    with wds_core.TarWriter(str(shard)) as sink:
        sink.write({"__key__": "d/a", "seg.txt": "x", "npy": array.getvalue(), "json": b"null", "bin": b"\x01"})
    ds = wids.ShardListDataset([{"url": str(shard), "nsamples": 1}], transformations=[])
    raw = ds[0]
    assert list(raw) == [".bin", ".json", ".npy", ".seg.txt", "__key__", "__dataset__", "__index__", "__shard__",
                         "__shardindex__"]  # fmt: skip
    assert raw["__key__"] == "d/a" and all(isinstance(raw[k], io.BytesIO) for k in raw if k.startswith("."))
    decoded = wids.default_decoder(raw)
    assert decoded[".seg.txt"] == "x" and decoded[".json"] is None and decoded[".npy"].tolist() == [0, 1, 2]
    assert decoded[".bin"].read() == b"\x01"  # no decoder: left as it came
    with pytest.raises(ValueError, match="must start with a dot"):
        wids.default_decoder({"jpg": b""})
    assert wids.splitname("a/b.c/d.seg.png") == ("a/b.c/d", ".seg.png")
    orders = [list(wids.ChunkedSampler(range(30), chunksize=7, seed=1)) for _ in range(2)]
    assert orders[0] == orders[1] and sorted(orders[0]) == list(range(30)) and orders[0] != list(range(30))


@pytest.mark.parametrize("where", ["cache_dir", "WIDS_CACHE"])
def test_wids_downloads_in_secure_mode_go_only_under_the_roots(tmp_path, http_server, monkeypatch, where):
    """Issue 56, case 1: wids's downloads went into $WIDS_CACHE (default /tmp/_wids_cache) or cache_dir whatever
    secure mode's roots said."""
    with wds_core.TarWriter(os.path.join(http_server.root, "r.tar")) as sink:
        sink.write({"__key__": "k0", "txt": "t0"})
    shards = [{"url": f"{http_server.url}/r.tar", "nsamples": 1}]
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    root.mkdir()
    monkeypatch.setenv("WDS_SECURE", "1")
    monkeypatch.setenv("WDS_SECURE_ROOTS", str(root))

    def dataset(folder):
        if where == "cache_dir":
            return wids.ShardListDataset(shards, cache_dir=str(folder), transformations=[])
        monkeypatch.setenv("WIDS_CACHE", str(folder))
        return wids.ShardListDataset(shards, transformations=[])

    with pytest.raises(wds_core.SpecError, match="not under an allowed root"):
        dataset(elsewhere)[0]
    assert not elsewhere.exists()
    assert dataset(root / "cache")[0]["__key__"] == "k0"
    assert len(os.listdir(root / "cache")) == 1
