"""``import wids`` through the switch (issue 44): wids 0.1.11's datasets and samplers, side by side with wids."""

import io
import json
import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from unittest.mock import patch

import numpy as np
import pytest
from PIL import Image

import wds_core
from wds_core.errors import SpecError, TruncatedShardError

pytest.importorskip("torch")
real = pytest.importorskip("wids")
from wds_torch.dropin import WIDS  # noqa: E402

ours = WIDS["wids"]


def _png(seed, mode="RGB"):
    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (8, 6, 3), dtype=np.uint8)).convert(mode).save(out, format="PNG")
    return out.getvalue()


def _npy(seed):
    out = io.BytesIO()
    np.save(out, np.arange(seed, seed + 4, dtype=np.int16))
    return out.getvalue()


@pytest.fixture
def dataset(tmp_path):
    """Two folders of shards and a descriptor naming them, one through a nested dataset with a name."""

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    counts = {"a/s-0.tar": 7, "a/s-1.tar": 5, "b/t-0.tar": 6}
    for name, count in counts.items():
        with wds_core.TarWriter(str(tmp_path / name)) as sink:
            for i in range(count):
                sink.write({
                    "__key__": f"{name[0]}/k{i:03d}",
                    "png": _png(i), "seg.png": _png(i + 50, "L"), "cls": i, "txt": f"text {i}",
                    "json": {"i": i, "name": name}, "npy": _npy(i), "ten": b"\x00raw" * i,
                    "txt.gz": f"zipped {i}",  # the writer gzips it
                })  # fmt: skip
    nested = {"wids_version": 1, "shardlist": [{"url": "t-0.tar", "nsamples": 6}]}
    (tmp_path / "b" / "part.json").write_text(json.dumps(nested))
    descriptor = {
        "wids_version": 1, "name": "top",
        "shardlist": [{"url": "a/s-0.tar", "nsamples": 7}, {"url": "a/s-1.tar", "nsamples": 5}],
        "datasets": [{"name": "part", "source_url": str(tmp_path / "b" / "part.json")}],  # wids: from the cwd
    }  # fmt: skip
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(descriptor))
    return str(path)


def _plain(value):
    if isinstance(value, io.BytesIO):
        return ("stream", value.getvalue())
    if isinstance(value, Image.Image):
        return ("image", value.mode, value.size, np.asarray(value).tobytes())
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    return value


def _samples(module, source, tmp_path, **kw):
    ds = module.ShardListDataset(source, cache_dir=str(tmp_path / f"cache-{module.__name__}"), **kw)
    return len(ds), ds.lengths, [[(k, _plain(v)) for k, v in ds[i].items()] for i in range(len(ds))]


@pytest.mark.parametrize("transformations", ["PIL", "numpy", []])
def test_samples_are_wids_samples(dataset, tmp_path, transformations):
    with pytest.warns(UserWarning) if transformations else _nothing():
        theirs = _samples(real, dataset, tmp_path, transformations=transformations)
    with pytest.warns(UserWarning) if transformations else _nothing():
        mine = _samples(ours, dataset, tmp_path, transformations=transformations)
    assert mine == theirs
    length, lengths, samples = mine
    assert length == 18 and lengths == [7, 5, 6]
    keys = [k for k, _ in samples[8]]
    assert keys[-5:] == ["__key__", "__dataset__", "__index__", "__shard__", "__shardindex__"]
    assert ".seg.png" in keys and ".txt.gz" in keys  # extensions with their leading dot, from the first dot


@contextmanager
def _nothing():
    yield


def test_a_list_of_shards_transforms_and_lookups(dataset, tmp_path):
    folder = os.path.dirname(dataset)
    shards = [{"url": os.path.join(folder, "a/s-1.tar"), "nsamples": 5}, {"url": os.path.join(folder, "b/t-0.tar"),
              "nsamples": 6}]  # fmt: skip
    made = []
    for module in (real, ours):
        ds = module.ShardListDataset(shards, transformations=[], lru_size=1, localname=lambda url: url)
        ds.add_transform(lambda s: {"key": s["__key__"], "cls": int(s[".cls"].read()), "i": s["__shardindex__"]})
        ds.add_transform(lambda s: (s["key"], s["cls"], s["i"]))
        got = [ds[i] for i in (0, 6, 1, 10, 4)]
        shard, within, desc = ds.get_shard(7)
        made.append((got, ds.get_stats(), len(shard), int(within), desc["url"], ds.total_length, list(ds.cum_lengths)))
        ds.close()
    assert made[1] == made[0]


