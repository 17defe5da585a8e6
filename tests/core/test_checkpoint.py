"""The shared checkpoint oracle (wds_core.testing): stop at every step k, restore into a fresh pipeline, compare.

Every stateful stage is listed in PIPELINES; a new stage joins by adding a factory here.
"""

import json
import random

import pytest

import wds_core as wds
from wds_core import CheckpointError, dropin
from wds_core.sources.reader import shard_digest
from wds_core.testing import check_resume, item_key


def run_all(make):
    return [item_key(x) for x in make()]


def oracle(make, step=1):
    """For each k: take k items, checkpoint (through JSON), restore into a fresh pipeline, compare."""
    return check_resume(make, step=step)


def pipelines(spec):
    return {
        "plain": lambda: wds.WebDataset(spec),
        "shardshuffle": lambda: wds.WebDataset(spec, seed=3, shuffle=True),
        "shuffle": lambda: wds.WebDataset(spec, seed=3, shuffle=True).shuffle(17, initial=5),
        "shuffle-big-buffer": lambda: wds.WebDataset(spec, seed=1).shuffle(1000),
        "two-shuffles": lambda: wds.WebDataset(spec, seed=4).shuffle(10).map(lambda s: s).shuffle(7),
        "batched": lambda: wds.WebDataset(spec, seed=5).shuffle(9).to_tuple("__key__", "cls").batched(7),
        "read-ahead-batched": lambda: (
            wds.WebDataset(spec, seed=5)
            .shuffle(9)
            .to_tuple("__key__", "cls")
            .compose(wds.stages.batching.ReadAheadBatch(7))
        ),
        "webdataset-tree-batched": lambda: dropin.DataPipeline(
            dropin.SimpleShardList(spec), dropin.tarfile_to_samples(), dropin.batched(4, partial=False), seed=3
        ),
        "unbatched": lambda: wds.WebDataset(spec, seed=6).to_tuple("__key__", "txt").batched(6).unbatched(),
        "slice": lambda: wds.WebDataset(spec).slice(3, 80, 2),
        "with_epoch": lambda: wds.WebDataset(spec, seed=8).shuffle(5).with_epoch(130),
        "resampled": lambda: wds.WebDataset.resampled(spec, seed=9).with_epoch(60),
        "repeat": lambda: wds.WebDataset(spec, seed=2, shuffle=True).repeat(2),
        "pipeline": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec, seed=11),
            wds.split_by_worker,
            wds.tarfile_to_samples(),
            wds.shuffle(20),
            wds.select(lambda s: s["__key__"][-1] != "3"),
            wds.to_tuple("__key__", "cls"),
            wds.batched(4, partial=False),
            seed=11,
        ),
        "list-source": lambda: wds.DataPipeline(list(range(50)), wds.shuffle(8), wds.batched(3), seed=1),
        "decode": lambda: wds.WebDataset(spec, seed=12).shuffle(10).decode(only="txt"),
        "decode-threads": lambda: wds.WebDataset(spec, seed=13).shuffle(10).decode(only="txt", num_threads=2),
        "decode-threads-shuffle": lambda: wds.WebDataset(spec, seed=17).decode(only="txt", num_threads=2).shuffle(8),
        "random-mix": lambda: wds.RandomMix(
            [wds.WebDataset(spec, seed=18).shuffle(5), wds.WebDataset(spec, seed=19, shuffle=True)],
            probs=[2, 1],
            seed=20,
            longest=True,
        ).batched(3, collation_fn=list),
        "round-robin": lambda: wds.RoundRobin([wds.WebDataset(spec, seed=21), list(range(30))]),
        "balanced-pad": lambda: wds.WebDataset.balanced(spec, seed=15, how="pad", shuffle=True).shuffle(6),
        "balanced-drop-repeat": lambda: wds.WebDataset.balanced(spec, seed=16, how="drop").repeat(2),
        "decode-threads-batched": lambda: (
            wds.WebDataset(spec, seed=14).decode(only="txt", num_threads=3).to_tuple("__key__", "txt").batched(5)
        ),
        "rng-shuffle": lambda: wds.WebDataset(spec).shuffle(13, initial=4, rng=random.Random(3)),
        "detshuffle": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec), wds.detshuffle(3, seed=2), wds.tarfile_to_samples(), wds.detshuffle(9, seed=1)
        ),
        "rsample-resampled": lambda: wds.WebDataset(spec, seed=22).rsample(0.5).compose(wds.resampled(40)),
        "field-stages": lambda: (
            wds.WebDataset(spec, seed=23)
            .rename_keys(key="__key__", label="cls", keep_unselected=True)
            .compose(wds.non_empty)
            .extract_keys("key", "label")
        ),
        "mock": lambda: wds.MockDataset({"__key__": "same"}, 20).rsample(0.7, seed=1),
        "interleave": lambda: wds.WebDataset(spec, seed=24, interleave=3, shuffle=True),
        "interleave-shuffle": lambda: wds.WebDataset(spec, seed=25, interleave=2, shuffle=True).shuffle(7),
        "interleave-pipeline": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec, seed=26), wds.split_by_worker, wds.InterleaveShards(8), wds.batched(5), seed=26
        ),
        "interleave-balanced": lambda: wds.WebDataset.balanced(spec, seed=27, interleave=2, how="pad").repeat(2),
    }


