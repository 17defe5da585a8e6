"""``wids.wids_specs`` and wids 0.1.x's older names (issue 57): ``from wids import wids_specs`` failed through the
switch, and ``wids.wids.default_localname`` was missing.  Each is checked against wids 0.1.11 where it has the name,
and against what wids 0.1.x's own tests expect where only an older release had it."""

import hashlib
import io
import json
import subprocess
import sys
import textwrap

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from wds_core.dropin import wids, widsspecs


@pytest.fixture
def described(tmp_path):
    """A description with its own shards, a nested dataset inline and one behind a source_url in a sub-folder."""
    (tmp_path / "sub").mkdir()
    for name, n in (("a.tar", 3), ("sub/b.tar", 4), ("c.tar", 2)):
        write_shard(tmp_path / name, make_samples(name[:1], n))
    nested = {"wids_version": 1, "name": "nested", "shardlist": [{"url": "b.tar", "nsamples": 4}]}
    (tmp_path / "sub" / "nested.json").write_text(json.dumps(nested))
    top = {
        "wids_version": 1, "name": "top", "weight": 2.0,
        "shardlist": [{"url": "a.tar", "nsamples": 3}],
        "datasets": [
            {"source_url": str(tmp_path / "sub" / "nested.json"), "weight": 0.5},
            {"name": "inline", "shardlist": [{"url": str(tmp_path / "c.tar"), "nsamples": 2}]},
        ],
    }  # fmt: skip
    (tmp_path / "top.json").write_text(json.dumps(top))
    return tmp_path, top


URLS = [
    ("s3://bucket/data", "x.tar"), ("s3://bucket/data/", "../y/x.tar"), ("/data/dir", "x.tar"),
    ("http://h/a/b", "/abs/x.tar?sig=1"), ("gs://b/d", "s3://other/x.tar"), ("dir", "x.tar"),
]  # fmt: skip


@pytest.mark.parametrize("base, url", URLS)
def test_urls_merge_as_wids_merges_them(base, url):
    real = pytest.importorskip("wids.wids_specs")
    assert widsspecs.urlmerge(base, url) == real.urlmerge(base, url)
    assert widsspecs.urldir(base + "/" + url) == real.urldir(base + "/" + url)


def test_a_description_resolves_as_wids_resolves_it(described):
    real = pytest.importorskip("wids.wids_specs")
    folder, top = described
    theirs = real.resolve_dsdesc(json.loads(json.dumps(top)), base=str(folder))
    ours = widsspecs.resolve_dsdesc(json.loads(json.dumps(top)), base=str(folder))
    assert ours["shardlist"] == theirs["shardlist"]  # (wids also writes into the nested entries it was given)
    assert {k: v for k, v in ours.items() if k != "datasets"} == {k: v for k, v in theirs.items() if k != "datasets"}
    assert [s["url"] for s in ours["shardlist"]] == [
        str(folder / "a.tar"), str(folder / "sub" / "b.tar"), str(folder / "c.tar")
    ]  # fmt: skip
    loaded = widsspecs.load_dsdesc_and_resolve(str(folder / "top.json"), options={"weight": 3.0})
    assert (
        loaded["shardlist"]
        == real.load_dsdesc_and_resolve(str(folder / "top.json"), options={"weight": 3.0})["shardlist"]
    )
    with open(folder / "top.json") as stream:
        assert widsspecs.load_remote_dsdesc_raw(stream) == top


def test_wids_0_1_s_extract_shardlist_as_its_tests_use_it(described):
    """wids 0.1.x's test: ``extract_shardlist(spec)`` of a parsed description gives its shards (with weights)."""
    spec = {"__kind__": "wids-shard-index-v1", "name": "train", "wids_version": 1,
            "shardlist": [{"url": "testdata/mpdata.tar", "nsamples": 10}]}  # fmt: skip
    assert widsspecs.extract_shardlist(spec) == [{"url": "testdata/mpdata.tar", "nsamples": 10}]
    folder, top = described
    shards = widsspecs.extract_shardlist(top)
    assert [(s["url"], s.get("weight")) for s in shards] == [
        ("a.tar", 2.0), ("b.tar", None), (str(folder / "c.tar"), None)
    ]  # fmt: skip
    rebased = widsspecs.load_remote_shardlist(str(folder / "top.json"))
    assert rebased[0]["url"] == str(folder / "a.tar")


