"""The shard reader's state names positions, never places (issue 56, case 2): a checkpoint keeps the upstream's
position before the shard being read and a digest of each shard held, so that a state edited to name a command or
a file outside the dataset, or restored into a pipeline whose list changed, is refused before anything is opened."""

import copy
import json

import pytest

import wds_core as wds
from tests.conftest import make_samples, write_shard
from wds_core import CheckpointError
from wds_core.sources.reader import shard_digest
from wds_core.testing import check_resume


@pytest.fixture
def data(tmp_path):
    for s in range(4):
        write_shard(tmp_path / f"s-{s}.tar", make_samples(f"s{s}-", 10))
    write_shard(tmp_path / "other.tar", make_samples("other-", 10))
    return tmp_path


def pipeline(data, shuffle=False):
    return wds.WebDataset(str(data / "s-{0..3}.tar"), seed=3, shuffle=shuffle)


def state_after(data, n, shuffle=False):
    ds = pipeline(data, shuffle)
    it = iter(ds)
    for _ in range(n):
        next(it)
    return ds.state_dict()


def rest(ds):
    return [s["__key__"] for s in ds]


def reader_state(state):
    chain = state["chain"]
    while "shards" not in chain:
        chain = chain["parent"]
    return chain


def test_the_state_holds_digests_and_positions_and_resumes_exactly(data):
    state = state_after(data, 13, shuffle=True)
    text = json.dumps(state)
    assert str(data) not in text and ".tar" not in text
    assert reader_state(state)["offset"] > 0 and len(reader_state(state)["shards"]) == 1
    ds = pipeline(data, shuffle=True)
    ds.load_state_dict(state)
    full = rest(pipeline(data, shuffle=True))
    assert rest(ds) == full[13:]


def test_a_state_naming_a_command_runs_nothing(data, tmp_path):
    """The old shape of the state (its URL, and the shards queued ahead) was opened as it said: pipe:touch ran."""
    marker = tmp_path / "ran"
    state = state_after(data, 13)
    edited = copy.deepcopy(state)
    reader_state(edited)["url"] = f"pipe:touch {marker}; cat {data}/other.tar"
    reader_state(edited)["queued"] = [{"url": f"pipe:touch {marker}"}]
    ds = pipeline(data)
    with pytest.raises(CheckpointError, match="names positions, never places"):
        ds.load_state_dict(edited)
        rest(ds)
    assert not marker.exists()


@pytest.mark.parametrize("edit", ["digest", "position", "count"])
def test_an_edited_state_is_refused_before_anything_is_opened(data, edit, monkeypatch):
    state = state_after(data, 13)
    reader = reader_state(state)
    if edit == "digest":
        reader["shards"] = [shard_digest(str(data / "other.tar"))]
    elif edit == "position":
        reader["parent"]["parent"]["parent"]["index"] = 3  # another shard of the list: not the one its digest names
    else:
        reader["shards"] = reader["shards"] * 5  # more shards than the list has from there
    opened = []
    real = wds.io.storage.Storage.open
    monkeypatch.setattr(wds.io.storage.Storage, "open", lambda self, url, *a, **k: opened.append(url) or real(
        self, url, *a, **k))  # fmt: skip
    ds = pipeline(data)
    with pytest.raises(CheckpointError, match="shard list changed since the checkpoint"):
        ds.load_state_dict(state)
        rest(ds)
    assert opened == []


def test_a_state_restored_after_the_list_changed_is_refused(data):
    state = state_after(data, 13)
    other = wds.WebDataset([str(data / f"s-{s}.tar") for s in (0, 2, 1, 3)], seed=3)
    other.load_state_dict(state)
    with pytest.raises(CheckpointError, match="digest differs"):
        rest(other)


def test_shards_read_ahead_are_named_by_digest_and_checked(http_server):
    """Remote shards are taken from the list early (to be requested ahead, four by default): the state holds them
    as digests too, and a restore takes and checks them again."""
    for s in range(6):
        write_shard(f"{http_server.root}/r-{s}.tar", make_samples(f"r{s}-", 6))
    url = f"{http_server.url}/r-{{0..5}}.tar"

    def make():
        return wds.DataPipeline(wds.SimpleShardList(url), wds.tarfile_to_samples(), wds.shuffle(5), seed=3)

    keys = check_resume(make, step=5)
    assert sorted(keys) == sorted(f"r{s}-{i:05d}" for s in range(6) for i in range(6))
    ds = wds.DataPipeline(wds.SimpleShardList(url), wds.tarfile_to_samples())
    it = iter(ds)
    for _ in range(8):
        next(it)
    state = ds.state_dict()
    held = reader_state(state)["shards"]
    assert len(held) == 5 and "r-" not in json.dumps(state)  # the one read and four ahead
    reader_state(state)["shards"][2] = held[1]
    again = wds.DataPipeline(wds.SimpleShardList(url), wds.tarfile_to_samples())
    again.load_state_dict(state)
    with pytest.raises(CheckpointError, match="3. shard's digest differs"):
        rest(again)


def test_a_restored_reader_gives_back_its_state_until_it_starts(data):
    """A loader asks its workers for their state as they start: a reader restored and not started yet is where the
    state put it, its offset and size included."""
    state = state_after(data, 13)
    ds = pipeline(data)
    ds.load_state_dict(state)
    it = iter(ds)  # started, not read from
    assert reader_state(ds.state_dict()) == reader_state(state)
    assert next(it)["__key__"] == "s1-00003"
