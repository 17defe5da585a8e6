"""wds_core.dist: rank, world size and worker from a provider, the environment or nothing; the seeds of streams."""

import pytest

from wds_core import dist
from wds_core.state import RunContext


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "WORKER", "NUM_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    yield
    dist.set_node_info_provider(None)
    dist.set_worker_info_provider(None)


def test_one_process_alone_when_nothing_says_otherwise():
    assert dist.node_info() == (0, 1) and dist.worker_info() == (0, 1)


def test_webdataset_s_environment_variables(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("WORKER", "1")
    monkeypatch.setenv("NUM_WORKERS", "4")
    assert dist.node_info() == (3, 8) and dist.worker_info() == (1, 4)
    monkeypatch.delenv("WORLD_SIZE")
    assert dist.node_info() == (0, 1)  # half a pair says nothing


def test_a_provider_comes_first_and_none_from_it_falls_through(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    dist.set_node_info_provider(lambda: (5, 6))
    dist.set_worker_info_provider(lambda: (2, 3))
    assert dist.node_info() == (5, 6) and dist.worker_info() == (2, 3)
    dist.set_node_info_provider(lambda: None)
    assert dist.node_info() == (3, 8)


def test_a_drawn_seed_is_agreed_between_ranks_and_a_chosen_one_kept():
    assert dist.agreed_seed(1234, given=False) == 1234  # one rank: its own draw is fine
    dist.set_node_info_provider(lambda: (1, 4))
    assert dist.agreed_seed(1234, given=False) == 0 and dist.agreed_seed(1234, given=True) == 1234


def test_streams_agree_across_readers_before_a_splitter_and_differ_after():
    before, after = RunContext(seed=7, stage=2), RunContext(seed=7, stage=2, per_reader=True)
    seeds = {}
    for rank in range(2):
        for worker in range(2):
            dist.set_node_info_provider(lambda rank=rank: (rank, 2))
            dist.set_worker_info_provider(lambda worker=worker: (worker, 2))
            seeds[rank, worker] = (dist.stream_seed(None, before, "shuffle"), dist.stream_seed(None, after, "shuffle"))
    assert len({shared for shared, _ in seeds.values()}) == 1
    assert len({own for _, own in seeds.values()}) == 4
    assert dist.stream_seed(None, before, "shuffle") != dist.stream_seed(None, RunContext(7, 1, 2), "shuffle")
    assert dist.stream_seed(5, before, "shuffle") != dist.stream_seed(None, before, "shuffle")


def test_process_running():
    import os

    assert dist.process_running(os.getpid()) and not dist.process_running(2**22 + 12345)
