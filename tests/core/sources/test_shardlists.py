import numpy as np
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
            seen += keys_for(spec, rank, 2, worker, 2, monkeypatch, shuffle=shardshuffle)
    assert sorted(seen) == sorted(keys)


def test_unseeded_shard_shuffle_still_agrees_across_ranks(shards, monkeypatch):
    spec, paths, keys = shards
    seen = keys_for(spec, 0, 2, 0, 1, monkeypatch, shuffle=True)
    seen += keys_for(spec, 1, 2, 0, 1, monkeypatch, shuffle=True)
    assert sorted(seen) == sorted(keys)


def test_too_few_shards_for_workers_is_a_clear_error(shards, monkeypatch):
    spec, paths, keys = shards
    with pytest.raises(EmptyDatasetError, match="fewer shards than ranks x workers"):
        keys_for(paths[0], 0, 1, 1, 2, monkeypatch)


def test_shard_order_is_a_function_of_seed_and_epoch(shards):
    spec, paths, keys = shards
    a = wds.SimpleShardList(spec, seed=5, shuffle=True)
    assert a.order(0) == wds.SimpleShardList(spec, seed=5, shuffle=True).order(0)
    assert sorted(a.order(0)) == sorted(paths)
    assert any(a.order(0) != a.order(e) for e in range(1, 5))
    assert [x["url"] for x in wds.SimpleShardList(spec)] == paths


def test_resampled_depends_on_seed_rank_and_worker(shards, monkeypatch):
    spec, paths, keys = shards

    def draw(rank):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        return [s["__key__"] for s in wds.WebDataset.resampled(spec, seed=1).with_epoch(40)]

    assert draw(0) == draw(0)
    assert draw(0) != draw(1)
    assert len(draw(1)) == 40


def test_split_by_worker_used_directly_on_a_list(monkeypatch):
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "3")
    assert list(wds.split_by_worker(list(range(10)))) == [1, 4, 7]


def test_a_large_brace_range_is_shuffled_by_position_in_the_same_order(monkeypatch):
    from wds_core.io import shardnames

    spec = "s3://b/t-{00000..01999}.tar"
    as_list = wds.SimpleShardList(spec, seed=3)
    monkeypatch.setattr(shardnames, "LAZY_FROM", 0)
    lazy = wds.SimpleShardList(spec, seed=3)
    assert isinstance(as_list.urls, list) and isinstance(lazy.urls, shardnames.ShardNames)
    for epoch in (0, 1):
        assert list(lazy.order(epoch)) == as_list.order(epoch)  # random.shuffle draws by length only
    assert lazy.order(0)[5:8] == as_list.order(0)[5:8]
    assert [s["url"] for s in lazy] == as_list.order(0)
    unshuffled = wds.SimpleShardList(spec)
    monkeypatch.setattr(shardnames, "LAZY_FROM", 10**9)
    assert list(wds.SimpleShardList(spec).order(0)) == list(unshuffled.order(0))


def test_ten_million_shards_build_and_pickle_small():
    import pickle

    dataset = wds.WebDataset("s3://bucket/train-{0000000..9999999}.tar", seed=1, shuffle=True)
    assert len(dataset.pipeline[0]) == 10_000_000 and len(pickle.dumps(dataset)) < 10_000


SLOW = pytest.mark.slow


def shard_urls(source, rank, world, worker, workers, monkeypatch, limit=None):
    """The shard URLs one (rank, worker) reads from ``source`` (a shard list or a plain list of url dicts)."""
    import itertools

    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("WORKER", str(worker))
    monkeypatch.setenv("NUM_WORKERS", str(workers))
    pipeline = wds.DataPipeline(source, wds.split_by_node, wds.split_by_worker)
    return [s["url"] for s in itertools.islice(pipeline, limit)]


@pytest.mark.parametrize("seed", [None, 5])
def test_splits_jump_to_their_share_with_the_same_result(monkeypatch, seed):
    spec = "s3://b/t-{000..102}.tar"
    names = wds.SimpleShardList(spec, seed=seed).order(0)
    plain = [{"url": url} for url in names]  # a list source: the split walks every item
    everything = []
    for rank in range(3):
        for worker in range(2):
            jumped = shard_urls(wds.SimpleShardList(spec, seed=seed), rank, 3, worker, 2, monkeypatch)
            assert jumped == shard_urls(plain, rank, 3, worker, 2, monkeypatch)
            everything += jumped
    assert sorted(everything) == sorted(names)


