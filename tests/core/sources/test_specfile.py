"""Dataset-spec files (YAML/JSON): several sources mixed by weight, scaled, selected, on local disk and S3."""

import collections
import itertools
import json
import math
import os

import pytest

import wds_core as wds
from tests.conftest import make_samples, write_shard
from tests.core.test_checkpoint import oracle
from wds_core import SampleError, SpecError


def source(directory, name, nshards, per_shard, fields=("txt", "cls")):
    os.makedirs(directory / name, exist_ok=True)
    keys = []
    for s in range(nshards):
        samples = make_samples(f"{name}{s}-", per_shard, fields)
        keys += [x["__key__"] for x in samples]
        write_shard(directory / name / f"{name}-{s}.tar", samples, fields)
    return keys


@pytest.fixture
def three(tmp_path):
    keys = {
        "a": source(tmp_path, "a", 4, 10),
        "b": source(tmp_path, "b", 2, 10),
        "c": source(tmp_path, "c", 3, 5, fields=("nrm.jpg", "txt")),
    }
    return tmp_path, keys


def write_yaml(path, text):
    path.write_text(text)
    return str(path)


SEED_STYLE = """
dataset:
  - shards: a/a-{0..3}.tar
    scaleprob: 0.3
  - shards: b/b-{0..1}.tar
    scale: 2
  - shards: c/c-{0..2}.tar
    extensions: nrm.jpg
    scale: [1.0, 1.0]
"""


def origin(key):
    return key[0]


def test_the_seed_readme_layout_reads_every_source(three):
    root, keys = three
    spec = write_yaml(root / "mix.yaml", SEED_STYLE)
    samples = list(wds.WebDataset(spec, seed=1))
    got = collections.Counter(s["__key__"] for s in samples)
    assert {k for k in got if origin(k) == "a"} == set(keys["a"])
    assert all(got[k] == 2 for k in keys["b"]), "scale 2: every b shard twice per epoch"
    assert all(got[k] == 1 for k in keys["c"] + keys["a"])
    c_fields = {tuple(sorted(k for k in s if not k.startswith("__"))) for s in samples if origin(s["__key__"]) == "c"}
    assert c_fields == {("nrm.jpg",)}, "extensions keeps only the listed fields"


def test_json_dict_and_list_forms(three):
    root, keys = three
    spec = {"datasets": [{"shards": str(root / "a/a-{0..3}.tar")}, {"shards": [str(root / "b/b-0.tar")]}]}
    (root / "mix.json").write_text(json.dumps(spec))
    expected = sorted(keys["a"] + keys["b"][:10])
    assert sorted(s["__key__"] for s in wds.WebDataset(str(root / "mix.json"))) == expected
    assert sorted(s["__key__"] for s in wds.WebDataset(spec)) == expected
    repeated = itertools.islice(wds.WebDataset(spec).repeat(), 2 * len(expected))
    assert sorted(s["__key__"] for s in repeated) == sorted(expected * 2)
    assert sorted(s["__key__"] for s in wds.WebDataset(spec["datasets"][:1] and {"dataset": spec["datasets"]})) == (
        expected
    )


def test_weights_set_the_proportions(tmp_path):
    """Sources far larger than 10,000 draws: the first 10,000 samples follow the weights 3:1."""
    source(tmp_path, "x", 2, 8000)
    source(tmp_path, "y", 2, 8000)
    spec = write_yaml(
        tmp_path / "w.yaml",
        "dataset:\n  - shards: x/x-{0..1}.tar\n    weight: 3\n  - shards: y/y-{0..1}.tar\n    weight: 1\n",
    )
    first = [s["__key__"] for _, s in zip(range(10000), wds.WebDataset(spec, seed=2))]
    xs = sum(1 for k in first if k.startswith("x"))
    assert abs(xs - 7500) < 4 * math.sqrt(10000 * 0.75 * 0.25)


def test_choose_resample_and_fractional_scale(three):
    root, _ = three
    spec = {
        "dataset": [
            {"shards": str(root / "a/a-{0..3}.tar"), "choose": 2},
            {"shards": str(root / "b/b-{0..1}.tar"), "resample": 5},
            {"shards": str(root / "c/c-{0..2}.tar"), "scale": 1.34},
        ]
    }
    for epoch in range(3):
        ds = wds.WebDataset(spec, seed=epoch)
        urls = collections.Counter(s["__url__"].rsplit("/", 1)[-1][0] for s in ds)
        assert urls["a"] == 2 * 10 and urls["b"] == 5 * 10 and urls["c"] == (3 + 1) * 5


