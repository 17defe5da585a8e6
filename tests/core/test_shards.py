import pytest

import wds_core as wds
from wds_core import EmptyDatasetError


def keys_for(spec, rank, world, worker, workers, monkeypatch, **kw):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("WORKER", str(worker))
    monkeypatch.setenv("NUM_WORKERS", str(workers))
    ds = wds.WebDataset(spec, **kw)
    ds.set_epoch(3)
    return [s["__key__"] for s in ds]


@pytest.mark.parametrize("shardshuffle", [False, True])
def test_ranks_and_workers_partition_the_shards(shards, monkeypatch, shardshuffle):
    spec, paths, keys = shards
    seen = []
    for rank in range(2):
        for worker in range(2):
            seen += keys_for(spec, rank, 2, worker, 2, monkeypatch, shardshuffle=shardshuffle)
    assert sorted(seen) == sorted(keys)


def test_unseeded_shard_shuffle_still_agrees_across_ranks(shards, monkeypatch):
    spec, paths, keys = shards
    seen = keys_for(spec, 0, 2, 0, 1, monkeypatch, shardshuffle=True)
    seen += keys_for(spec, 1, 2, 0, 1, monkeypatch, shardshuffle=True)
    assert sorted(seen) == sorted(keys)


def test_too_few_shards_for_workers_is_a_clear_error(shards, monkeypatch):
    spec, paths, keys = shards
    with pytest.raises(EmptyDatasetError, match="fewer shards than ranks x workers"):
        keys_for(paths[0], 0, 1, 1, 2, monkeypatch)


def test_shard_order_is_a_function_of_seed_and_epoch(shards):
    spec, paths, keys = shards
    a = wds.SimpleShardList(spec, seed=5)
    assert a.order(0) == wds.SimpleShardList(spec, seed=5).order(0)
    assert sorted(a.order(0)) == sorted(paths)
    assert any(a.order(0) != a.order(e) for e in range(1, 5))
    assert [x["url"] for x in wds.SimpleShardList(spec)] == paths


def test_resampled_depends_on_seed_rank_and_worker(shards, monkeypatch):
    spec, paths, keys = shards

    def draw(rank):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        return [s["__key__"] for s in wds.WebDataset(spec, resampled=True, seed=1).with_epoch(40)]

    assert draw(0) == draw(0)
    assert draw(0) != draw(1)
    assert len(draw(1)) == 40


def test_split_by_worker_used_directly_on_a_list(monkeypatch):
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "3")
    assert list(wds.split_by_worker(list(range(10)))) == [1, 4, 7]
