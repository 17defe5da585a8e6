"""The shard reader's state names positions, never places (issue 56, case 2): a checkpoint keeps the upstream's
position before the shard being read and a digest of each shard held, so that a state edited to name a command or
a file outside the dataset, or restored into a pipeline whose list changed, is refused before anything is opened."""

import copy
import json
import os
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wds_core as wds
from tests.conftest import make_samples, tar_bytes, write_shard
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


# ---------------------------------------------------------------- issue 66: a state names bytes, checked on restore


def _one_shard(path, keys, members=None):
    """A shard of samples with fixed-size fields, in the order of ``keys`` (and extra ``members`` first)."""
    items = list(members or []) + [(f"{k}.{f}", f"{k}:{f}".encode()) for k in keys for f in ("txt", "cls")]
    path.write_bytes(tar_bytes(items, fmt=tarfile.USTAR_FORMAT))
    return str(path)


def _state_at(url, n, **options):
    ds = wds.WebDataset(url, **options)
    it = iter(ds)
    taken = [next(it)["__key__"] for _ in range(n)]
    return ds.state_dict(), taken


def test_an_offset_edited_into_a_nested_tar_is_refused(tmp_path):
    """Issue 66, case 6: an offset pointing at a member that holds a tar resumed by yielding that tar's members as
    samples and dropping the rest of the epoch."""
    inner = tar_bytes([(f"in{i}.txt", b"nested") for i in range(3)], fmt=tarfile.USTAR_FORMAT)
    url = _one_shard(tmp_path / "n.tar", [f"k{i}" for i in range(6)], [("box.tar", inner)])
    data_at = {m.name: m.offset_data for m in tarfile.open(url)}["box.tar"]
    state, _ = _state_at(url, 2)
    reader_state(state)["offset"] = data_at
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    with pytest.raises(CheckpointError, match="not where the sample it resumes at starts") as failed:
        rest(ds)
    assert failed.value.url == url and failed.value.offset == data_at


@pytest.mark.parametrize("edit", [1, 512, -512, 100_000])
def test_an_offset_that_is_not_where_a_sample_starts_is_refused(tmp_path, edit):
    url = _one_shard(tmp_path / "s.tar", [f"k{i}" for i in range(6)])
    state, _ = _state_at(url, 2)
    reader_state(state)["offset"] += edit  # inside a member, on its second member, past the end
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    with pytest.raises(CheckpointError, match=r"offset [\d,]+ is (not where|at the end)"):
        rest(ds)


def test_a_shard_rewritten_at_the_same_size_is_refused(tmp_path):
    """Issue 66, case 7: fixed-size samples written again in another order keep the size; the resume gave 5
    samples twice and never gave 5 others.  Its modification time tells, and so does the member at the offset."""
    path = tmp_path / "s.tar"
    keys = [f"k{i}" for i in range(10)]
    url = _one_shard(path, keys)
    state, _ = _state_at(url, 5)
    size, then = path.stat().st_size, path.stat().st_mtime_ns
    _one_shard(path, keys[5:] + keys[:5])
    assert path.stat().st_size == size
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    with pytest.raises(CheckpointError, match="changed since the checkpoint: its version was"):
        rest(ds)
    os.utime(path, ns=(then, then))  # the time put back: the member at the offset says it all the same
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    with pytest.raises(CheckpointError, match="the shard has the member 'k0.txt'"):
        rest(ds)


def test_a_shard_copied_since_resumes_when_versions_are_not_checked(tmp_path):
    path = tmp_path / "s.tar"
    keys = [f"k{i}" for i in range(10)]
    url = _one_shard(path, keys)
    state, taken = _state_at(url, 4)
    path.write_bytes(path.read_bytes())  # the same bytes, a new modification time
    os.utime(path, ns=(1, 1))
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    with pytest.raises(CheckpointError, match="check_versions=False"):
        rest(ds)
    ds = wds.WebDataset(url, reading=wds.ShardReadOptions(check_versions=False))
    ds.load_state_dict(state)
    assert rest(ds) == keys[4:]


