"""Reading many shards at once (wds_core.sources.interleave): every sample once per epoch on every rank and worker,
batches that mix as many shards as a global shuffle, bounded memory, the handler's say, remote lanes, resume.
Exact resume at every step is also in tests/core/test_checkpoint.py's oracle."""

import os
import time
import tracemalloc

import pytest

import wds_core as wds
from wds_core import CheckpointError, TruncatedShardError
from wds_core.dist import set_node_info_provider, set_worker_info_provider
from wds_core.elastic import merge_states
from wds_core.handlers import warn_and_continue
from wds_core.io.remote.readahead import ReadAhead
from wds_core.observe.shufflestats import shuffle_quality, storage_order
from wds_core.sources.interleave import lane_read_ahead, lanes_allowance
from wds_core.testing import check_resume


def _write(path, keys, size=0):
    with wds.TarWriter(str(path)) as sink:
        for number, key in enumerate(keys):
            sink.write({"__key__": key, "cls": number, **({"bin": bytes([number % 256]) * size} if size else {})})


@pytest.fixture(scope="module")
def ordered(tmp_path_factory):
    """200 shards of 100 samples, stored in order: the shuffle-quality setting of issue 32."""
    root = tmp_path_factory.mktemp("ordered")
    stored = [[f"s{s:03d}_{i:03d}" for i in range(100)] for s in range(200)]
    for number, keys in enumerate(stored):
        _write(root / f"s{number:03d}.tar", keys)
    return str(root / "s{000..199}.tar"), stored


@pytest.fixture
def uneven(tmp_path):
    """13 shards of 0 to 24 samples."""
    keys = []
    for s in range(13):
        mine = [f"u{s:02d}_{i:02d}" for i in range((s * 7) % 25)]
        _write(tmp_path / f"u{s:02d}.tar", mine)
        keys += mine
    return str(tmp_path / "u{00..12}.tar"), keys


@pytest.fixture
def layout():
    """Sets (rank, world) and (worker, workers) for the stages that ask."""

    def use(rank, world, worker, workers):
        set_node_info_provider(lambda: (rank, world))
        set_worker_info_provider(lambda: (worker, workers))

    yield use
    set_node_info_provider(None)
    set_worker_info_provider(None)


@pytest.mark.parametrize("world, workers", [(1, 1), (2, 1), (3, 2)])
def test_every_sample_once_per_epoch_on_every_rank_and_worker(uneven, layout, world, workers):
    spec, keys = uneven
    orders = []
    for epoch in range(2):
        seen = []
        for rank in range(world):
            for worker in range(workers):
                layout(rank, world, worker, workers)
                dataset = wds.WebDataset(spec, seed=5, interleave=4, empty_check=False, shuffle=True)
                dataset.set_epoch(epoch)
                seen += [s["__key__"] for s in dataset.shuffle(10)]
        assert sorted(seen) == sorted(keys)
        orders.append(seen)
    assert orders[0] != orders[1]  # each epoch draws anew


def test_a_batch_mixes_as_many_shards_as_a_global_shuffle(ordered):
    """With 1,000 samples held (800 in the buffer, one a lane), a batch of 256 holds at least 0.9 of the distinct
    shards of a global shuffle; the common shardshuffle + shuffle(1000) holds a quarter."""
    spec, stored = ordered
    storage = storage_order(stored)
    mixed = [s["__key__"] for s in wds.WebDataset(spec, seed=0, interleave=200, shuffle=True).shuffle(800)]
    common = [s["__key__"] for s in wds.WebDataset(spec, seed=0, shuffle=True).shuffle(1000)]
    assert sorted(mixed) == sorted(common) == sorted(storage)
    assert shuffle_quality(mixed, storage, 256).diversity_ratio >= 0.9
    assert shuffle_quality(common, storage, 256).diversity_ratio <= 0.3


def test_a_lane_holds_one_sample_ahead(tmp_path):
    """What reading 40 shards at once holds beside the samples taken: about one 20 KB sample a lane, where a
    reader of one shard at a time reads a megabyte ahead."""
    for s in range(40):
        _write(tmp_path / f"m{s:02d}.tar", [f"m{s:02d}_{i:02d}" for i in range(60)], size=20_000)
    spec = str(tmp_path / "m{00..39}.tar")

    def peak(dataset):
        tracemalloc.start()
        try:
            for _ in dataset:
                pass
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    lanes = peak(wds.WebDataset(spec, seed=1, interleave=40, shuffle=True))
    assert lanes < 40 * (2 * 20_000 + 16_000)
    assert peak(wds.WebDataset(spec, seed=1)) > 40 * 20_000  # one shard at a time reads far ahead


@pytest.mark.filterwarnings("ignore:skipped after")
def test_the_handler_decides_about_a_bad_shard(tmp_path):
    for s in range(4):
        _write(tmp_path / f"h{s}.tar", [f"h{s}_{i:02d}" for i in range(20)], size=3000)
    bad = tmp_path / "h2.tar"
    bad.write_bytes(bad.read_bytes()[:20_000])  # cut inside its fifth sample (4,608 bytes each)
    spec = str(tmp_path / "h{0..3}.tar")
    with pytest.raises(TruncatedShardError) as caught:
        list(wds.WebDataset(spec, seed=2, interleave=4))
    assert caught.value.url == str(bad) and caught.value.offset is not None
    skipped = [
        s["__key__"]
        for s in wds.WebDataset(spec, seed=2, interleave=4, reading=wds.ShardReadOptions(handler=warn_and_continue))
    ]
    assert sorted(k for k in skipped if not k.startswith("h2")) == sorted(
        f"h{s}_{i:02d}" for s in (0, 1, 3) for i in range(20)
    )
    assert {k for k in skipped if k.startswith("h2")} == {f"h2_{i:02d}" for i in range(4)}  # those before the cut
    stopped = [
        s["__key__"]
        for s in wds.WebDataset(spec, seed=2, interleave=4, reading=wds.ShardReadOptions(handler=lambda exn: False))
    ]
    assert len(stopped) < 60 and {f"h2_{i:02d}" for i in range(4)} <= set(stopped)  # False ends the whole stream


