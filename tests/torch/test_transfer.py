"""Large batches leave DataLoader workers through reused shared-memory slots (wds_torch.transfer)."""

import gc
import os
import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wds_torch as wds  # noqa: E402
from tests.conftest import make_samples, npy_bytes, write_shard  # noqa: E402
from wds_torch import transfer  # noqa: E402

# DataLoader worker processes; serial: the tests count what /dev/shm holds, which tests run beside them would change
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SIDE = 180  # a 180x180x3 float32 array is ~389 KB: four make a batch above MIN_BATCH_BYTES


def _array(shard, i):
    return np.full((SIDE, SIDE, 3), shard * 1000 + i, dtype=np.float32)


@pytest.fixture
def big_dir(tmp_path):
    for s in range(4):
        samples = make_samples(f"s{s}-", 12, fields=("cls",))
        for i, sample in enumerate(samples):
            sample["cls"] = b"%d" % i
            sample["npy"] = npy_bytes(_array(s, i))
        write_shard(tmp_path / f"big-{s}.tar", samples, ("cls", "npy"))
    return str(tmp_path / "big-{0..3}.tar")


def _shm_names():
    return {name for name in os.listdir("/dev/shm")} if os.path.isdir("/dev/shm") else set()


def _workers_gone():
    import multiprocessing
    import time

    gc.collect()
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)


def _left_behind(before, wait=10.0):
    """The names in /dev/shm that were not there ``before``, once they stop going: multiprocessing's own named
    semaphores (``sem.mp-*``, of the spawned workers' queues) are unlinked by finalizers that run as their last
    owners are collected, a little after the workers are gone (1 run in 4 looked too early)."""
    import time

    deadline = time.monotonic() + wait
    while (left := _shm_names() - before) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return left


def _expected():
    return sorted(s * 1000 + i for s in range(4) for i in range(12))


def test_tuple_batches_arrive_intact_while_every_batch_is_held(big_dir):
    before = _shm_names()
    dataset = wds.WebDataset(big_dir).decode().to_tuple("npy", "cls", "__key__").batched(4)
    loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None)
    batches = list(loader)  # all held at once: a slot still viewed is never written again
    seen = []
    for images, labels, keys in batches:
        assert isinstance(images, torch.Tensor) and images.shape == (4, SIDE, SIDE, 3)
        assert images.dtype == torch.float32 and isinstance(labels, torch.Tensor)
        assert isinstance(keys, list) and all(isinstance(k, str) for k in keys)
        for image, label, key in zip(images, labels, keys):
            value = int(image[0, 0, 0])
            assert bool((image == value).all()), key
            assert value % 1000 == int(label) and key.startswith(f"s{value // 1000}-")
            seen.append(value)
    assert sorted(seen) == _expected()
    assert any(not images.is_shared() for images, _, _ in batches)  # some went through a slot
    del batches, loader
    _workers_gone()
    assert _shm_names() - before == set()  # workers unlinked their slots


def test_dict_batches_and_spawned_persistent_workers_over_epochs(big_dir):
    before = _shm_names()
    dataset = wds.WebDataset(big_dir, seed=1, shuffle=True).decode().batched(4)
    loader = wds.WebLoader(
        dataset, num_workers=2, batch_size=None, multiprocessing_context="spawn", persistent_workers=True
    )
    for _ in range(3):
        seen = []
        for batch in loader:
            assert type(batch) is dict and isinstance(batch["npy"], torch.Tensor)
            seen += [int(v) for v in batch["npy"][:, 0, 0, 0]]
        assert sorted(seen) == _expected()
    import weakref

    alive = weakref.ref(loader)
    del loader
    # freed at once, not left to the cycle collector (which would first run the queues' finalizers and
    # leave DataLoader's shutdown to time out)
    assert alive() is None
    _workers_gone()
    assert _left_behind(before) == set()


def test_collating_batches_of_batches_still_works(big_dir):
    dataset = wds.WebDataset(big_dir).decode().to_tuple("npy", "cls").batched(4)
    loader = torch.utils.data.DataLoader(dataset, num_workers=1, batch_size=2)
    images, labels = next(iter(loader))
    assert images.shape == (2, 4, SIDE, SIDE, 3) and labels.shape == (2, 4)


