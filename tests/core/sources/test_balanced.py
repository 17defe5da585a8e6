"""Balanced epochs: equal sample counts for every rank and worker, each sample at most once."""

import os

import pytest

import wds_core as wds
from tests.conftest import counted_shards
from wds_core.sources.balanced import plan_parts

COUNTS = [7, 13, 5, 11, 1]  # 37 samples: no number of readers below 37 divides it


@pytest.fixture
def uneven(tmp_path):
    return counted_shards(tmp_path, COUNTS)


def parts(spec, policy, world, workers, epoch=0, monkeypatch=None):
    got = []
    for rank in range(world):
        for worker in range(workers):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(world))
            monkeypatch.setenv("WORKER", str(worker))
            monkeypatch.setenv("NUM_WORKERS", str(workers))
            ds = wds.WebDataset.balanced(spec, seed=3, how=policy, shuffle=True)
            ds.set_epoch(epoch)
            got.append([s["__key__"] for s in ds])
    return got


@pytest.mark.parametrize("world,workers", [(1, 1), (2, 1), (4, 2), (3, 3)])
def test_every_reader_gets_the_same_count(uneven, world, workers, monkeypatch):
    spec, keys = uneven
    readers = world * workers
    dropped = parts(spec, "drop", world, workers, monkeypatch=monkeypatch)
    assert {len(p) for p in dropped} == {len(keys) // readers}
    flat = [k for p in dropped for k in p]
    assert len(set(flat)) == len(flat) and set(flat) <= set(keys)  # at most once
    padded = parts(spec, "pad", world, workers, monkeypatch=monkeypatch)
    assert {len(p) for p in padded} == {-(-len(keys) // readers)}
    flat = [k for p in padded for k in p]
    assert set(flat) == set(keys)  # every sample, a few twice
    assert len(flat) - len(set(flat)) == readers * -(-len(keys) // readers) - len(keys)


def test_epochs_differ_and_dropped_samples_move(uneven, monkeypatch):
    spec, keys = uneven
    first = parts(spec, "drop", 4, 1, epoch=0, monkeypatch=monkeypatch)
    second = parts(spec, "drop", 4, 1, epoch=1, monkeypatch=monkeypatch)
    assert first != second
    missing = [set(keys) - {k for p in e for k in p} for e in (first, second)]
    assert all(len(m) == len(keys) % 4 for m in missing)


def test_plan_covers_the_sequence_end_to_end():
    counts = [3, 0, 4, 2]
    pieces = [plan_parts(counts, 3, r, "drop") for r in range(3)]
    assert pieces == [[(0, 0, 3)], [(2, 0, 3)], [(2, 3, 1), (3, 0, 2)]]
    assert plan_parts(counts, 2, 1, "pad") == [(2, 2, 2), (3, 0, 2), (0, 0, 1)]  # wraps to the epoch's start
    assert plan_parts([], 2, 0, "pad") == [] and plan_parts([0, 0], 2, 1, "drop") == []


@pytest.mark.frameworks
def test_balanced_with_dataloader_workers(uneven):
    torch = pytest.importorskip("torch")
    import wds_torch

    spec, keys = uneven
    dataset = wds_torch.WebDataset.balanced(spec, seed=5, how="pad", shuffle=True).to_tuple("__key__")
    loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None)
    got = [key for (key,) in loader]
    assert len(got) == 2 * 19 and set(got) == set(keys)


def test_balanced_refuses_resampling(uneven):
    with pytest.raises(wds.SpecError), pytest.warns(DeprecationWarning, match="resampled= ->"):
        wds.WebDataset(uneven[0], resampled=True, balanced="pad")
    with pytest.raises(wds.SpecError):
        wds.WebDataset.balanced(uneven[0], how="even")
    assert os.environ.get("RANK") is None


_ORDER = """
import sys, wds_core as wds
ds = wds.WebDataset(sys.argv[1], shardshuffle=True, seed=int(sys.argv[2]) if sys.argv[2] else None)
ds = ds.shuffle(20)
ds.set_epoch(int(sys.argv[3]))
print(",".join(s["__key__"] for s in ds))
"""


def _order(spec, seed, epoch, hashseed):
    import subprocess
    import sys

    env = dict(os.environ, PYTHONHASHSEED=str(hashseed))
    run = subprocess.run([sys.executable, "-c", _ORDER, spec, seed, str(epoch)], env=env, capture_output=True)
    assert run.returncode == 0, run.stderr.decode()
    return run.stdout.decode().strip().split(",")


@pytest.mark.slow
def test_order_is_a_function_of_seed_and_epoch_only(uneven):
    spec, keys = uneven
    first = _order(spec, "7", 0, hashseed=1)
    assert sorted(first) == sorted(keys)
    assert _order(spec, "7", 0, hashseed=2) == first  # hash randomisation and process do not matter
    assert _order(spec, "7", 1, hashseed=1) != first  # each epoch its own permutation
    assert _order(spec, "", 0, hashseed=1) != _order(spec, "", 0, hashseed=1)  # no seed: random, as expected


def manifest(directory, counts, overrides=None):
    """A wids descriptor next to the shards listing each one's sample count."""
    import json

    overrides = overrides or {}
    entries = [{"url": f"u-{s}.tar", "nsamples": overrides.get(s, n)} for s, n in enumerate(counts)]
    path = directory / "dataset.json"
    path.write_text(json.dumps({"wids_version": 1, "shardlist": [e for e in entries if e["nsamples"] != -1]}))
    return str(path)


def test_counts_from_a_manifest_index_only_the_readers_own_shards(tmp_path, monkeypatch):
    from wds_core.sources import balanced

    spec, keys = counted_shards(tmp_path, COUNTS)
    path = manifest(tmp_path, COUNTS)
    indexed = []
    real = balanced.index_shard

    def counting(url, *args, **kw):
        indexed.append(url)
        return real(url, *args, **kw)

    monkeypatch.setattr(balanced, "index_shard", counting)
    expected = parts(spec, "pad", 2, 2, monkeypatch=monkeypatch)
    assert len(indexed) == 5  # without counts: every shard is indexed (once per process here)
    got = []
    for rank in range(2):
        for worker in range(2):
            balanced._INDEXES.clear()  # as in a reader of its own
            indexed.clear()
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORKER", str(worker))
            ds = wds.WebDataset.balanced(spec, seed=3, sample_counts=path, how="pad", shuffle=True)
            got.append([s["__key__"] for s in ds])
            split = ds.pipeline[1]
            mine = {task["url"] for task in split.build(ds.pipeline[0](None), wds.state.RunContext())._planned()[1]}
            assert set(indexed) == mine and len(mine) < 5  # its own shards, not all five
    assert got == expected
    with_dict = wds.WebDataset.balanced(
        spec, seed=3, sample_counts=dict(zip(wds.SimpleShardList(spec).urls, COUNTS)), how="pad", shuffle=True
    )
    assert [s["__key__"] for s in with_dict] == expected[-1]


def test_manifest_errors_name_the_shard(tmp_path, monkeypatch):
    spec, keys = counted_shards(tmp_path, COUNTS)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("WORKER", "0")
    monkeypatch.setenv("NUM_WORKERS", "1")
    missing = manifest(tmp_path, COUNTS, overrides={3: -1})
    with pytest.raises(wds.SpecError, match=r"no sample count for 1 of the 5 shards, e\.g\. .*u-3\.tar"):
        list(wds.WebDataset.balanced(spec, sample_counts=missing, how="pad"))
    wrong = manifest(tmp_path, COUNTS, overrides={0: 8})
    with pytest.raises(wds.SpecError, match=r"u-0\.tar holds 7 samples; .*dataset\.json says 8"):
        list(wds.WebDataset.balanced(spec, sample_counts=wrong, how="pad"))
    assert len(wds.WebDataset(spec, sample_counts=wrong)) == sum(COUNTS) + 1  # without balanced: len() (the 8)
    with pytest.raises(wds.SpecError, match="a resampled stream has no length"):
        with pytest.warns(DeprecationWarning, match="resampled= ->"):
            wds.WebDataset(spec, resampled=True, sample_counts=wrong)


def test_a_task_cut_short_by_its_shard_is_an_error(tmp_path):
    spec, keys = counted_shards(tmp_path, [7])
    shard = str(tmp_path / "u-0.tar")
    exact = wds.DataPipeline([{"url": shard, "offset": 0, "count": 7}], wds.tarfile_to_samples())
    assert [s["__key__"] for s in exact] == keys
    short = wds.DataPipeline([{"url": shard, "offset": 0, "count": 10}], wds.tarfile_to_samples())
    with pytest.raises(wds.TruncatedShardError, match=r"ended 3 samples before the count.*u-0\.tar"):
        list(short)