def test_extension_mapping_renames_and_missing_fields_are_data_errors(three):
    root, keys = three
    spec = {
        "dataset": [
            {"shards": str(root / "a/a-0.tar"), "extensions": {"text": "caption;txt"}},
            {"shards": str(root / "c/c-0.tar"), "extensions": {"text": "txt", "image": "jpg;nrm.jpg"}},
        ]
    }
    samples = list(wds.WebDataset(spec, seed=0))
    assert {tuple(sorted(k for k in s if not k.startswith("__"))) for s in samples} == {("text",), ("image", "text")}
    bad = {"dataset": [{"shards": str(root / "a/a-0.tar"), "extensions": "png"}]}
    with pytest.raises(SampleError, match=r"none of the fields \['png'\].*a0-00000"):
        list(wds.WebDataset(bad))
    with pytest.warns(UserWarning, match="none of the fields"):
        assert (
            list(wds.WebDataset(bad, empty_check=False, reading=wds.ShardReadOptions(handler=wds.warn_and_continue)))
            == []
        )


def test_pipe_urls_need_permission(three, tmp_path):
    root, keys = three
    spec = {"dataset": [{"shards": f"pipe:cat {root}/b/b-0.tar"}]}
    with pytest.raises(SpecError, match="allow_pipe=True"):
        wds.WebDataset(spec)
    assert sorted(s["__key__"] for s in wds.WebDataset.from_spec(spec, allow_pipe=True)) == keys["b"][:10]


def test_a_pattern_is_expanded_once_so_escaped_braces_never_make_a_command(three, tmp_path, monkeypatch):
    """Issue 66: ``\\{pipe:touch X #://,a.tar\\}`` passed the check for commands once expanded, and the shard list
    expanded it again into ``pipe:touch X #://``, which ran; a URL from a spec file is now never expanded again."""
    root, keys = three
    monkeypatch.chdir(tmp_path)
    mark = tmp_path / "MARK"
    spec = tmp_path / "mix.json"
    spec.write_text(json.dumps({"dataset": [{"shards": f"\\{{pipe:touch {mark} #://,a/a-0.tar\\}}"}]}))
    reading = wds.ShardReadOptions(handler=wds.ignore_and_continue)
    assert list(wds.WebDataset.from_spec(str(spec), reading=reading, empty_check=False)) == []
    assert not mark.exists()
    spec.write_text(json.dumps({"dataset": [{"shards": "a/a-{0..1}.tar"}]}))  # braces in data still expand, once
    assert sorted(s["__key__"] for s in wds.WebDataset(str(spec))) == sorted(keys["a"][:20])


def test_bad_specs_say_what_is_wrong(tmp_path):
    cases = [
        ({"dataset": [{"shard": "x.tar"}]}, "with 'shards'"),
        ({"dataset": [{"shards": "x.tar", "wieght": 2}]}, r"unknown keys \['wieght'\]"),
        ({"dataset": [{"shards": "x.tar", "scale": [3, 1]}]}, "scale must be"),
        ({"dataset": [{"shards": "x.tar", "choose": 0}]}, "choose must be an integer"),
        ({"dataset": [{"shards": "x.tar", "scale": 2, "choose": 1}]}, "one of scale, resample, choose"),
        ({"dataset": []}, "no sources"),
        ({"mix": []}, "unknown top-level keys"),
    ]
    for spec, message in cases:
        with pytest.raises(SpecError, match=message):
            wds.WebDataset(spec)
    (tmp_path / "broken.yaml").write_text("dataset: [shards: {")
    with pytest.raises(SpecError, match="not valid YAML"):
        wds.WebDataset(str(tmp_path / "broken.yaml"))
    with pytest.raises(SpecError, match="balanced"):
        wds.WebDataset.balanced({"dataset": [{"shards": "x.tar"}]}, how="pad")


def test_checkpoints_of_a_spec_mix(three):
    root, _ = three
    spec = write_yaml(root / "mix.yaml", SEED_STYLE)

    def make():
        return wds.WebDataset(spec, seed=5, shuffle=True).shuffle(6).to_tuple("__key__")

    oracle(make, step=7)


def test_a_spec_with_a_source_on_s3(s3, three):
    """The spec itself and one source on the local S3 server, each source with its own storage options."""
    import s3fs

    root, keys = three
    options = s3["team-a"].client_options("team-a")
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    for s in range(2):
        fs.put_file(str(root / "b" / f"b-{s}.tar"), f"team-a/mix/b/b-{s}.tar")
    spec = {
        "dataset": [
            {"shards": str(root / "a/a-{0..3}.tar"), "weight": 2},
            {"shards": "b/b-{0..1}.tar", "storage_options": options},  # relative to the spec's folder on S3
            {"shards": str(root / "c/c-{0..2}.tar"), "extensions": "txt"},
        ]
    }
    fs.pipe_file("team-a/mix/spec.json", json.dumps(spec).encode())
    ds = wds.WebDataset("s3://team-a/mix/spec.json", seed=3, storage={"s3://team-a/": options})
    got = sorted(s["__key__"] for s in ds)
    assert got == sorted(keys["a"] + keys["b"] + keys["c"])
