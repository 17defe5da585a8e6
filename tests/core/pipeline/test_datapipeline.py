import pickle
from random import randrange

import pytest

import wds_core as wds


def test_seed_pipeline_example_runs_unchanged(shards):
    spec, paths, keys = shards

    def get_patches(src):
        for sample in src:
            key, txt = sample
            for _ in range(2):
                yield (key + f"#{randrange(3)}", txt)

    dataset = wds.DataPipeline(
        wds.SimpleShardList(spec),
        wds.shuffle(100),
        wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.shuffle(1000),
        wds.to_tuple("__key__", "txt"),
        get_patches,
        wds.shuffle(10000),
        wds.batched(16),
    )
    batches = list(dataset)
    assert sum(len(b[0]) for b in batches) == 2 * len(keys)


def test_fluid_example_and_with_epoch(shards):
    spec, paths, keys = shards
    ds = wds.WebDataset(spec, seed=7, shuffle=True).shuffle(1000).to_tuple("txt", "cls").batched(16)
    assert sum(len(b[0]) for b in ds) == len(keys)
    resampled = wds.WebDataset.resampled(spec).shuffle(10).to_tuple("txt").with_epoch(250)
    assert len(list(resampled)) == 250 and len(list(resampled)) == 250
    assert len(list(wds.WebDataset(spec).with_epoch(30))) == 30
    assert len(list(wds.WebDataset(spec).repeat(3))) == 3 * len(keys)
    assert len(list(wds.WebDataset(spec).with_epoch(250))) == 250


def test_fluid_methods_return_new_pipelines(shards):
    spec, paths, keys = shards
    base = wds.WebDataset(spec)
    tupled = base.to_tuple("txt")
    assert isinstance(next(iter(base)), dict) and isinstance(next(iter(tupled)), tuple)


def test_with_length_is_picklable_and_len_without_it_is_a_type_error(shards):
    spec, paths, keys = shards
    ds = wds.WebDataset(spec).shuffle(10).with_length(100, silent=True)
    clone = pickle.loads(pickle.dumps(ds))
    assert len(clone) == 100 and len(list(clone)) == len(keys)
    with pytest.raises(TypeError):
        len(wds.WebDataset(spec))
    it = iter(ds)
    next(it)
    pickle.dumps(ds)  # an active iteration does not stop the recipe from being sent to workers


def test_state_before_iteration_starts_the_epoch(shards):
    spec, paths, keys = shards
    ds = wds.WebDataset(spec, seed=1, shuffle=True)
    ds.set_epoch(4)
    state = ds.state_dict()
    other = wds.WebDataset(spec, seed=1, shuffle=True)
    other.load_state_dict(state)
    ds.set_epoch(4)
    assert [s["__key__"] for s in other] == [s["__key__"] for s in ds]
