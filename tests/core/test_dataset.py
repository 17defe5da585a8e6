"""WebDataset: a few named options, a classmethod per construction, and what every epoch of it keeps."""

import inspect

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from wds_core import dropin
from wds_core.datasetplan import NATIVE_KEYWORDS


@pytest.fixture
def shards(tmp_path):
    paths = [write_shard(tmp_path / f"p-{i}.tar", make_samples(f"p{i}-", 5)) for i in range(4)]
    return str(tmp_path / "p-{0..3}.tar"), paths


def keys(dataset):
    return [s["__key__"] for s in dataset]


def test_the_native_signature_is_a_few_named_options():
    native = inspect.signature(wds_core.WebDataset.__init__).parameters
    named = [p for p in native.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert [p.name for p in named] == list(NATIVE_KEYWORDS) and len(named) <= 8
    for method in ("from_spec", "from_folder", "resampled", "balanced"):
        assert callable(getattr(wds_core.WebDataset, method))
    # the drop-in keeps webdataset's signature, positional order and all
    theirs = list(inspect.signature(dropin.WebDataset.__init__).parameters)
    assert theirs[:6] == ["self", "urls", "handler", "mode", "resampled", "repeat"] and "shardshuffle" in theirs


def test_each_construction_has_its_classmethod(shards, tmp_path):
    spec, paths = shards
    assert sorted(keys(wds_core.WebDataset.resampled(spec, seed=1).slice(30))) != []
    with pytest.warns(DeprecationWarning, match=r"resampled= -> WebDataset.resampled"):
        old = keys(wds_core.WebDataset(spec, resampled=True, seed=1).slice(30))
    assert old == keys(wds_core.WebDataset.resampled(spec, seed=1).slice(30))
    balanced = wds_core.WebDataset.balanced(spec, "drop", sample_counts={p: 5 for p in paths})
    assert len(balanced) == 20 and sorted(keys(balanced)) == sorted(keys(wds_core.WebDataset(spec)))
    mix = {"datasets": [{"shards": paths[:2]}, {"shards": [f"pipe:cat {paths[2]}"]}]}
    with pytest.raises(wds_core.SpecError, match="pipe"):
        list(wds_core.WebDataset.from_spec(mix))
    assert len(keys(wds_core.WebDataset.from_spec(mix, allow_pipe=True))) == 15
    folder = tmp_path / "incoming"
    folder.mkdir()
    write_shard(folder / "a.tar", make_samples("f-", 3))
    claimed = wds_core.WebDataset.from_folder(str(folder), mode="unlink")
    assert keys(claimed.slice(3)) == ["f-00000", "f-00001", "f-00002"]


def test_split_storage_and_reading_are_the_named_objects(shards, monkeypatch):
    spec, _ = shards
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert len(keys(wds_core.WebDataset(spec))) == 10  # split by node by default
    assert len(keys(wds_core.WebDataset(spec, split=False))) == 20
    assert len(keys(wds_core.WebDataset(spec, split=(None, wds_core.split_by_worker)))) == 20
    with pytest.raises(TypeError, match="split must be"):
        wds_core.WebDataset(spec, split="nodes")
    with pytest.raises(TypeError, match="reading must be a ShardReadOptions"):
        wds_core.WebDataset(spec, reading={"zero_copy": True})
    viewing = wds_core.WebDataset(spec, reading=wds_core.ShardReadOptions(zero_copy=True))
    assert viewing.pipeline[-1].options.zero_copy and "__local_path__" in next(iter(viewing))  # as WebDataset gives it
    plain = next(iter(wds_core.WebDataset(spec, reading=wds_core.ShardReadOptions(local_path=False))))
    assert "__local_path__" not in plain
    storage = wds_core.Storage(retry=wds_core.RetryPolicy(attempts=2))
    reader = wds_core.WebDataset(spec, storage=storage).pipeline[-1]
    assert isinstance(reader, wds_core.TarfileToSamples) and reader.options.storage is storage  # a Storage as it is
    reader = wds_core.WebDataset(spec, storage={"anon": True}).pipeline[-1]
    assert reader.options.storage.options == {"anon": True}  # storage options become one


def test_an_empty_epoch_says_whose_and_why(shards, monkeypatch):
    spec, paths = shards
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "6")
    with pytest.raises(wds_core.EmptyDatasetError, match=r"rank 5/6.*4 shards.*fewer shards than ranks"):
        list(wds_core.WebDataset(spec))
    assert keys(wds_core.WebDataset(spec, empty_check=False)) == []


def test_length_comes_from_the_counts_and_is_refused_without_them(shards):
    spec, paths = shards
    assert len(wds_core.WebDataset(spec, sample_counts={p: 5 for p in paths})) == 20
    with pytest.raises(TypeError, match="sample_counts="):
        len(wds_core.WebDataset(spec))
    assert len(wds_core.WebDataset(spec).with_length(7, silent=True)) == 7


def test_a_dataset_of_shards_is_the_source_and_refuses_what_does_not_apply(shards):
    _, paths = shards
    source = wds_core.SimpleShardList(paths[:2])
    assert keys(wds_core.WebDataset(source)) == [f"p{s}-{i:05d}" for s in range(2) for i in range(5)]
    with pytest.raises(wds_core.SpecError, match="yields its own shards"):
        wds_core.WebDataset.resampled(source)
    with pytest.raises(wds_core.SpecError, match="interleave"):
        wds_core.WebDataset({"datasets": [{"shards": paths}]}, interleave=2)


def test_wds_seed_seeds_an_unseeded_dataset(shards, monkeypatch):
    spec, _ = shards
    monkeypatch.setenv("WDS_SEED", "11")
    first = keys(wds_core.WebDataset(spec, shuffle=True))
    assert first == keys(wds_core.WebDataset(spec, shuffle=True, seed=11))
    assert first != keys(wds_core.WebDataset(spec, shuffle=True, seed=12)) or first != keys(
        wds_core.WebDataset(spec, shuffle=True, seed=13)
    )
