"""webdataset.shardlists over wds: spec expansion with ${VAR}, shard sources, filters, splitters."""

import os
import time

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from wds_core.dropin import shardlists as sl


def test_expand_urls_substitutes_wds_variables(monkeypatch):
    monkeypatch.setenv("WDS_ROOT", "/data/${SPLIT}")
    monkeypatch.setenv("WDS_SPLIT", "train")
    assert sl.expand_urls("${ROOT}/s-{0..1}.tar::x.tar") == ["/data/train/s-0.tar", "/data/train/s-1.tar", "x.tar"]
    assert sl.envsubst("${SPLIT}-a") == "train-a"
    with pytest.raises(wds_core.SpecError, match="WDS_NOPE"):
        sl.expand_urls("${NOPE}/x.tar")
    assert sl.expand_source(iter(["a", "b", "c"]), max_urls=2) == ["a", "b"]


def test_resampled_shards_takes_webdataset_arguments():
    urls = [f"s{i}" for i in range(10)]
    positional = sl.ResampledShards(urls, 5, 3, None, True, 100, True)  # webdataset's 7 positional arguments
    assert len(list(positional)) == 5
    fixed = sl.ResampledShards(urls, 20, worker_seed=lambda: 7)
    again = sl.ResampledShards(urls, 20, worker_seed=lambda: 7)
    other = sl.ResampledShards(urls, 20, worker_seed=lambda: 8)

    def draw(recipe):
        return [x["url"] for x in wds_core.DataPipeline(recipe, seed=1)]

    assert draw(fixed) == draw(again) != draw(other)  # worker_seed is honoured
    a = wds_core.DataPipeline(sl.ResampledShards(urls, 20, deterministic=True))
    b = wds_core.DataPipeline(sl.ResampledShards(urls, 20, deterministic=True))
    assert list(a) == list(b)  # deterministic without a seed: the same in every run
    assert list(sl.ResampledShards([], empty_check=False)) == []
    with pytest.raises(wds_core.EmptyDatasetError):
        sl.ResampledShards([])
    assert sl.ResampledShardList is sl.ResampledShards


def test_non_empty_resampled_and_shardspec(tmp_path):
    with pytest.raises(wds_core.EmptyDatasetError, match="non_empty"):
        list(wds_core.DataPipeline([], sl.non_empty))
    assert list(wds_core.DataPipeline([1, 2], sl.non_empty)) == [1, 2]
    drawn = list(wds_core.DataPipeline(list("abc"), sl.resampled(30), seed=2))
    assert len(drawn) == 30 and set(drawn) <= set("abc")
    assert list(wds_core.DataPipeline(list("abc"), sl.resampled(30), seed=2)) == drawn
    assert isinstance(sl.shardspec("x-{0..3}.tar"), wds_core.SimpleShardList)
    spec = tmp_path / "m.yaml"
    spec.write_text("datasets:\n  - shards: a-{0..3}.tar\n    perepoch: 2\n  - shards: b-{0..1}.tar\n")
    multi = sl.shardspec(str(spec))
    assert isinstance(multi, wds_core.MultiShardSample)
    assert len(multi.sample()) == 4 and len(multi.get_shards_for_epoch()) == 4  # webdataset's methods


def test_multi_shard_sample_per_epoch(tmp_path):
    spec = {
        "prefix": str(tmp_path) + "/",
        "datasets": [
            {"shards": "a-{0..9}.tar", "choose": 3},
            {"shards": "b-{0..1}.tar", "resample": 4},
            {"shards": "c.tar"},
        ],
    }
    pipeline = wds_core.DataPipeline(wds_core.MultiShardSample(spec), seed=5)
    epochs = [[x["url"].rsplit("/", 1)[1] for x in pipeline] for _ in range(3)]
    for urls in epochs:
        assert len(urls) == 8 and urls.count("c.tar") == 1
        assert len({u for u in urls if u.startswith("a-")}) == 3
        assert sum(u.startswith("b-") for u in urls) == 4
    assert epochs[0] != epochs[1]
    again = wds_core.DataPipeline(wds_core.MultiShardSample(spec), seed=5)
    assert [x["url"].rsplit("/", 1)[1] for x in again] == epochs[0]
    from tests.core.test_checkpoint import oracle

    oracle(lambda: wds_core.DataPipeline(wds_core.MultiShardSample(spec), wds_core.map(lambda x: x["url"]), seed=5))
    with pytest.raises(wds_core.SpecError, match="WebDataset"):
        wds_core.MultiShardSample({"datasets": [{"shards": "x.tar", "scale": 2}]})


def test_directory_shard_list_claims_and_recycles(tmp_path):
    folder = tmp_path / "incoming"
    folder.mkdir()
    for s in range(3):
        write_shard(folder / f"s{s}.tar", make_samples(f"d{s}-", 2))
    dataset = wds_core.WebDataset(str(folder) + "/")  # a folder URL reads as webdataset's does
    stream = iter(dataset)
    first = next(stream)
    claimed = [n for n in os.listdir(folder) if n.endswith(f"._{os.getpid()}_")]
    assert len(claimed) == 1 and first["__url__"].endswith(claimed[0])
    dataset.close()  # (it would wait for new shards forever) the claim stays, as in webdataset
    os.rename(folder / claimed[0], folder / claimed[0].rsplit("._", 1)[0])
    keep = wds_core.DataPipeline(
        wds_core.DirectoryShardList(str(folder) + "/", poll=None, mode="keep"), wds_core.tarfile_to_samples()
    )
    keys = [s["__key__"] for s in keep]
    assert sorted(keys) == sorted(f"d{s}-{i:05d}" for s in range(3) for i in range(2))
    assert sorted(os.listdir(folder)) == ["s0.tar._done_", "s1.tar._done_", "s2.tar._done_"]

    write_shard(folder / "t.tar", make_samples("t-", 1))
    os.rename(folder / "t.tar", folder / "t.tar._999999999_")  # a claim by a process that no longer runs
    lister = wds_core.DirectoryShardList(str(folder) + "/", poll=None, mode="resample")
    lister.release_dead_claims()
    assert "t.tar" in os.listdir(folder)
    start = time.time()
    assert len(list(wds_core.DataPipeline(lister, wds_core.slice(5)))) == 5  # resample: shards come back
    assert time.time() - start < 30
    with pytest.raises(wds_core.SpecError):
        wds_core.DirectoryShardList(str(tmp_path / "missing") + "/")
    with pytest.raises(wds_core.SpecError, match="mode"):
        wds_core.dropin.WebDataset(str(tmp_path / "x-{0..1}.tar"), mode="sometimes")
