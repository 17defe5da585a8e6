"""Elastic resume: a balanced epoch checkpointed on one layout of readers continues on another."""

import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wds_core as wds
from tests.conftest import counted_shards
from wds_core import CheckpointError, merge_states
from wds_core.intervals import complement, decode, encode, length, normalize, take

COUNTS = [7, 13, 5, 11, 1, 3]  # 40 samples


@pytest.fixture
def uneven(tmp_path):
    return counted_shards(tmp_path, COUNTS)


def as_reader(monkeypatch, rank, world, worker, workers):
    for name, value in (("RANK", rank), ("WORLD_SIZE", world), ("WORKER", worker), ("NUM_WORKERS", workers)):
        monkeypatch.setenv(name, str(value))


def keys_of(item):
    if isinstance(item, dict):
        return [item["__key__"]]
    if isinstance(item, (list, tuple)) and item and isinstance(item[0], list):
        return list(item[0])  # a batch of (key, ...) tuples, columns first
    return [item[0]]


def run_layout(monkeypatch, make, layout, takes=None, state=None):
    """Every reader of ``layout`` (ranks, workers): the keys each delivered and its state afterwards."""
    ranks, workers = layout
    out = []
    for rank in range(ranks):
        for worker in range(workers):
            as_reader(monkeypatch, rank, ranks, worker, workers)
            ds = make()
            if state is not None:
                ds.load_state_dict(json.loads(json.dumps(state)))
            it = iter(ds)
            got = []
            limit = None if takes is None else takes[rank * workers + worker]
            while limit is None or len(got) < limit:
                item = next(it, None)
                if item is None:
                    break
                got.append(item)
            out.append(([k for item in got for k in keys_of(item)], json.loads(json.dumps(ds.state_dict()))))
    return out


PIPELINES = {
    "pad": lambda spec: wds.WebDataset.balanced(spec, seed=3, how="pad", shuffle=True),
    "drop": lambda spec: wds.WebDataset.balanced(spec, seed=4, how="drop", shuffle=True),
    "shuffle": lambda spec: wds.WebDataset.balanced(spec, seed=5, how="pad", shuffle=True).shuffle(7, initial=3),
    "decode-threads": lambda spec: wds.WebDataset.balanced(spec, seed=6, how="pad").decode(only="txt", num_threads=2),
    "select-map-batched-drop": lambda spec: (
        wds.WebDataset.balanced(spec, seed=7, how="drop")
        .select(lambda s: not s["__key__"].endswith("4"))
        .map(lambda s: s)
        .to_tuple("__key__", "cls")
        .batched(3)
    ),
    "select-read-ahead-batched-drop": lambda spec: (
        wds.WebDataset.balanced(spec, seed=9, how="drop")
        .select(lambda s: not s["__key__"].endswith("4"))
        .to_tuple("__key__", "cls")
        .compose(wds.stages.batching.ReadAheadBatch(3))
    ),
    "shuffle-read-ahead-batched-pad": lambda spec: (
        wds.WebDataset.balanced(spec, seed=10, how="pad")
        .shuffle(5)
        .to_tuple("__key__", "cls")
        .compose(wds.stages.batching.ReadAheadBatch(4))
    ),
    "threads-shuffle-batched": lambda spec: (
        wds.WebDataset.balanced(spec, seed=8, how="pad")
        .decode(only="txt", num_threads=3)
        .shuffle(9)
        .to_tuple("__key__", "txt")
        .batched(4, partial=True)
    ),
}


def epoch_keys(monkeypatch, make, layout):
    return [k for keys, _ in run_layout(monkeypatch, make, layout) for k in keys]


