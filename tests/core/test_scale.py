"""Many shards read from a store that counts requests (tests/synthstore.py)."""

import contextlib
import itertools
import re

import pytest

import wds_core as wds
from tests import synthstore
from wds_core.sources import balanced

NSHARDS, RANKS, WORKERS = 200, 4, 2
SPEC = f"synth://bucket/shard-{{000000..{NSHARDS - 1:06d}}}.tar"


@contextlib.contextmanager
def installed(**kw):
    try:
        yield synthstore.install(NSHARDS, **kw)
    finally:
        from fsspec.registry import _registry

        _registry.pop("synth", None)


@pytest.fixture
def store():
    with installed() as fake:
        yield fake


def first_sample(monkeypatch, rank, worker, **kw):
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(RANKS))
    monkeypatch.setenv("WORKER", str(worker))
    monkeypatch.setenv("NUM_WORKERS", str(WORKERS))
    balanced._INDEXES.clear()  # each reader is a process of its own
    synthstore.SynthStore.requests.clear()
    dataset = wds.WebDataset.balanced(SPEC, seed=1, **kw, how="pad", shuffle=True)
    return next(iter(dataset)), dict(synthstore.SynthStore.requests)


def test_balanced_readers_with_counts_touch_only_their_first_shard(store, monkeypatch):
    for rank, worker in itertools.product(range(RANKS), range(WORKERS)):
        sample, requests = first_sample(monkeypatch, rank, worker, sample_counts="synth://bucket/dataset.json")
        touched = {path for _, path in requests}
        shard = sample["__url__"].split("://", 1)[1]
        assert touched == {"bucket/dataset.json", shard, shard + ".idx"}, touched
        assert requests["cat_file", "bucket/dataset.json"] == 1
        # the shard: its size, the missing sidecar, one ranged read for the header walk, one for the sample
        assert sum(requests.values()) <= 6, requests


def test_file_sizes_in_the_descriptor_save_the_size_requests(monkeypatch):
    with installed(filesizes=True):
        for rank, worker in ((0, 0), (3, 1)):
            sample, requests = first_sample(monkeypatch, rank, worker, sample_counts="synth://bucket/dataset.json")
            assert not [key for key in requests if key[0] == "info"] and sum(requests.values()) == 4, requests


def test_with_sidecars_and_sizes_a_reader_makes_three_requests_before_its_first_sample(monkeypatch):
    """Issue 20's target, 2 + the shards of the first piece: the descriptor, the shard's sidecar, its sample."""
    with installed(filesizes=True, sidecars=True):
        for rank, worker in itertools.product(range(RANKS), range(WORKERS)):
            sample, requests = first_sample(monkeypatch, rank, worker, sample_counts="synth://bucket/dataset.json")
            shard = sample["__url__"].split("://", 1)[1]
            expected = {("cat_file", "bucket/dataset.json"), ("cat_file", shard + ".idx"), ("cat_file", shard)}
            assert set(requests) == expected and sum(requests.values()) == 3, requests


def test_without_counts_every_reader_indexes_every_shard(store, monkeypatch):
    sample, requests = first_sample(monkeypatch, 1, 1)
    shards = {path for _, path in requests if path.endswith(".tar")}
    assert len(shards) == NSHARDS and sum(requests.values()) >= 3 * NSHARDS


def test_every_sample_once_across_readers_with_counts(store, monkeypatch):
    keys = []
    for rank, worker in itertools.product(range(RANKS), range(WORKERS)):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(RANKS))
        monkeypatch.setenv("WORKER", str(worker))
        monkeypatch.setenv("NUM_WORKERS", str(WORKERS))
        dataset = wds.WebDataset.balanced(
            SPEC, seed=1, sample_counts="synth://bucket/dataset.json", how="pad", shuffle=True
        )
        keys += [s["__key__"] for s in dataset]
    assert sorted(keys) == sorted(f"s{s:06d}-{i}" for s in range(NSHARDS) for i in range(synthstore.SAMPLES))


def test_a_counts_file_gives_the_same_epoch_with_three_requests(monkeypatch):
    """Counts by spec position (wds_core.sources.counts): the same samples as the descriptor, no shard named but
    ours."""
    with installed(filesizes=True, sidecars=True):
        for rank, worker in itertools.product(range(RANKS), range(WORKERS)):
            by_name, _ = first_sample(monkeypatch, rank, worker, sample_counts="synth://bucket/dataset.json")
            sample, requests = first_sample(
                monkeypatch, rank, worker, sample_counts="synth://bucket/dataset.counts.npz"
            )
            shard = sample["__url__"].split("://", 1)[1]
            expected = {("cat_file", "bucket/dataset.counts.npz"), ("cat_file", shard + ".idx"), ("cat_file", shard)}
            assert set(requests) == expected and sum(requests.values()) == 3, requests
            assert sample["__key__"] == by_name["__key__"]
        monkeypatch.setenv("RANK", "1")
        keys = {}
        for counts in ("synth://bucket/dataset.json", "synth://bucket/dataset.counts.npz"):
            dataset = wds.WebDataset.balanced(SPEC, seed=3, sample_counts=counts, how="drop", shuffle=True)
            keys[counts] = [s["__key__"] for s in dataset]
        assert keys["synth://bucket/dataset.json"] == keys["synth://bucket/dataset.counts.npz"]


def test_a_counts_file_refuses_another_spec(store, monkeypatch):
    from wds_core.errors import SpecError

    monkeypatch.setenv("RANK", "0")
    shorter = f"synth://bucket/shard-{{000000..{NSHARDS - 2:06d}}}.tar"
    reordered = f"synth://bucket/shard-{{{NSHARDS - 1:06d}..000000}}.tar"
    for spec, message in ((shorter, f"counts {NSHARDS} shards; this dataset names {NSHARDS - 1}"),
                          (reordered, "has shard 0 as synth://bucket/shard-000000.tar")):  # fmt: skip
        dataset = wds.WebDataset.balanced(spec, sample_counts="synth://bucket/dataset.counts.npz", how="pad")
        with pytest.raises(SpecError, match=re.escape(message)):
            next(iter(dataset))