def test_samplers_give_wids_orders(dataset):
    data = list(range(1000))
    for kw in [dict(num_samples=500, chunksize=100, seed=0), dict(chunksize=77, seed=3, shufflefirst=True),
               dict(num_samples=(111, 222), chunksize=10, seed=1), dict(chunksize=50, shuffle=False)]:  # fmt: skip
        samplers = [module.ChunkedSampler(data, **kw) for module in (real, ours)]
        orders = [[list(s) for _ in range(3)] for s in samplers]  # each pass is the next epoch
        assert orders[1] == orders[0] and len(samplers[1]) == len(samplers[0])
        for s in samplers:
            s.set_epoch(7)
        assert list(samplers[1]) == list(samplers[0])
    ds = [m.ShardListDataset(dataset, transformations=[]) for m in (real, ours)]
    sharded = [m.ShardedSampler(d, seed=5) for m, d in zip((real, ours), ds)]
    assert [list(sharded[1]) for _ in range(3)] == [list(sharded[0]) for _ in range(3)]


@contextmanager
def _ranks(rank, world):
    with (
        patch("torch.distributed.is_initialized", return_value=True),
        patch("torch.distributed.get_rank", return_value=rank),
        patch("torch.distributed.get_world_size", return_value=world),
    ):
        yield


def test_distributed_samplers_split_as_wids(dataset):
    data = list(range(1003))
    for world in (1, 2, 3):
        for rank in range(world):
            with _ranks(rank, world):
                samplers = [
                    m.DistributedChunkedSampler(data, chunksize=100, seed=4, shufflefirst=rank % 2 == 0)
                    for m in (real, ours)
                ]
            orders = [[list(s) for _ in range(2)] for s in samplers]  # each pass is the next epoch
            assert orders[1] == orders[0]
            assert len(samplers[1]) == len(samplers[0])
    with pytest.warns(UserWarning, match="without distributed"):
        assert list(ours.DistributedChunkedSampler(data, chunksize=10)) == list(ours.ChunkedSampler(data, chunksize=10))
    explicit = ours.DistributedChunkedSampler(data, num_replicas=2, rank=1, chunksize=10, shuffle=False)
    assert list(explicit) == list(range(502, 1003))  # given explicitly, used even without a process group


def test_bad_shards_are_clear_errors(dataset, tmp_path):
    folder = os.path.dirname(dataset)
    cut = tmp_path / "cut.tar"
    whole = open(os.path.join(folder, "a/s-0.tar"), "rb").read()
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TruncatedShardError, match="cut.tar"):
        ds = ours.ShardListDataset([{"url": str(cut), "nsamples": 7}], transformations=[])
        [ds[i] for i in range(len(ds))]
    with pytest.raises(SpecError, match="out of date"):
        ours.ShardListDataset([{"url": os.path.join(folder, "a/s-0.tar"), "nsamples": 9}])[0]
    with pytest.raises(IndexError):
        ours.ShardListDataset(dataset, transformations=[])[18]


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    import wids

    ds = wids.ShardListDataset(sys.argv[1], transformations=[])
    ds.add_transform(lambda s: (s["__key__"], s[".txt"].read().decode(), s["__index__"]))
    sampler = wids.ChunkedSampler(ds, chunksize=4, seed=2, shufflefirst=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=3, sampler=sampler, num_workers=2,
                                         collate_fn=lambda b: [list(x) for x in b])
    epochs = [[item for batch in loader for item in batch] for _ in range(2)]
    print(json.dumps([getattr(wids, "__wds__", "wids"), epochs]))
    """
)


def test_a_wids_script_runs_unchanged_through_the_switch(dataset, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    runs = {}
    for way, command in [("wids", [sys.executable, str(script)]),
                         ("wds", [sys.executable, "-m", "wds_torch.run", "--quiet", str(script)])]:  # fmt: skip
        out = subprocess.run([*command, dataset], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-3000:]
        runs[way] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["wids"][0] == "wids" and runs["wds"][0] == "wds_torch"
    assert runs["wds"][1] == runs["wids"][1] and len(runs["wds"][1][0]) == 18