def test_a_checkpoint_error_is_never_the_handler_s_to_skip(tmp_path):
    url = _one_shard(tmp_path / "s.tar", [f"k{i}" for i in range(6)])
    state, _ = _state_at(url, 2)
    reader_state(state)["offset"] += 512
    ds = wds.WebDataset(url, reading=wds.ShardReadOptions(handler=wds.ignore_and_continue))
    ds.load_state_dict(state)
    with pytest.raises(CheckpointError):
        rest(ds)


def test_a_remote_shard_replaced_since_the_checkpoint_is_refused(http_server):
    """An object's ETag (or Last-Modified) is its version: the first range of the restore says it, no extra
    request."""
    path = f"{http_server.root}/e.tar"
    keys = [f"k{i}" for i in range(10)]
    _one_shard(__import__("pathlib").Path(path), keys)
    url = f"{http_server.url}/e.tar"
    state, _ = _state_at(url, 3)
    assert reader_state(state)["version"].startswith(("etag:", "modified:"))
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    assert rest(ds) == keys[3:]
    _one_shard(__import__("pathlib").Path(path), keys[::-1])
    os.utime(path, (1_900_000_000, 1_900_000_000))
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    with pytest.raises(CheckpointError, match="changed since the checkpoint|not where the sample"):
        rest(ds)


def test_a_state_of_an_older_wds_resumes_with_a_warning(tmp_path):
    """A run upgraded mid-epoch keeps its place: its state does not name the bytes it resumes at, and says so."""
    keys = [f"k{i}" for i in range(6)]
    url = _one_shard(tmp_path / "s.tar", keys)
    state, _ = _state_at(url, 2)
    for name in ("member", "version", "names_bytes"):
        del reader_state(state)[name]
    del reader_state(state)["parent"]["parent"]["parent"]["next"]
    ds = wds.WebDataset(url)
    ds.load_state_dict(state)
    with pytest.warns(UserWarning) as warned:
        assert rest(ds) == keys[2:]
    said = " ".join(str(w.message) for w in warned)
    assert "without saying which member is there" in said and "does not name the shard there" in said
    assert said.count("a checkpoint of an older wds") == 2


EDITS = st.sampled_from(["offset", "member", "version", "size", "shards", "index", "plain", "nshards", "epoch"])


@given(st.integers(1, 17), st.lists(st.tuples(EDITS, st.integers(-3000, 3000)), min_size=1, max_size=3))
def test_any_edit_of_a_state_resumes_exactly_or_raises(n, edits):
    """A property: a state taken after ``n`` samples and edited at random (its offset, the member there, the shard's
    version and size, the digests of its shards, the list's position and length, the epoch) either resumes to
    exactly what an uninterrupted run gives, or is refused with a CheckpointError; never another stream."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        urls = []
        for s in range(3):
            urls.append(_one_shard(__import__("pathlib").Path(folder) / f"p{s}.tar", [f"s{s}k{i}" for i in range(6)]))
        spec = folder + "/p{0..2}.tar"
        full = rest(wds.WebDataset(spec))
        state, taken = _state_at(spec, n)
        reader = state["chain"]
        while "offset" not in reader:
            reader = reader["parent"]
        for what, by in edits:
            if what == "offset":
                reader["offset"] = max(reader["offset"] + by, 1)
            elif what in ("member", "version"):
                reader[what] = f"{reader.get(what)}{by}"
            elif what == "size":
                reader["size"] = reader.get("size", 0) + by
            elif what == "shards":
                reader["shards"] = [shard_digest(urls[by % 3])]
            elif what == "plain":
                reader["plain"] = not reader.get("plain", False)
            else:
                found = state["chain"]
                while found is not None and "index" not in found:
                    found = found.get("parent")
                if found is not None:
                    key = {"index": "index", "nshards": "nshards", "epoch": "epoch"}[what]
                    found[key] = found.get(key, 0) + (by % 5 or 1)
        ds = wds.WebDataset(spec)
        try:
            ds.load_state_dict(state)
            resumed = rest(ds)
        except CheckpointError:
            return
        assert taken + resumed == full, edits