def test_small_items_and_other_types_pass_unchanged():
    small = (np.zeros(3), 1)
    assert transfer._wrap(small) is small
    assert transfer._wrap("text") == "text"
    big = (np.zeros(transfer.MIN_BATCH_BYTES // 8), 1)
    assert type(transfer._wrap(big)) is transfer._TupleBatch
    assert type(transfer._wrap({"x": big[0]})) is transfer._DictBatch
    listed = [big[0][:10], 1]
    assert transfer._wrap(listed) is listed


def test_a_held_slot_is_not_reused_and_is_handed_back_when_freed():
    first = transfer._TupleBatch(torch.arange(300_000, dtype=torch.float32), np.ones((600, 600)), "meta")
    payload = pickle.dumps(first)
    got = pickle.loads(payload)  # this process plays both sides
    assert isinstance(got, list) and got[2] == "meta"
    assert torch.equal(got[0], first[0]) and isinstance(got[1], np.ndarray) and (got[1] == 1).all()
    slots = transfer._slots()
    held = [slot for slot in slots.slots if not slot.free]
    assert len(held) == 1
    second = pickle.loads(pickle.dumps(transfer._TupleBatch(torch.zeros(300_000), np.zeros((600, 600)))))
    assert torch.equal(got[0], first[0]) and (got[1] == 1).all()  # untouched by the second batch
    assert not second[0].any()
    view = got[0][10:20]  # a view keeps the slot held after the batch itself is gone
    del got, second
    gc.collect()
    assert len([slot for slot in slots.slots if not slot.free]) == 1
    assert torch.equal(view, torch.arange(10, 20, dtype=torch.float32))
    del view
    gc.collect()
    assert all(slot.free for slot in slots.slots)
    slots.close()


def test_bytes_are_copied_out_of_the_slot_which_is_free_again_at_once():
    images = [(os.urandom(64 << 10), n) for n in range(20)]  # a batch of undecoded images and their labels
    batch = transfer._wrap([images, {"small": b"x" * 100, "names": ["a", "b"]}])
    assert type(batch) is transfer._TupleBatch  # the bytes two levels deep count
    payload = pickle.dumps(batch)
    assert len(payload) < 10_000  # the images are in the slot, not in the pickle
    got = pickle.loads(payload)
    assert got == [images, {"small": b"x" * 100, "names": ["a", "b"]}]
    assert all(type(data) is bytes for data, _ in got[0])
    slots = transfer._slots()
    assert all(slot.free for slot in slots.slots)  # nothing views the slot: it is the worker's again
    mixed = pickle.loads(pickle.dumps(transfer._TupleBatch(torch.ones(300_000), images)))
    assert [slot.free for slot in slots.slots].count(False) == 1  # the tensor views it
    assert mixed[1] == images and bool((mixed[0] == 1).all())
    del mixed
    gc.collect()
    assert all(slot.free for slot in slots.slots)
    slots.close()


def test_a_dataloader_hands_over_undecoded_bytes_through_slots(tmp_path):
    payloads = {}
    for s in range(2):
        samples = make_samples(f"r{s}-", 40, fields=("cls",))
        for i, sample in enumerate(samples):
            sample["bin"] = payloads[sample["__key__"]] = os.urandom(60_000 + i)  # batches of 20 above MIN_BATCH_BYTES
        write_shard(tmp_path / f"raw-{s}.tar", samples, ("bin", "cls"))
    dataset = wds.WebDataset(str(tmp_path / "raw-{0..1}.tar")).to_tuple("__key__", "bin").batched(20)
    seen_workers = set(transfer._workers)
    loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None)
    got = {key: data for keys, datas in loader for key, data in zip(keys, datas)}
    assert got == payloads and all(type(data) is bytes for data in got.values())
    assert len(transfer._workers - seen_workers) == 2  # both workers' batches came through their slots
    del loader
    _workers_gone()


def test_when_every_slot_is_held_batches_take_the_ordinary_path():
    held = [pickle.loads(pickle.dumps(transfer._TupleBatch(torch.full((300_000,), float(i))))) for i in range(6)]
    assert [float(batch[0][0]) for batch in held] == [float(i) for i in range(6)]
    assert len(transfer._slots().slots) == transfer._MAX_SLOTS
    del held
    gc.collect()
    transfer._slots().close()


KILLED = r"""
import os, signal, sys, time
import torch
import wds_torch as wds
dataset = wds.WebDataset(sys.argv[1]).decode().to_tuple("npy", "cls").batched(4)
loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None, prefetch_factor=4)
batches = iter(loader)
held = [next(batches) for _ in range(4)]  # both workers have sent batches through their slots
pids = [w.pid for w in batches._workers]
time.sleep(0.5)  # they fill their slots ahead
print(" ".join(map(str, pids)), flush=True)
if sys.argv[2] == "left mid-epoch":  # the DataLoader shuts its workers down with batches in flight
    del batches
    sys.exit(0)
for pid in pids:
    os.kill(pid, signal.SIGKILL)
os._exit(0) if sys.argv[2] == "is killed too" else sys.exit(0)
"""


@pytest.mark.parametrize("how", ["left mid-epoch", "exits", "is killed too"])
def test_no_slot_outlives_workers_killed_with_sigkill(big_dir, how):
    """Issue 21: slots made by killed workers are swept by the main process at exit, or by the next worker."""
    import subprocess
    import sys

    args = [sys.executable, "-c", KILLED, big_dir, how]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2, done.stderr
    left = {name for name in _shm_names() if name.split("_")[1:2] in ([str(p)] for p in pids)}
    if how == "is killed too":  # the main process died without its atexit: the next worker sweeps what is old enough
        assert left, "the killed workers left slots behind"
        from wds_core.loader import shm as shmring

        assert sorted(shmring.sweep_dead_slots(pids)) == sorted(left)
        left = {name for name in _shm_names() if name.split("_")[1:2] in ([str(p)] for p in pids)}
    assert left == set()


@pytest.mark.parametrize("payload", [60_000, 20])  # through the slots, and small enough to stay in the pickle
def test_zero_copy_views_reach_the_main_process_as_bytes(tmp_path, payload):
    samples = [{"__key__": f"k{i:03d}", "bin": bytes([i % 251]) * payload, "cls": b"%d" % i} for i in range(40)]
    write_shard(tmp_path / "z-0.tar", samples[:20], ("bin", "cls"))
    write_shard(tmp_path / "z-1.tar", samples[20:], ("bin", "cls"))
    dataset = wds.WebDataset(str(tmp_path / "z-{0..1}.tar"), reading=wds.ShardReadOptions(zero_copy=True))
    dataset = dataset.to_tuple("bin", "cls").batched(8, collation_fn=list)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    got = sorted((pair for batch in loader for pair in batch), key=lambda pair: int(pair[1]))
    assert [(bytes(b), bytes(c)) for b, c in got] == [(s["bin"], s["cls"]) for s in samples]
    assert all(type(b) is bytes and type(c) is bytes for b, c in got)


TEARDOWN_WHILE_PICKLING = """
import threading, time
from multiprocessing import util
import numpy as np, torch
from wds_torch import transfer

class Stalls:
    # pickled (by the worker queue's feeder thread, just before the array after it in the batch) only once the
    # worker is exiting: the array is then copied into its slot (long enough a copy to take the GIL off the
    # feeder thread for a while) while the worker's exit runs its finalizers
    exiting = threading.Event()

    def __reduce__(self):
        Stalls.exiting.wait(30)
        return (int, (0,))

def exiting():  # the first of the exiting worker's finalizers
    Stalls.exiting.set()
    time.sleep(0.005)  # the feeder thread starts copying

class Batches(torch.utils.data.IterableDataset):
    def __iter__(self):
        util.Finalize(None, exiting, exitpriority=100)
        big = np.ones((64, 1024, 1024), np.uint8)  # 64 MB
        yield from transfer.wrap_batches([(big, 0), (Stalls(), big)] + [(big, 1)] * 4)

loader = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=1, prefetch_factor=2)
items = iter(loader)
next(items)
del items, loader  # dropped mid-epoch while the worker's feeder thread is pickling the second batch
print("dropped", flush=True)
"""


def test_a_worker_exits_while_its_queue_still_writes_a_batch_into_a_slot():
    """Issue 43: DataLoader does not wait for a worker's queue feeder thread when it shuts a dropped loader's
    workers down, and the worker's exit unmapped its slots while that thread was still pickling a batch into one:
    a segmentation fault in the worker.  Here the write is held until the exit has begun; the slots stay mapped
    until the process ends, so it ends cleanly, and no slot is left in /dev/shm."""
    import subprocess
    import sys

    before = _shm_names()
    run = subprocess.run([sys.executable, "-c", TEARDOWN_WHILE_PICKLING], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout == "dropped\n", run.stderr
    assert "segmentation fault" not in run.stderr.lower() and "killed by signal" not in run.stderr, run.stderr
    assert not {name for name in _shm_names() - before if name.startswith("wds_")}