@pytest.mark.slow
def test_remote_lanes_read_every_sample_once_in_the_local_order_and_resume(http_server):
    root, base = http_server.root, http_server.url
    keys = []
    for s in range(6):
        mine = [f"r{s}_{i:02d}" for i in range(9)]
        _write(os.path.join(root, f"r{s}.tar"), mine, size=5000)
        keys += mine
    spec = base + "/r{0..5}.tar"
    # a budget of two ranges a lane: the lanes' streams are still requesting when the run is closed
    plan = ReadAhead(first_range=4096, range_bytes=8192, shards_ahead=2, budget=48 << 10)
    storage = wds.Storage(read_ahead=plan)
    make = lambda: wds.WebDataset(spec, seed=3, interleave=3, shuffle=True, storage=storage).shuffle(5)  # noqa: E731
    remote = check_resume(make, step=5)
    assert sorted(remote) == sorted(keys)
    # the draws do not depend on where the shards are: the same epoch as from the local files
    local = wds.WebDataset(os.path.join(root, "r{0..5}.tar"), seed=3, interleave=3, shuffle=True).shuffle(5)
    assert [s["__key__"] for s in local] == remote
    # a run ended early (DataPipeline.close) closes every lane's stream and those opened ahead: nothing stays
    # requested
    dataset = make()
    items = iter(dataset)
    next(items)  # one lane started; the two others hold the streams opened ahead for them
    allowance = dict(dataset.running_stages())["tarfile_to_samples"].allowance
    assert allowance.windows
    dataset.close()
    deadline = time.monotonic() + 5
    while allowance.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert allowance.running == allowance.pending == allowance.held == 0 and not allowance.windows


def test_remote_lanes_share_the_budget_and_each_keeps_within_its_window():
    plan = lane_read_ahead(ReadAhead(), 200)
    assert plan.range_bytes == 256 << 10 and plan.budget == 128 << 20 and plan.ramp == 0
    assert plan.window_bytes == (128 << 20) // 200  # an equal part of the budget: less than three ranges
    assert plan.max_range == plan.range_bytes  # a lane's ranges do not grow past its part
    few = lane_read_ahead(ReadAhead(), 8)  # lanes draw on the budget by need: few lanes read as one shard does
    assert few.window_bytes == 16 << 20 and few.range_bytes == 2 << 20  # an eighth of the budget, in eight ranges
    assert lane_read_ahead(ReadAhead(), 64).range_bytes == 512 << 10  # a quarter of each lane's 2 MiB
    assert lanes_allowance(ReadAhead(), 4).in_flight == 24  # 2 MiB ranges: as many as one shard keeps in flight
    assert lanes_allowance(ReadAhead(), 64).in_flight == 64  # 4 x 24 ranges of 512 KiB, up to the pool's threads
    crowded = lane_read_ahead(ReadAhead(budget=16 << 20), 200)
    assert crowded.window_bytes == crowded.first_range  # an equal part of the budget, at least a first range


def test_elastic_resume_is_refused_through_it(uneven, layout):
    spec, _ = uneven
    layout(0, 1, 0, 1)
    dataset = wds.WebDataset.balanced(spec, seed=4, interleave=3, how="pad")
    items = iter(dataset)
    next(items)
    with pytest.raises(CheckpointError, match="does not keep track"):
        merge_states([dataset.state_dict()])


def test_bad_settings_are_refused(uneven):
    spec, _ = uneven
    for lanes in (0, -1, 1.5, True):
        with pytest.raises(wds.SpecError, match="interleave must be an integer >= 1"):
            wds.WebDataset(spec, interleave=lanes)
    with pytest.raises(wds.SpecError, match="a list of shards"):
        wds.WebDataset({"datasets": [{"shards": spec}]}, interleave=2)
    with pytest.raises(ValueError, match="window_bytes"):
        ReadAhead(window_bytes=0)


def test_it_reads_what_one_shard_at_a_time_reads(uneven):
    """The same samples, member for member, as the plain reader."""
    spec, _ = uneven
    plain = {s["__key__"]: s for s in wds.WebDataset(spec)}
    mixed = {s["__key__"]: s for s in wds.WebDataset(spec, interleave=5)}
    assert plain == mixed


def test_it_is_a_pipeline_stage(uneven):
    spec, keys = uneven
    pipeline = wds.DataPipeline(wds.SimpleShardList(spec, seed=6), wds.InterleaveShards(3), wds.shuffle(20), seed=6)
    assert sorted(s["__key__"] for s in pipeline) == sorted(keys)
    assert "tarfile_to_samples" in [name for name, _ in _stages(pipeline)]


def _stages(pipeline):
    items = iter(pipeline)
    next(items)
    return pipeline.running_stages()


def test_zero_copy_lanes(uneven):
    spec, keys = uneven
    got = {
        s["__key__"]: bytes(s["cls"])
        for s in wds.WebDataset(spec, interleave=4, reading=wds.ShardReadOptions(zero_copy=True))
    }
    assert sorted(got) == sorted(keys)