def test_split_states_and_resume_are_unchanged_by_jumping(monkeypatch):
    from wds_core.testing import check_resume

    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "2")
    spec = "s3://b/t-{000..040}.tar"
    names = list(wds.SimpleShardList(spec, seed=2).order(0))

    def states(source):
        pipeline = wds.DataPipeline(source, wds.split_by_node, wds.split_by_worker)
        out = []
        for item in pipeline:
            worker = pipeline.state_dict()["chain"]
            node = worker.pop("parent")
            source = node.pop("parent")
            out.append((item["url"], worker, node, source))
        return out

    jumped = states(wds.SimpleShardList(spec, seed=2))
    walked = states([{"url": url} for url in names])
    assert [row[:3] for row in jumped] == [row[:3] for row in walked]  # the splits' states as before
    assert all(source["index"] == node["seen"] for _, _, node, source in jumped)
    check_resume(lambda: wds.DataPipeline(wds.SimpleShardList(spec, seed=2), wds.split_by_node, wds.split_by_worker))


@pytest.mark.parametrize(
    "spec, readers",
    [
        pytest.param("s3://bucket/train-{000000..999999}.tar", range(0, 512, 73), id="1M shards, 8 readers"),
        pytest.param("s3://bucket/train-{0000000..9999999}.tar", range(0, 512, 17), id="10M, 31 readers", marks=SLOW),
    ],
)
def test_millions_of_shards_over_512_readers(monkeypatch, spec, readers):
    """Issue 20: 10M shards, shuffled, split over 64 ranks x 8 workers: every shard read exactly once.

    Both check that the readers' starts are a permutation of 0..511, so that the shares (every 512th shard from
    each start) partition the order, and walk some readers' shares through the pipeline to see that each is its
    slice: the fast tier 8 readers of 1M shards, the slow tier 31 readers of 10M (about 19,500 shards each;
    drawing the order of 10M takes 4 s, walking all 512 shares 30 s more)."""
    names = wds.SimpleShardList(spec).urls
    for reader in (0, 1, 7, 8, 300, 511):
        rank, worker = divmod(reader, 8)
        got = shard_urls(wds.SimpleShardList(names), rank, 64, worker, 8, monkeypatch, limit=3)
        first = rank + 64 * worker  # the node's share is every 64th shard, the worker's every 8th of those
        assert got == [names[first], names[first + 512], names[first + 1024]]
    shuffled = wds.SimpleShardList(spec, seed=7)  # one list, as each reader's copy: the epoch's order drawn once
    order = shuffled.order(0)
    assert (np.bincount(np.frombuffer(order.positions, np.int32)) == 1).all()  # every shard once in the order
    assert sorted(reader // 8 + 64 * (reader % 8) for reader in range(512)) == list(range(512))  # starts: a cover
    for reader in readers:  # the readers' shares partition it: reader r reads every 512th from r's start
        start = reader // 8 + 64 * (reader % 8)
        assert shard_urls(shuffled, reader // 8, 64, reader % 8, 8, monkeypatch) == order[start::512]


def test_a_split_restored_as_another_share_is_refused(tmp_path, monkeypatch):
    """A reader's share of the shards is part of its state: restored as another reader of another count (more ranks
    or workers), it would read another share from the position of the first."""
    import wds_core
    from tests.conftest import make_samples, write_shard

    for s in range(4):
        write_shard(tmp_path / f"s{s}.tar", make_samples(f"s{s}-", 5))
    spec = str(tmp_path / "s{0..3}.tar")
    monkeypatch.setattr(wds_core.sources.shardlists, "worker_info", lambda: (0, 2))
    ds = wds_core.WebDataset(spec)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    monkeypatch.setattr(wds_core.sources.shardlists, "worker_info", lambda: (0, 3))
    again = wds_core.WebDataset(spec)
    with pytest.raises(wds_core.CheckpointError, match="reader 0 of 2.*reader 0 of 3"):
        again.load_state_dict(state)
        list(again)
