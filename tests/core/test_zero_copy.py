"""zero_copy=True: local uncompressed shards' members as views of the mapped file, the same data and positions."""

import gc
import gzip
import json
import pickle

import numpy as np
import pytest

import wds_core as wds
from tests.conftest import make_samples, write_shard
from wds_core.loader.shm import MIN_BYTES_OBJECT, without_views
from wds_core.tar.walk import MAPPED_COPY
from wds_core.testing import check_resume


def big_samples(prefix, n):
    rng = np.random.default_rng(1)
    return [
        {
            "__key__": f"{prefix}{i:04d}",
            "bin": rng.integers(0, 256, int(rng.integers(0, 300_000 if i % 4 else 20_000)), dtype=np.uint8).tobytes(),
            "json": json.dumps({"i": i}).encode(),
            "txt": f"text {i}".encode(),
        }
        for i in range(n)
    ]


@pytest.fixture
def big(tmp_path):
    paths = [write_shard(tmp_path / f"big-{s}.tar", big_samples(f"s{s}-", 12), ("bin", "json", "txt")) for s in (0, 1)]
    return str(tmp_path / "big-{0..1}.tar"), paths


def as_bytes(sample):
    return {k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()}


def test_members_are_views_with_the_same_bytes_and_keys(big):
    spec, _ = big
    copied = list(wds.WebDataset(spec))
    viewed = list(wds.WebDataset(spec, reading=wds.ShardReadOptions(zero_copy=True)))
    assert [as_bytes(s) for s in viewed] == copied and len(copied) == 24
    # members of MAPPED_COPY bytes and more are read-only views; smaller ones bytes, cheaper than a view's page fault
    assert all(type(s["bin"]) is memoryview and s["bin"].readonly for s in viewed if len(s["bin"]) >= MAPPED_COPY)
    assert any(len(s["bin"]) < MAPPED_COPY for s in viewed) and any(len(s["bin"]) >= MAPPED_COPY for s in viewed)
    assert all(type(s[f]) is bytes for s in viewed for f in ("bin", "json", "txt") if len(s[f]) < MAPPED_COPY)
    assert all(type(s["__key__"]) is str and type(s["__url__"]) is str for s in viewed)
    del copied
    gc.collect()
    assert len(bytes(viewed[5]["bin"])) == len(viewed[5]["bin"])  # the map stays while a view lives


def test_decoding_takes_views_as_it_takes_bytes(big):
    spec, _ = big
    copied = list(wds.WebDataset(spec).decode())
    viewed = list(wds.WebDataset(spec, reading=wds.ShardReadOptions(zero_copy=True)).decode())
    assert viewed == copied and viewed[3]["json"] == {"i": 3} and viewed[3]["txt"] == "text 3"


def test_compressed_and_piped_shards_are_read_as_before(big, tmp_path):
    _, paths = big
    with open(paths[0], "rb") as f:
        data = f.read()
    (tmp_path / "z.tar.gz").write_bytes(gzip.compress(data))
    for url in (str(tmp_path / "z.tar.gz"), f"pipe:cat {paths[0]}"):
        samples = list(wds.WebDataset(url, reading=wds.ShardReadOptions(zero_copy=True)))
        assert len(samples) == 12 and all(type(s["bin"]) is bytes for s in samples)


def test_a_zero_copy_pipeline_resumes_exactly(big):
    spec, _ = big
    check_resume(
        lambda: wds.WebDataset(spec, seed=3, shuffle=True, reading=wds.ShardReadOptions(zero_copy=True)), step=5
    )


def test_truncated_and_hostile_shards_report_as_before(tmp_path):
    path = write_shard(tmp_path / "t.tar", make_samples("k", 40))
    with open(path, "rb") as f:
        data = f.read()
    for cut in (700, 5000, len(data) - 2048):
        (tmp_path / "cut.tar").write_bytes(data[:cut])
        outcomes = []
        for zero_copy in (False, True):
            got = []
            with pytest.raises(wds.TruncatedShardError) as info:
                for sample in wds.WebDataset(
                    str(tmp_path / "cut.tar"), reading=wds.ShardReadOptions(zero_copy=zero_copy)
                ):
                    got.append(as_bytes(sample))
            outcomes.append((got, str(info.value)))
        assert outcomes[0] == outcomes[1]


def test_views_travel_to_other_processes_as_bytes():
    view = memoryview(bytes(range(256)) * 40)
    small = memoryview(b"tiny")
    item = {"big": view, "small": small, "list": [view, (small, 3)], "n": 1}
    plain = without_views(item)
    assert plain == {"big": bytes(view), "small": b"tiny", "list": [bytes(view), (b"tiny", 3)], "n": 1}
    assert type(plain["list"][1]) is tuple and without_views(plain) is plain  # nothing to change: the same object
    assert pickle.loads(pickle.dumps(plain)) == plain
    assert len(view) >= MIN_BYTES_OBJECT


@pytest.mark.parametrize("shm_slots", [None, 0])
def test_a_loader_hands_over_views_as_bytes(big, shm_slots):
    spec, _ = big
    want = [s for s in wds.WebDataset(spec)]
    dataset = wds.WebDataset(spec, reading=wds.ShardReadOptions(zero_copy=True))
    loader = wds.Loader(dataset, num_workers=2, start_method="fork", shm_slots=shm_slots)
    try:
        got = list(loader)
    finally:
        loader.close()
    assert sorted(got, key=lambda s: s["__key__"]) == sorted(want, key=lambda s: s["__key__"])
    assert all(type(s["bin"]) is bytes for s in got)


@pytest.mark.parametrize("interleave", [None, 2])
@pytest.mark.parametrize("first", [(1 << 20) + 1, (1 << 20) - 1, (1 << 20) + 513, 4097, 100])
def test_a_member_whose_data_runs_past_the_window_loses_nothing(tmp_path, first, interleave):
    """The window over the map takes in a member running past it (issue 43): it must go on ending on a block
    boundary, or the next header across its end is taken for a cut shard and the rest of the shard is lost."""
    samples = [{"__key__": "first", "bin": bytes(range(256)) * (first // 256) + b"x" * (first % 256)}]
    samples += [{"__key__": f"k{i:05d}", "txt": b""} for i in range(2500)]
    spec = [write_shard(tmp_path / f"w{s}.tar", samples, ("bin", "txt")) for s in range(2 if interleave else 1)]
    want = list(wds.WebDataset(spec, interleave=interleave, seed=5))
    got = list(wds.WebDataset(spec, interleave=interleave, seed=5, reading=wds.ShardReadOptions(zero_copy=True)))
    assert len(got) == len(want) == 2501 * len(spec) and [as_bytes(s) for s in got] == want
