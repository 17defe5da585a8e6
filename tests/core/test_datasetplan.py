"""The native WebDataset's few named options, its classmethods, and webdataset's keywords translated with a warning."""

import inspect
import warnings

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from wds_core import dropin
from wds_core.datasetplan import NATIVE_KEYWORDS, NATIVE_SPELLING, webdataset_plan


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


def test_native_code_with_webdatasets_keywords_works_and_is_told_the_new_spelling(shards):
    spec, _ = shards
    with pytest.warns(DeprecationWarning, match=r"shardshuffle= -> shuffle=.*storage_options= -> storage="):
        old = keys(wds_core.WebDataset(spec, shardshuffle=True, seed=4, storage_options={}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = keys(wds_core.WebDataset(spec, shuffle=True, seed=4, storage={}))
        assert keys(dropin.WebDataset(spec, shardshuffle=True, seed=4, storage_options={})) == new  # no warning
    assert old == new and sorted(new) != new


def test_every_webdataset_keyword_has_a_native_spelling():
    real = pytest.importorskip("webdataset")
    theirs = set(inspect.signature(real.WebDataset.__init__).parameters) - {"self", "urls", "seed", "empty_check"}
    assert theirs <= set(NATIVE_SPELLING)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shard_shuffle'"):
        wds_core.WebDataset("a.tar", shard_shuffle=True)
    with pytest.raises(TypeError, match="both storage= and storage_options="):
        webdataset_plan("a.tar", {"storage": {}}, {"storage_options": {}})


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
    assert viewing.pipeline[-1].zero_copy and "__local_path__" in next(iter(viewing))  # as WebDataset gives it
    plain = next(iter(wds_core.WebDataset(spec, reading=wds_core.ShardReadOptions(local_path=False))))
    assert "__local_path__" not in plain
    storage = wds_core.Storage(retry=wds_core.RetryPolicy(attempts=2))
    reader = wds_core.WebDataset(spec, storage=storage).pipeline[-1]
    assert isinstance(reader, wds_core.TarfileToSamples) and reader.storage is storage  # a Storage as it is
    reader = wds_core.WebDataset(spec, storage={"anon": True}).pipeline[-1]
    assert reader.storage.options == {"anon": True}  # storage options become one
