import copy
import functools

import numpy as np
import pytest

import wds_core as wds
from wds_core import SampleError


def run(*stages, source=None):
    return list(wds.DataPipeline(source if source is not None else copy.deepcopy(SAMPLES), *stages))


SAMPLES = [{"__key__": f"k{i}", "jpg": i, "json": {"i": i}} for i in range(6)] + [{"__key__": "k6", "png": 6}]


def test_to_tuple_with_alternatives_and_missing():
    assert run(wds.to_tuple("__key__", "jpg;png"))[-1] == ("k6", 6)
    with pytest.raises(SampleError, match="none of the fields"):
        run(wds.to_tuple("jpg", "json"))
    assert len(run(wds.to_tuple("jpg", "json", handler=wds.ignore_and_continue))) == 6
    assert run(wds.to_tuple("jpg json", handler=wds.ignore_and_continue))[0] == (0, {"i": 0})
    assert run(wds.to_tuple("jpg", "json", missing_is_error=False))[-1] == (None, None)


def test_map_select_rename_map_dict_map_tuple():
    assert [s["jpg"] for s in run(wds.select(lambda s: "jpg" in s), wds.map_dict(jpg=lambda v: v * 10))][:3] == [
        0, 10, 20,
    ]  # fmt: skip
    renamed = run(wds.rename(image="jpg;png"))
    assert renamed[-1]["image"] == 6 and "png" not in renamed[-1] and renamed[0]["image"] == 0
    assert run(wds.rename(image="jpg;png", keep=False))[0] == {"image": 0}
    assert run(wds.to_tuple("jpg;png", "__key__"), wds.map_tuple(lambda x: x + 1, None))[0] == (1, "k0")
    mapped = run(wds.map(lambda s: {"v": s["__key__"]}))
    assert mapped[0] == {"v": "k0", "__key__": "k0"}
    assert len(run(wds.map(lambda s: None if s["__key__"] == "k1" else s))) == 6


def test_handlers_skip_or_stop():
    def boom(s):
        if s["__key__"] == "k2":
            raise RuntimeError("bad")
        return s

    with pytest.raises(RuntimeError):
        run(wds.map(boom))
    assert len(run(wds.map(boom, handler=wds.ignore_and_continue))) == 6
    assert len(run(wds.map(boom, handler=wds.ignore_and_stop))) == 2
    with pytest.warns(UserWarning):
        assert len(run(wds.map(boom, handler=wds.warn_and_stop))) == 2


def test_batched_collation_and_unbatched():
    batches = run(wds.to_tuple("__key__", "jpg;png"), wds.batched(4))
    keys, values = batches[0]
    assert keys == ["k0", "k1", "k2", "k3"] and isinstance(values, np.ndarray) and values.tolist() == [0, 1, 2, 3]
    assert len(batches) == 2 and len(batches[1][0]) == 3
    assert len(run(wds.to_tuple("jpg;png"), wds.batched(4, partial=False))) == 1
    arrays = run(wds.map(lambda s: (np.full((2, 2), int(s["__key__"][1:])),)), wds.batched(3))
    assert arrays[0][0].shape == (3, 2, 2)
    with pytest.raises(SampleError, match="all shapes must be equal in collation"):
        run(wds.map(lambda s: (np.zeros(int(s["__key__"][1:])),)), wds.batched(3))
    lists = functools.partial(wds.default_collation_fn, combine_tensors=False)
    ragged = run(wds.map(lambda s: (np.zeros(int(s["__key__"][1:])),)), wds.batched(3, collation_fn=lists))
    assert isinstance(ragged[0][0], list)
    dicts = run(wds.select(lambda s: "jpg" in s), wds.batched(3))
    assert dicts[0]["jpg"].tolist() == [0, 1, 2] and dicts[0]["__key__"] == ["k0", "k1", "k2"]
    flat = run(wds.to_tuple("__key__", "jpg;png"), wds.batched(4), wds.unbatched())
    assert [k for k, _ in flat] == [f"k{i}" for i in range(7)]


def test_shuffle_is_a_permutation_and_slice():
    out = run(wds.shuffle(5, initial=2), source=list(range(100)))
    assert sorted(out) == list(range(100)) and out != list(range(100))
    assert run(wds.slice(2, 10, 3), source=list(range(100))) == [2, 5, 8]
    assert run(wds.shuffle(0, initial=0), source=list(range(100))) == list(range(100))  # webdataset's no-op
    with pytest.raises(ValueError, match="bufsize must be an integer >= 1"):
        wds.Shuffle(0)  # the core stage asks for a real buffer
    with pytest.raises(ValueError, match="batchsize"):
        wds.batched(0)


@pytest.mark.parametrize("seeded", [True, False])
def test_random_stages_before_a_splitter_agree_across_readers(shards, monkeypatch, seeded):
    """Simulated 2 ranks x 2 workers (environment): each sample once per epoch, whatever the placement."""
    spec, _, keys = shards

    def make():
        return wds.DataPipeline(
            wds.SimpleShardList(spec),
            wds.shuffle(10, seed=5 if seeded else None),
            wds.rsample(1.0),
            wds.split_by_node,
            wds.split_by_worker,
            wds.tarfile_to_samples(),
            wds.shuffle(10),
            wds.to_tuple("__key__"),
        )

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("NUM_WORKERS", "2")
    for epoch in range(2):
        seen = []
        for rank in range(2):
            for worker in range(2):
                monkeypatch.setenv("RANK", str(rank))
                monkeypatch.setenv("WORKER", str(worker))
                pipeline = make()  # each rank makes its own pipeline: an unseeded one draws its own seed
                pipeline.set_epoch(epoch)
                seen += [key for (key,) in pipeline]
        assert sorted(seen) == sorted(keys)
