import gc
import json
import mmap
import multiprocessing
import os
import time

import numpy as np
import pytest

import wds_core as wds
from wds_core.errors import CheckpointError, WdsError


@pytest.fixture
def spec(shards):
    return shards[0], shards[2]


def keyed(spec, **kw):
    return wds.WebDataset(spec, seed=4, **kw, shuffle=True).shuffle(7).to_tuple("__key__")


def no_children():
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return multiprocessing.active_children() == []


def test_every_sample_once_in_a_deterministic_order(spec):
    spec, keys = spec
    first = [k for (k,) in wds.Loader(keyed(spec), num_workers=2)]
    assert sorted(first) == sorted(keys)
    assert [k for (k,) in wds.Loader(keyed(spec), num_workers=2)] == first
    # worker w delivers what the pipeline gives worker w; the loader takes them in turn
    os.environ["NUM_WORKERS"] = "2"
    try:
        per_worker = []
        for w in range(2):
            os.environ["WORKER"] = str(w)
            per_worker.append([k for (k,) in keyed(spec)])
    finally:
        del os.environ["NUM_WORKERS"], os.environ["WORKER"]
    interleaved = [x for pair in zip(*per_worker) for x in pair]
    assert first[: len(interleaved)] == interleaved


@pytest.mark.slow
def test_epochs_differ_and_repeat_with_the_seed(spec):
    spec, keys = spec
    loader = wds.Loader(keyed(spec), num_workers=2)
    epochs = [[k for (k,) in loader] for _ in range(2)]
    assert epochs[0] != epochs[1] and sorted(epochs[1]) == sorted(keys)
    again = wds.Loader(keyed(spec), num_workers=2)
    assert [[k for (k,) in again] for _ in range(2)] == epochs


def fail_on_s2(sample):
    if sample[0].startswith("s2-00003"):
        raise ValueError(f"bad sample {sample[0]}")
    return sample


def test_a_worker_exception_is_reraised_with_its_traceback(spec):
    spec, _ = spec
    with pytest.raises(ValueError, match="bad sample s2-00003") as info:
        list(wds.Loader(keyed(spec).map(fail_on_s2), num_workers=2))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "raised in Loader worker" in notes and "fail_on_s2" in notes
    assert no_children()


def die(sample):
    if sample[0].startswith("s1-00002"):
        os._exit(7)
    return sample


@pytest.mark.slow
def test_a_dying_worker_is_an_error(spec):
    spec, _ = spec
    with pytest.raises(WdsError, match="died.*7"):
        list(wds.Loader(keyed(spec).map(die), num_workers=2))
    assert no_children()


@pytest.mark.slow
def test_break_and_interrupt_stop_the_workers(spec):
    spec, _ = spec
    for _ in wds.Loader(keyed(spec), num_workers=2, prefetch=1):
        break
    assert no_children()
    with pytest.raises(KeyboardInterrupt):
        for _ in wds.Loader(keyed(spec), num_workers=2, prefetch=1):
            raise KeyboardInterrupt
    assert no_children()


def slow_worker_zero(sample):
    if wds.dist.worker_info()[0] == 0:
        time.sleep(0.01)
    return sample


@pytest.mark.slow
def test_a_slow_worker_is_waited_for(spec):
    spec, keys = spec
    got = [k for (k,) in wds.Loader(keyed(spec).map(slow_worker_zero), num_workers=2)]
    assert got == [k for (k,) in wds.Loader(keyed(spec), num_workers=2)]
    unordered = [k for (k,) in wds.Loader(keyed(spec).map(slow_worker_zero), num_workers=2, in_order=False)]
    assert sorted(unordered) == sorted(keys)


@pytest.mark.slow
def test_resume_from_any_item(spec):
    """States taken at several positions of one run (the run goes on after each, unchanged), each restored into a
    fresh Loader that gives the rest: the workers start once for the record and once per position."""
    spec, _ = spec
    positions = [0, 1, 5, 37, 63, 64, 65, 99]
    loader = wds.Loader(keyed(spec), num_workers=2, snapshot_every=16)
    reference, states, stream = [], {}, iter(loader)
    while True:
        if len(reference) in positions:
            states[len(reference)] = json.loads(json.dumps(loader.state_dict()))
        try:
            reference.append(next(stream)[0])
        except StopIteration:
            break
    assert sorted(states) == positions and len(reference) > positions[-1]
    assert reference == [x for (x,) in wds.Loader(keyed(spec), num_workers=2, snapshot_every=16)]  # undisturbed
    for k, state in states.items():
        assert len(json.dumps(state)) < 64_000
        resumed = wds.Loader(keyed(spec), num_workers=2, snapshot_every=16)
        resumed.load_state_dict(state)
        assert reference[:k] + [x for (x,) in resumed] == reference, f"resumed after {k} items"
    assert no_children()