def test_bad_descriptions_are_errors_wids_code_catches_and_data_runs_no_command(described, tmp_path, monkeypatch):
    folder, top = described
    for bad in ({"shardlist": []}, {"wids_version": 2, "shardlist": [{"url": "a", "nsamples": 1}]},
                {"wids_version": 1, "shardlist": [{"url": "a"}]}, {"wids_version": 1}):  # fmt: skip
        with pytest.raises(AssertionError):
            widsspecs.resolve_dsdesc(bad)
        with pytest.raises(wds_core.SpecError):
            widsspecs.resolve_dsdesc(bad)
    marker = tmp_path / "ran"
    hostile = dict(top, datasets=[{"source_url": f"pipe:touch {marker}; cat {folder}/top.json"}])
    for resolve in (widsspecs.resolve_dsdesc, widsspecs.extract_shardlist):
        with pytest.raises(wds_core.SpecError, match="runs a command"):
            resolve(hostile)
    with pytest.raises(wds_core.SpecError, match="runs a command"):
        widsspecs.resolve_dsdesc(dict(top, shardlist=[{"url": f"pipe:touch {marker}", "nsamples": 1}]))
    assert not marker.exists()
    monkeypatch.setattr(widsspecs, "MAX_DESCRIPTION_BYTES", 1000)
    big = io.StringIO(" " * 1010)
    with pytest.raises(wds_core.SpecError, match="over"):
        widsspecs.load_remote_dsdesc_raw(big)


def test_wids_0_1_s_older_names(tmp_path):
    shard = tmp_path / "s.tar"
    write_shard(shard, make_samples("k", 5))
    localname = wids.default_localname(str(tmp_path / "dl"))
    assert (tmp_path / "dl").is_dir() and localname("s3://b/x y.tar") == str(
        tmp_path / "dl" / "s3%3A%2F%2Fb%2Fx%20y.tar"
    )
    assert wids.cache_localname(str(tmp_path / "c"))("s3://b/d/x.tar") == str(tmp_path / "c" / "x.tar")
    assert wids.get_cache_path("s3://b/d/x.tar", "/cache") == "/cache/x.tar"
    assert wids.compute_file_md5sum(str(shard)) == hashlib.md5(shard.read_bytes()).hexdigest()
    with open(shard, "rb") as stream:
        stream.read(10)
        assert wids.compute_file_md5sum(stream, chunksize=100) == hashlib.md5(shard.read_bytes()).hexdigest()
    assert wids.compute_num_samples(str(shard)) == 5
    assert wids.intersect_ranges([(0, 5), (5, 10), (12, 20)], (3, 14)) == [(3, 5), (5, 10), (12, 14)]
    assert wids.intersect_range((0, 3), (3, 5)) is None
    assert len(wids.interpret_transformations(lambda s: s)) == 1
    real = pytest.importorskip("wids.wids")
    assert wids.hash_dataset_name("abc") == real.hash_dataset_name("abc")
    assert wids.intersect_ranges([(0, 5), (7, 9)], (4, 8)) == real.intersect_ranges([(0, 5), (7, 9)], (4, 8))


def test_the_switch_gives_wids_specs_and_names_what_to_use_for_wids_internals(tmp_path):
    code = textwrap.dedent(
        """
        import json, sys
        import wds_core
        wds_core.install_as_webdataset(verbose=False)
        from wids import wids_specs
        import wids.wids
        print(wids_specs.extract_shardlist(json.loads(sys.argv[1]))[0]["url"], callable(wids.wids.default_localname))
        try:
            import wids.wids_dl
        except ModuleNotFoundError as exn:
            print(exn)
        """
    )
    spec = json.dumps({"wids_version": 1, "shardlist": [{"url": "x.tar", "nsamples": 1}]})
    out = subprocess.run([sys.executable, "-c", code, spec], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == "x.tar True" and "wids.wids_dl" in second and "wds's storage" in second