@pytest.mark.parametrize("name", list(PIPELINES))
@pytest.mark.parametrize("old,new", [((2, 2), (1, 2)), ((4, 1), (2, 1)), ((2, 1), (3, 1)), ((3, 1), (1, 1))])
def test_the_rest_of_the_epoch_on_another_layout(uneven, monkeypatch, name, old, new):
    spec, keys = uneven
    make = lambda: PIPELINES[name](spec)  # noqa: E731
    full = epoch_keys(monkeypatch, make, old)
    filtered = "select" in name
    rng = random.Random(hash((name, old, new)) & 0xFFFF)
    for _ in range(3):
        takes = [rng.randrange(0, 6) for _ in range(old[0] * old[1])]
        before = run_layout(monkeypatch, make, old, takes)
        merged = merge_states([state for _, state in before])
        assert len(json.dumps(merged)) < 64 * 1024
        after = run_layout(monkeypatch, make, new, state=merged)
        seen = [k for got, _ in before for k in got]
        rest = [k for got, _ in after for k in got]
        if not filtered:
            assert len({len(got) for got, _ in after}) == 1, "every new reader gets the same count"
        everything = seen + rest
        readers = new[0] * new[1]
        if "drop" in name or filtered:
            assert len(everything) == len(set(everything)), "dropping never repeats a sample"
            if not filtered:
                left_out = len(keys) - len(set(everything))
                assert left_out <= (len(keys) - len(full)) + readers - 1
        else:
            assert set(everything) == set(keys), "padding never leaves a sample out"
            duplicates = len(everything) - len(set(everything))
            assert duplicates <= (len(full) - len(set(full))) + readers - 1