def plain_generator(src):
    yield from src


def test_a_pipeline_that_cannot_checkpoint_says_so(spec):
    spec, _ = spec
    loader = wds.Loader(keyed(spec).compose(plain_generator), num_workers=2, snapshot_every=8)
    stream = iter(loader)
    for _ in range(20):  # past the first snapshots, taken once the plain generator runs
        next(stream)
    with pytest.raises(CheckpointError, match="worker 0 cannot checkpoint"):
        loader.state_dict()
    loader.close()
    state = {"format": "wds-loader-1", "epoch": 0, "num_workers": 3, "workers": None}
    with pytest.raises(CheckpointError, match="3 workers"):
        wds.Loader(keyed(spec), num_workers=2).load_state_dict(state)


@pytest.mark.slow
def test_explicit_node_is_what_workers_see(spec):
    spec, keys = spec
    halves = [[k for (k,) in wds.Loader(keyed(spec), num_workers=2, rank=r, world_size=2)] for r in range(2)]
    assert sorted(halves[0] + halves[1]) == sorted(keys) and not set(halves[0]) & set(halves[1])


def test_an_unpicklable_pipeline_is_a_clear_error(spec):
    spec, _ = spec
    with pytest.raises(wds.SpecError, match="module-level functions"):
        list(wds.Loader(keyed(spec).map(lambda s: s), num_workers=2))
    assert no_children()


def big_arrays(sample):
    key = sample[0]
    return key, np.full((300, 300), int(key[1]) * 1000 + int(key[-5:]), dtype=np.int32)