@pytest.mark.parametrize("name", list(pipelines("x")))
def test_resume_at_every_step(name, shards):
    spec, paths, keys = shards
    make = pipelines(spec)[name]
    step = 1 if name in ("shuffle", "batched", "read-ahead-batched", "list-source", "pipeline", "decode-threads") else 7
    oracle(make, step)


def test_seeded_runs_are_reproducible_and_epochs_differ(shards):
    spec, paths, keys = shards
    make = lambda: wds.WebDataset(spec, seed=42, shuffle=True).shuffle(30)  # noqa: E731
    a, b = make(), make()
    first = [s["__key__"] for s in a]
    assert first == [s["__key__"] for s in b]
    assert sorted(first) == sorted(keys)
    second = [s["__key__"] for s in a]
    assert second != first and sorted(second) == sorted(keys)
    b.set_epoch(1)
    assert [s["__key__"] for s in b] == second


def test_plain_generator_stage_cannot_checkpoint(shards):
    spec, paths, keys = shards

    def my_stage(src):
        yield from src

    ds = wds.WebDataset(spec).compose(my_stage).map(lambda s: s)
    it = iter(ds)
    next(it)
    with pytest.raises(CheckpointError, match="my_stage"):
        ds.state_dict()


def test_restoring_into_a_different_pipeline_is_refused(shards):
    spec, paths, keys = shards
    ds = wds.WebDataset(spec).shuffle(10)
    next(iter(ds))
    state = ds.state_dict()
    with pytest.raises(CheckpointError, match="different pipeline"):
        wds.WebDataset(spec).batched(3).load_state_dict(state)


def test_restore_seeks_inside_the_shard(shards):
    spec, paths, keys = shards
    ds = wds.WebDataset(spec)
    it = iter(ds)
    for _ in range(30):
        next(it)
    chain = ds.state_dict()["chain"]
    assert chain["shards"] == [shard_digest(paths[1])] and chain["offset"] == 5 * 2048
    assert paths[1] not in json.dumps(chain)  # a state names positions, never places


@pytest.mark.parametrize("fmt", ["cbor", "msgpack"])
def test_record_streams_resume_at_every_step(tmp_path, fmt):
    writer = wds.CborsWriter if fmt == "cbor" else wds.MsgpacksWriter
    stage = wds.cbors_to_samples if fmt == "cbor" else wds.msgpacks_to_samples
    paths = [str(tmp_path / f"r{s}.{fmt}s") for s in range(3)]
    for s, path in enumerate(paths):
        with writer(path) as sink:
            for i in range(12):
                sink.write({"__key__": f"{s}-{i}", "v": "x" * i})
    oracle(lambda: wds.DataPipeline(wds.SimpleShardList(paths, seed=5, shuffle=True), stage(), wds.shuffle(5), seed=5))


def test_read_ahead_batching_resumes_from_any_of_its_snapshots(shards, monkeypatch):
    """The drop-in's batching (issue 44) checkpoints the item it read ahead as its upstream's state at a snapshot
    and the items to skip since; with a snapshot every 8 items, a run of a few hundred passes through many."""
    monkeypatch.setattr(wds.stages.batching, "_READ_AHEAD_SNAPSHOT_EVERY", 8)
    spec, _, _ = shards
    oracle(
        lambda: (
            wds.WebDataset(spec, seed=2).shuffle(6).to_tuple("__key__").compose(wds.stages.batching.ReadAheadBatch(3))
        )
    )
    oracle(lambda: dropin.WebDataset(spec, shardshuffle=False).to_tuple("__key__").batched(5, partial=False))


@pytest.mark.parametrize(
    "make, taken",
    [
        (lambda spec: wds.WebDataset(spec).shuffle(40, seed=1), 45),
        (lambda spec: wds.WebDataset(spec), 45),
        (lambda spec: wds.WebDataset(spec).batched(7), 7),
        (lambda spec: wds.WebDataset(spec).decode(only="txt", num_threads=2), 45),
        (lambda spec: wds.WebDataset(spec).batched(7).unbatched().shuffle(20, seed=2), 45),
    ],
    ids=["shuffle", "reader", "batched", "decode-threads", "unbatched"],
)
def test_resuming_after_the_shards_shrank_is_a_checkpoint_error_naming_the_shard(tmp_path, make, taken):
    """Issue 56, case 10: a checkpoint of .shuffle(40) restored after the shards were rewritten with fewer samples
    failed with `RuntimeError: generator raised StopIteration` (and a batch or decode window came back short,
    silently)."""
    from tests.conftest import make_samples, write_shard

    spec = str(tmp_path / "s{0..2}.tar")
    for s in range(3):
        write_shard(tmp_path / f"s{s}.tar", make_samples(f"s{s}-", 30))
    ds = make(spec)
    it = iter(ds)
    for _ in range(taken):  # into the second shard
        next(it)
    state = ds.state_dict()
    for s in range(3):
        write_shard(tmp_path / f"s{s}.tar", make_samples(f"s{s}-", 10))
    again = make(spec)
    again.load_state_dict(state)
    with pytest.raises(CheckpointError, match="changed since the checkpoint") as failed:
        list(again)
    assert failed.value.url is not None and failed.value.url.startswith(str(tmp_path / "s"))