def test_exact_when_the_rest_divides_evenly(uneven, monkeypatch):
    """4 readers took 3, 5, 2 and 6 samples (16 of 40): 24 left split exactly in 2 (or 3, or 4)."""
    spec, keys = uneven
    make = lambda: wds.WebDataset.balanced(spec, seed=9, how="pad", shuffle=True).shuffle(5)  # noqa: E731
    before = run_layout(monkeypatch, make, (4, 1), [3, 5, 2, 6])
    merged = merge_states([state for _, state in before])
    seen = [k for got, _ in before for k in got]
    for new in ((2, 1), (1, 3), (2, 2)):
        after = run_layout(monkeypatch, make, new, state=merged)
        rest = [k for got, _ in after for k in got]
        assert sorted(seen + rest) == sorted(keys), f"every sample exactly once on {new}"
        assert {len(got) for got, _ in after} == {24 // (new[0] * new[1])}


def test_twice_elastic_then_ordinary_resume(uneven, monkeypatch):
    """4 readers → 2 → 3, then one of the 3 stops and resumes on the same layout (the ordinary oracle)."""
    spec, keys = uneven
    make = lambda: wds.WebDataset.balanced(spec, seed=10, how="pad", shuffle=True).shuffle(4)  # noqa: E731
    first = run_layout(monkeypatch, make, (4, 1), [1, 2, 3, 2])  # 8 taken, 32 left
    merged = merge_states([s for _, s in first])
    second = run_layout(monkeypatch, make, (2, 1), [6, 8], state=merged)  # 14 more, 18 left
    merged2 = merge_states([s for _, s in second])
    third = run_layout(monkeypatch, make, (3, 1), state=merged2)
    everything = [k for run in (first, second, third) for got, _ in run for k in got]
    assert sorted(everything) == sorted(keys)
    # one reader of the third layout, stopped at each step and resumed on the same layout
    as_reader(monkeypatch, 1, 3, 0, 1)
    ds = make()
    ds.load_state_dict(merged2)
    expected = [x["__key__"] for x in ds]
    assert expected == third[1][0]
    for k in range(len(expected) + 1):
        ds = make()
        ds.load_state_dict(merged2)
        it = iter(ds)
        head = [next(it)["__key__"] for _ in range(k)]
        state = json.loads(json.dumps(ds.state_dict()))
        again = make()
        again.load_state_dict(state)
        assert head + [x["__key__"] for x in again] == expected


def test_later_epochs_run_on_the_new_layout(uneven, monkeypatch):
    spec, _ = uneven
    make = lambda: wds.WebDataset.balanced(spec, seed=11, how="drop", shuffle=True)  # noqa: E731
    merged = merge_states([s for _, s in run_layout(monkeypatch, make, (4, 1), [2, 2, 2, 2])])
    as_reader(monkeypatch, 0, 2, 0, 1)
    resumed = make()
    resumed.load_state_dict(merged)
    list(resumed)  # the rest of epoch 0
    fresh = make()
    fresh.set_epoch(1)
    assert [x["__key__"] for x in resumed] == [x["__key__"] for x in fresh]


def test_loader_states_merge_and_resume_on_other_worker_counts(uneven):
    spec, keys = uneven
    make = lambda: wds.WebDataset.balanced(spec, seed=12, how="pad", shuffle=True).shuffle(3)  # noqa: E731
    states, seen = [], []
    for rank in range(2):
        loader = wds.Loader(make(), num_workers=2, rank=rank, world_size=2, start_method="fork")
        it = iter(loader)
        seen += [next(it)["__key__"] for _ in range(4 + 2 * rank)]
        states.append(json.loads(json.dumps(loader.state_dict())))
        loader.close()
    merged = merge_states(states)
    rest = []
    loader = wds.Loader(make(), num_workers=3, rank=0, world_size=1, start_method="fork")
    loader.load_state_dict(merged)
    rest = [x["__key__"] for x in loader]
    loader.close()
    assert sorted(seen + rest) == sorted(keys)  # 10 taken, 30 left: 10 for each of 3 workers
    assert len(rest) == 30


def test_merging_refuses_what_it_cannot_make_exact(uneven, monkeypatch):
    spec, _ = uneven
    make = lambda: wds.WebDataset.balanced(spec, seed=13, how="pad")  # noqa: E731
    states = [s for _, s in run_layout(monkeypatch, make, (3, 1), [1, 1, 1])]
    with pytest.raises(CheckpointError, match=r"readers \[2\] of 3 are missing"):
        merge_states(states[:2])
    other = [s for _, s in run_layout(monkeypatch, make, (3, 1), [2, 2, 2])]
    with pytest.raises(CheckpointError, match="two different states"):
        merge_states(states + other)
    with pytest.raises(CheckpointError, match="balanced epoch"):
        merge_states([s for _, s in run_layout(monkeypatch, lambda: wds.WebDataset(spec, seed=1), (1, 1), [2])])
    unbatched = lambda: make().to_tuple("__key__").batched(2).unbatched()  # noqa: E731
    with pytest.raises(CheckpointError, match="does not keep track"):
        merge_states([s for _, s in run_layout(monkeypatch, unbatched, (1, 1), [3])])
    dropping = lambda: make().select(lambda s: s["__key__"][-1] != "1").shuffle(5)  # noqa: E731
    with pytest.raises(CheckpointError, match="one item per sample"):
        merge_states([s for _, s in run_layout(monkeypatch, dropping, (1, 1), [12])])
    nested = lambda: make().shuffle(5).decode(only="txt", num_threads=2)  # noqa: E731
    with pytest.raises(CheckpointError, match="also holds samples back"):
        merge_states([s for _, s in run_layout(monkeypatch, nested, (1, 1), [12])])
    with pytest.raises(CheckpointError, match="no wds pipeline state"):
        merge_states([{"x": 1}])
    with pytest.raises(CheckpointError, match="StatefulDataLoader"):
        merge_states([{"_steps_since_snapshot": 2, "_snapshot": {}}])
    merged = merge_states(states)
    with pytest.raises(CheckpointError, match="with_epoch"):
        make().with_epoch(10).load_state_dict({**merged, "fingerprint": make().with_epoch(10).fingerprint()})


def test_changed_shards_are_detected(uneven, monkeypatch, tmp_path):
    spec, _ = uneven
    make = lambda: wds.WebDataset.balanced(spec, seed=14, how="pad")  # noqa: E731
    merged = merge_states([s for _, s in run_layout(monkeypatch, make, (2, 1), [1, 1])])
    merged["elastic"]["total"] += 1
    ds = make()
    ds.load_state_dict(merged)
    with pytest.raises(CheckpointError, match="shards changed"):
        list(ds)


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), max_size=12), st.integers(1, 70))
def test_intervals(pairs, total):
    intervals = normalize((a, a + n) for a, n in pairs)
    assert decode(encode(intervals)) == intervals
    gaps = complement(intervals, total)
    covered = {p for a, b in intervals for p in range(a, b) if p < total}
    assert {p for a, b in gaps for p in range(a, b)} == set(range(total)) - covered
    if gaps:
        size = length(gaps)
        flat = [p for a, b in gaps for p in range(a, b)]
        for start in range(0, size + 3, 2):
            got = [p for a, b in take(gaps, start, size + 2) for p in range(a, b)]
            assert got == [flat[(start + i) % size] for i in range(size + 2)]