def slots():
    """The Loader's shared-memory slots (``wds_<pid>_<n>_<hex>``, as DataLoader workers' are)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"wds_{os.getpid()}_")}


@pytest.mark.slow
def test_large_arrays_travel_through_reused_shared_memory(spec):
    spec, keys = spec

    before = slots()
    got = list(wds.Loader(keyed(spec).map(big_arrays), num_workers=2, shm_slots=2, shm_slot_bytes=1 << 20))
    assert sorted(k for k, _ in got) == sorted(keys)
    assert all(a.shape == (300, 300) and (a == int(k[1]) * 1000 + int(k[-5:])).all() for k, a in got)
    assert slots() <= before  # every slot unlinked
    in_slot = 0
    for k, a in wds.Loader(keyed(spec).map(big_arrays), num_workers=2, prefetch=2, shm_slot_bytes=1 << 20):
        assert slots() - before  # the slots exist while the loader runs (the checks around are not vacuous)
        assert (a == int(k[1]) * 1000 + int(k[-5:])).all()
        in_slot += isinstance(a.base, mmap.mmap)  # a view of a slot, not an unpickled copy
        del a  # freed: the slot goes back to its worker
    assert in_slot == len(keys), in_slot  # slots are reused once their items are freed
    assert slots() <= before
    tiny_slots = list(wds.Loader(keyed(spec).map(big_arrays), num_workers=2, shm_slot_bytes=1000))
    assert [k for k, _ in tiny_slots] == [k for k, _ in got]  # arrays that do not fit go in the pickle
    assert no_children()


def big_bytes(sample):
    key = sample[0]
    return key, [(key.encode() * 9000, n) for n in range(3)], b"tiny"


@pytest.mark.slow
def test_large_bytes_travel_through_a_slot_that_is_free_again_at_once(spec):
    spec, keys = spec
    before = slots()
    got = list(wds.Loader(keyed(spec).map(big_bytes), num_workers=2, shm_slots=1, shm_slot_bytes=1 << 20))
    assert sorted(k for k, _, _ in got) == sorted(keys)
    for key, pieces, tiny in got:  # held, every one of them: bytes are copies, the one slot is free after each
        assert pieces == [[key.encode() * 9000, n] for n in range(3)] or pieces == [
            (key.encode() * 9000, n) for n in range(3)
        ]
        assert all(type(data) is bytes for data, _ in pieces) and tiny == b"tiny"
    assert slots() <= before
    assert no_children()


@pytest.mark.slow
def test_a_worker_that_cannot_start_leaves_no_shared_memory(spec, monkeypatch):
    """Issue 21: e.g. spawn without a __main__ guard raises RuntimeError; the slots made for it are unlinked."""
    import multiprocessing.context

    spec, keys = spec
    before = slots()
    started = []

    def start(self):
        if started:
            raise RuntimeError("An attempt has been made to start a new process before bootstrapping")
        started.append(self)
        original(self)

    original = multiprocessing.context.SpawnProcess.start
    monkeypatch.setattr(multiprocessing.context.SpawnProcess, "start", start)
    loader = wds.Loader(keyed(spec).map(big_arrays), num_workers=2, start_method="spawn", shm_slot_bytes=1 << 20)
    with pytest.raises(RuntimeError, match="bootstrapping"):
        next(iter(loader))
    assert slots() <= before
    started[0].join(timeout=10)
    assert no_children()


def with_pid(sample):
    return sample[0], os.getpid()


@pytest.mark.slow
def test_persistent_workers_serve_every_epoch_and_survive_an_early_break(spec):
    spec, keys = spec
    fresh = wds.Loader(keyed(spec).map(with_pid), num_workers=2)
    expected = [[k for k, _ in fresh] for _ in range(3)]
    loader = wds.Loader(keyed(spec).map(with_pid), num_workers=2, persistent_workers=True, prefetch=2)
    pids, epochs = set(), []
    for _ in range(3):
        got = list(loader)
        pids |= {pid for _, pid in got}
        epochs.append([k for k, _ in got])
    assert epochs == expected  # the same stream as workers started afresh each epoch
    assert len(pids) == 2  # ... from the same two processes
    for n, _ in enumerate(loader):  # leave epoch 3 early, with items in flight
        if n == 5:
            break
    loader.set_epoch(1)
    assert [k for k, _ in loader] == expected[1]  # nothing from the abandoned epoch leaks in
    assert {pid for _, pid in loader} == pids
    del loader  # dropping the loader ends its workers
    gc.collect()
    assert no_children()


@pytest.mark.slow
def test_persistent_workers_after_a_worker_error(spec):
    spec, keys = spec
    loader = wds.Loader(keyed(spec).map(fail_on_s2), num_workers=2, persistent_workers=True)
    with pytest.raises(ValueError, match="bad sample"):
        list(loader)
    with pytest.raises(ValueError, match="bad sample"):  # the next epoch runs again, in the same workers
        list(loader)
    loader.close()
    assert no_children()


KILLED_MAIN = """
import json, os, sys, time
import numpy as np
import wds_core as wds

def big(sample):
    return sample, np.full((300, 300), 1, np.int64)

loader = wds.Loader(wds.WebDataset(sys.argv[1]).map(big), num_workers=2, shm_slot_bytes=1 << 20, prefetch=2,
                    persistent_workers=True, start_method="fork")
items = iter(loader)
held = [next(items) for _ in range(3)]  # workers busy, slots in use
children = [p.pid for p in __import__("multiprocessing").active_children()]
print(json.dumps({"workers": children}), flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_workers_and_slots_do_not_outlive_a_killed_main_process(spec):
    """Issue 28: a SIGKILLed main process left its workers alive after 60 s and 22 slots held; a later Loader
    never swept them."""
    import signal
    import subprocess
    import sys

    from wds_core.io.processes import process_running
    from wds_core.loader.shm import slot_owner

    spec, _ = spec

    def all_slots():
        return {name for name in os.listdir("/dev/shm") if name.startswith("wds_")}

    before = all_slots()
    main = subprocess.Popen([sys.executable, "-c", KILLED_MAIN, spec], stdout=subprocess.PIPE, text=True)
    try:
        workers = json.loads(main.stdout.readline())["workers"]
        mine = {name for name in all_slots() - before if slot_owner(name) == main.pid}
        assert len(workers) == 2 and mine, (workers, mine)
    finally:
        main.send_signal(signal.SIGKILL)
        main.wait()
    deadline = time.monotonic() + 20
    while any(process_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(process_running(pid) for pid in workers)  # they noticed and exited
    assert not (all_slots() & mine)  # and took their parent's slots with them
