import json
import subprocess
import sys
import time

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import wds_jax  # noqa: E402
from tests.conftest import array_shards  # noqa: E402
from wds_core.errors import CheckpointError, SpecError  # noqa: E402


@pytest.fixture
def spec(tmp_path):
    """6 shards x 17 samples: a 2x3 float32 array whose values encode the sample, and a class."""
    return array_shards(tmp_path, "d", 6, 17, (2, 3), classes=3)


def make(spec):
    return wds_jax.WebDataset(spec, seed=2, shuffle=True).shuffle(9).decode().to_tuple("npy", "cls")


def ids(batches):
    return [int(v) for images, *_ in batches for v in np.asarray(images)[:, 0, 0]]


def test_fixed_size_numpy_batches_and_remainders(spec):
    batches = list(wds_jax.BatchIterator(make(spec), 8))
    assert len(batches) == 102 // 8
    images, labels = batches[0]
    assert images.shape == (8, 2, 3) and images.dtype == np.float32 and labels.shape == (8,)
    partial = list(wds_jax.BatchIterator(make(spec), 8, remainder="partial"))
    assert [len(b[1]) for b in partial][-1] == 102 % 8 and len(ids(partial)) == 102
    padded = list(wds_jax.BatchIterator(make(spec), 8, remainder="pad"))
    assert all(b[0].shape == (8, 2, 3) for b in padded)
    images, labels, mask = padded[-1]
    assert mask.tolist() == [True] * (102 % 8) + [False] * (8 - 102 % 8)
    assert not images[~mask].any()
    assert sorted(v for b in padded for v, m in zip(b[0][:, 0, 0], b[2]) if m) == sorted(ids(partial))


def test_workers_give_every_sample_once(spec):
    got = ids(wds_jax.BatchIterator(make(spec), 5, num_workers=2, remainder="partial"))
    assert sorted(got) == sorted(s * 100 + i for s in range(6) for i in range(17))


def test_process_split(spec):
    halves = [ids(wds_jax.BatchIterator(make(spec), 1, process_index=p, process_count=2)) for p in range(2)]
    assert not set(halves[0]) & set(halves[1]) and len(halves[0]) + len(halves[1]) == 102


def test_sharded_global_arrays(spec):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    batches = list(wds_jax.BatchIterator(make(spec), 6, sharding=sharding, prefetch=2))
    images, labels = batches[0]
    assert isinstance(images, jax.Array) and images.sharding == sharding and images.shape == (6, 2, 3)
    assert ids(batches) == ids(wds_jax.BatchIterator(make(spec), 6))
    with pytest.raises(SpecError, match="pad"):
        wds_jax.BatchIterator(make(spec), 6, sharding=sharding, remainder="partial")


@pytest.mark.parametrize("workers", [0, 2])
def test_get_state_resumes_after_the_last_batch(spec, workers):
    reference = ids(wds_jax.BatchIterator(make(spec), 4, num_workers=workers, prefetch=3))
    batches = wds_jax.BatchIterator(make(spec), 4, num_workers=workers, prefetch=3)
    with pytest.raises(CheckpointError):
        batches.get_state()
    stream = iter(batches)
    head = [next(stream) for _ in range(7)]
    state = json.loads(json.dumps(batches.get_state()))
    if workers:
        batches.source.close()
    resumed = wds_jax.BatchIterator(make(spec), 4, num_workers=workers, prefetch=3)
    resumed.set_state(state)
    assert ids(head) + ids(resumed) == reference


@pytest.mark.slow
def test_two_devices_in_a_fresh_process(spec):
    code = f"""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, numpy as np, wds_jax
mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
ds = wds_jax.WebDataset({spec!r}).decode().to_tuple("npy", "cls")
images, labels = next(iter(wds_jax.BatchIterator(ds, 4, sharding=sharding)))
print(len(jax.devices()), [s.data.shape for s in images.addressable_shards])
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "2 [(2, 2, 3), (2, 2, 3)]"


@pytest.mark.slow
def test_workers_batch_in_the_workers_and_pad_each_remainder(spec):
    padded = list(wds_jax.BatchIterator(make(spec), 8, num_workers=2, remainder="pad"))
    assert all(b[0].shape == (8, 2, 3) and b[2].shape == (8,) for b in padded)
    real = sorted(int(v) for b in padded for v, m in zip(b[0][:, 0, 0], b[2]) if m)
    assert real == sorted(s * 100 + i for s in range(6) for i in range(17))
    assert sum(not b[2].all() for b in padded) <= 2  # at most one padded batch per worker
    dropped = list(wds_jax.BatchIterator(make(spec), 8, num_workers=2))
    assert all(b[0].shape == (8, 2, 3) for b in dropped) and len(dropped) >= 102 // 8 - 1


@pytest.mark.slow
def test_elastic_resume_on_another_number_of_hosts_and_workers(spec):
    """2 hosts x 2 workers take 3 batches of 4 each (24 of 102); 1 host with 2 workers reads the other 78."""

    def balanced():
        return wds_jax.WebDataset.balanced(spec, seed=5, how="pad", shuffle=True).decode().to_tuple("npy", "cls")

    states, head = [], []
    for host in range(2):
        batches = wds_jax.BatchIterator(balanced(), 4, num_workers=2, process_index=host, process_count=2)
        stream = iter(batches)
        head += ids([next(stream) for _ in range(3)])
        states.append(json.loads(json.dumps(batches.get_state())))
        batches.source.close()
    resumed = wds_jax.BatchIterator(balanced(), 4, num_workers=2, remainder="partial", process_index=0, process_count=1)
    resumed.set_state(wds_jax.merge_states(states))
    rest = ids(resumed)
    assert sorted(head + rest) == sorted(s * 100 + i for s in range(6) for i in range(17))


def test_starvation_of_the_batch_iterator(spec):
    def slow(sample):
        time.sleep(0.001)
        return sample

    watched = wds_jax.Starvation(wds_jax.BatchIterator(make(spec).map(slow), 8))
    assert len(list(watched)) == 102 // 8 and watched.report()["share"] > 0.8


@pytest.mark.slow
def test_with_epoch_counts_samples_with_or_without_workers(spec):
    """with_epoch(n) counts the pipeline's samples; batched in the workers, it counted each worker's batches."""
    resampled = wds_jax.WebDataset.resampled(spec, seed=2).decode().to_tuple("npy", "cls").with_epoch(20)
    assert [len(b[1]) for b in wds_jax.BatchIterator(resampled, 8, remainder="partial")] == [8, 8, 4]
    in_workers = [len(b[1]) for b in wds_jax.BatchIterator(resampled, 8, remainder="drop", num_workers=2)]
    assert in_workers == [8] * 4  # 20 samples from each worker: 2 whole batches each (10 batches each before)


def test_the_workers_stay_from_one_epoch_to_the_next_until_closed(spec):
    """Issue 67: each epoch started the workers again (~18 s an epoch against 0.2 s); they stay now, as TFSource's,
    until close() or the end of a with block."""
    with wds_jax.BatchIterator(make(spec), 5, num_workers=2, remainder="partial") as batches:
        first = sorted(ids(batches))
        workers = batches.source._workers
        assert sorted(ids(batches)) == first and batches.source._workers is workers and not workers.closed
    assert workers.closed
    fresh = wds_jax.BatchIterator(make(spec), 5, num_workers=2, persistent_workers=False)
    list(fresh)
    assert fresh.source._workers.closed  # started anew each epoch when asked
