"""Reading shards from real servers on loopback: HTTP with Range, S3 (moto), GCS (emulator), with faults."""

import json
import os
import pickle
import time

import pytest

import wds_core
from tests.conftest import make_samples, write_shard
from wds_core.errors import ShardNotFoundError, ShardOpenError
from wds_core.io.backends.fsspec import FsspecSource, reading_filesystem
from wds_core.io.remote.rangestream import RangeStream, RetryPolicy, is_transient
from wds_core.io.remote.readahead import ReadAhead
from wds_core.io.storage import open_shard
from wds_core.sources.reader import shard_digest

FAST = RetryPolicy(attempts=6, initial_delay=0.01, max_delay=0.05)


def outlasting(faults: int) -> RetryPolicy:
    """Enough attempts for one range to meet every injected fault: the ranges in flight take the requests served
    between two faults while one waits to retry, so a range can meet many in a row (CI saw four)."""
    return RetryPolicy(attempts=faults + 1, initial_delay=0.01, max_delay=0.05)


def local_dataset(directory, nshards=3, nsamples=40, size=3000):
    """Shards with sizeable members (several read ranges each); returns paths and the expected multiset."""
    paths, expected = [], []
    for s in range(nshards):
        samples = make_samples(f"s{s}-", nsamples)
        for i, sample in enumerate(samples):
            sample["bin"] = bytes([i % 251]) * (size + i)
        paths.append(write_shard(os.path.join(directory, f"shard-{s:03d}.tar"), samples, ("txt", "cls", "bin")))
        expected += [tuple(sorted((k, v) for k, v in x.items() if k != "__url__")) for x in samples]
    return paths, sorted(expected)


def contents(samples):
    return sorted(
        tuple(sorted((k, v) for k, v in x.items() if k not in ("__url__", "__local_path__"))) for x in samples
    )


def read_with(monkeypatch, plan):
    """Read remote shards with the read-ahead ``plan``."""
    original = wds_core.io.remote.rangestream.open_remote

    def opener(source, url, retry, default=None, stats=None):
        return original(source, url, retry, plan, stats)

    monkeypatch.setattr(wds_core.io.backends.ranged, "open_remote", opener)
    # what a reader's shards may request together: the read-ahead of every storage context made from here on
    init = wds_core.io.storage.Storage.__init__
    names = init.__code__.co_varnames[1 : init.__code__.co_argcount]
    defaults = list(init.__defaults__)
    defaults[names.index("read_ahead") - (len(names) - len(defaults))] = plan
    monkeypatch.setattr(init, "__defaults__", tuple(defaults))


def small_ranges(monkeypatch, size=4096):
    """Read remote objects by small ranges, so that one shard takes many requests (several in flight)."""
    read_with(monkeypatch, ReadAhead(size, size, 4, 8 * size, shards_ahead=1, max_range=size))


# ---------------------------------------------------------------- HTTP


def test_http_shards_read_like_local_ones(http_server):
    paths, expected = local_dataset(http_server.root)
    url = http_server.url + "/shard-{000..002}.tar"
    samples = list(wds_core.WebDataset(url))
    assert contents(samples) == expected
    assert samples[0]["__url__"] == http_server.url + "/shard-000.tar"


@pytest.mark.parametrize(
    "nshards, plan, spacing, cuts, fails",
    [
        (3, ReadAhead(4096, 4096, 4, 8 * 4096), 3, [(4, 1000), (2, 0)], [(3, 503), (1, 429)]),
        # 16 ranges outstanding and the next shard requested ahead (a cut after 1,500 bytes of a 1,024-byte
        # first range loses nothing: it is not always a retry)
        (4, ReadAhead(1024, 4096, 16, 1 << 20), 5, [(6, 1500), (3, 0)], [(4, 503), (2, 500)]),
    ],
)
def test_http_faults_lose_and_repeat_nothing(http_server, monkeypatch, nshards, plan, spacing, cuts, fails):
    """Resets, short bodies and 5xx among the ranges in flight: every sample once."""
    _, expected = local_dataset(http_server.root, nshards=nshards)
    read_with(monkeypatch, plan)
    http_server.faults.spacing = spacing
    for (times, after), (count, status) in zip(cuts, fails):
        http_server.faults.cut(times, after=after)
        http_server.faults.fail(count, status=status)
    url = http_server.url + f"/shard-{{000..{nshards - 1:03d}}}.tar"
    injected = {"cut": sum(t for t, _ in cuts), "status": sum(c for c, _ in fails)}
    dataset = wds_core.WebDataset(url, storage=wds_core.Storage(retry=outlasting(sum(injected.values()))))
    got = list(dataset)
    assert contents(got) == expected and len(got) == len(expected)
    assert http_server.faults.injected == injected
    assert dataset.stats["gave_up"] == 0
    assert dataset.stats["retries"] >= injected["status"] + sum(t for t, after in cuts if after == 0)


def test_http_server_that_ignores_range_still_gives_the_right_bytes(tmp_path, monkeypatch):
    from tests.servers import HttpServer

    server = HttpServer(str(tmp_path))
    server.honour_range = False
    try:
        _, expected = local_dataset(str(tmp_path), nshards=1)
        small_ranges(monkeypatch, 10_000)
        assert contents(wds_core.WebDataset(server.url + "/shard-000.tar")) == expected
    finally:
        server.stop()


def test_http_retry_budget_spent_names_url_and_offset_not_secrets(http_server, monkeypatch):
    local_dataset(http_server.root, nshards=1)
    small_ranges(monkeypatch)
    url = http_server.url + "/shard-000.tar?token=TOPSECRET&x=1"
    stream = open_shard(url, retry=RetryPolicy(attempts=3, initial_delay=0.001))
    stream.read(4096)
    http_server.faults.fail(10, status=503)
    with pytest.raises(ShardOpenError) as info:
        # the ranges asked for before the faults began arrive: up to the budget (8 ranges) past the one read
        for _ in range(40):
            stream.read(4096)
    stream.close()
    message = str(info.value)
    assert info.value.offset in range(4096, 4096 + 8 * 4096 + 1, 4096)
    assert "TOPSECRET" not in message and "token=***" in message
    assert "after 3 attempts" in message and f"offset {info.value.offset}" in message and "503" in message


def test_retries_are_logged_counted_and_held_to_the_budget(http_server, monkeypatch, caplog):
    import logging

    from wds_core.io.remote import retries

    _, expected = local_dataset(http_server.root, nshards=1)
    small_ranges(monkeypatch)
    monkeypatch.setattr(retries, "_said", {"at": -100.0, "quiet": 0})
    before = retries.retry_stats()
    http_server.faults.fail(3, status=503)
    url = http_server.url + "/shard-000.tar?token=TOPSECRET"
    with caplog.at_level(logging.WARNING, logger="wds_core.io"):
        samples = list(wds_core.WebDataset(url, storage=wds_core.Storage(retry=FAST)))
    assert contents(samples) == expected and len(samples) == 40
    after = retries.retry_stats()
    assert after["retries"] - before["retries"] == 3 and after["recovered"] - before["recovered"] == 1
    dataset = wds_core.WebDataset(
        url, storage=wds_core.Storage(retry=FAST)
    )  # the same counts on the reading stage, for this dataset only
    http_server.faults.fail(2, status=503)
    assert len(list(dataset)) == 40 and dataset.stats == {"retries": 2, "recovered": 1}
    assert pickle.loads(pickle.dumps(dataset)).stats == {}  # a worker's copy counts its own
    said = [r.getMessage() for r in caplog.records if r.name == "wds_core.io"]
    assert len(said) == 1, said  # rate-limited: one message for three retries within seconds
    assert "retrying read bytes" in said[0] and "attempt 2 of" in said[0] and "503" in said[0]
    assert "TOPSECRET" not in said[0]
    http_server.faults.fail(10_000, status=503)  # down for good: the budget, not 50 attempts, ends it
    started = time.monotonic()
    with pytest.raises(ShardOpenError, match=r"the retry budget is 0.5 s"):
        list(
            wds_core.WebDataset(
                url,
                storage=wds_core.Storage(
                    None, retry=RetryPolicy(attempts=50, initial_delay=0.05, max_delay=0.1, budget=0.5)
                ),
            )
        )
    # ended by the budget (the message says so), long before 50 attempts' 4.9 s of back-off
    assert time.monotonic() - started < 30 and retries.retry_stats()["gave_up"] > before["gave_up"]


def test_http_missing_and_forbidden_are_not_retried(http_server):
    started = time.monotonic()
    with pytest.raises(ShardNotFoundError):
        open_shard(http_server.url + "/nope.tar").read(1)  # nothing is requested before the first read
    with pytest.raises(ShardNotFoundError):
        list(wds_core.WebDataset(http_server.url + "/nope.tar"))
    assert time.monotonic() - started < 1.0  # no backoff for a missing object


def test_http_checkpoint_resumes_inside_the_shard(http_server, monkeypatch):
    local_dataset(http_server.root, nshards=2)
    small_ranges(monkeypatch)
    url = http_server.url + "/shard-{000..001}.tar"
    reference = [s["__key__"] for s in wds_core.WebDataset(url)]
    dataset = wds_core.WebDataset(url)
    stream = iter(dataset)
    head = [next(stream)["__key__"] for _ in range(57)]
    state = dataset.state_dict()
    assert state["chain"] is not None
    fresh = wds_core.WebDataset(url)
    fresh.load_state_dict(state)
    assert head + [s["__key__"] for s in fresh] == reference


# ---------------------------------------------------------------- S3


def upload(fs, paths, prefix):
    for path in paths:
        fs.put_file(path, f"{prefix}/{os.path.basename(path)}")


@pytest.fixture
def s3_data(s3, tmp_path):
    """The same kind of dataset in bucket team-a (shards 0-2) and team-b (shards 3-4)."""
    import s3fs

    paths, _ = local_dataset(str(tmp_path), nshards=5)
    for bucket, part in (("team-a", paths[:3]), ("team-b", paths[3:])):
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3[bucket].client_options(bucket))
        upload(fs, part, f"{bucket}/data")
    return paths


def test_s3_two_endpoints_two_keys_explicit_options(s3, s3_data):
    options = {f"s3://{b}/": s3[b].client_options(b) for b in ("team-a", "team-b")}
    urls = ["s3://team-a/data/shard-{000..002}.tar", "s3://team-b/data/shard-{003..004}.tar"]
    before = {b: dict(s3[b].requests) for b in s3}
    samples = list(wds_core.WebDataset(urls, storage=options))
    assert contents(samples) == contents_of(s3_data)
    for bucket, key in (("team-a", "AKIDTEAMA"), ("team-b", "AKIDTEAMB")):
        used = {k for k, n in s3[bucket].requests.items() if n > before[bucket].get(k, 0)}
        assert used == {(bucket, key)}


def contents_of(paths):
    return contents(wds_core.WebDataset(paths))


def test_s3_options_registered_in_code(s3, s3_data):
    for bucket in ("team-a", "team-b"):
        wds_core.register_storage(f"s3://{bucket}/", **s3[bucket].client_options(bucket))
    urls = "s3://team-a/data/shard-{000..002}.tar::s3://team-b/data/shard-{003..004}.tar"
    assert contents(wds_core.WebDataset(urls)) == contents_of(s3_data)


def test_s3_options_from_config_file(s3, s3_data, tmp_path, monkeypatch):

    config = tmp_path / "wds.yaml"
    entries = [{"prefix": f"s3://{b}/", "options": s3[b].client_options(b)} for b in ("team-a", "team-b")]
    config.write_text(json.dumps({"storage": entries}))  # JSON is YAML
    monkeypatch.setenv("WDS_CONFIG", str(config))
    urls = ["s3://team-b/data/shard-003.tar", "s3://team-a/data/shard-001.tar"]
    assert contents(wds_core.WebDataset(urls)) == contents_of([s3_data[3], s3_data[1]])


def test_s3_wrong_key_is_a_clear_error_without_the_secret(s3, s3_data):
    options = s3["team-b"].client_options("team-b")
    options["client_kwargs"] = dict(options["client_kwargs"], endpoint_url=s3["team-a"].endpoint)
    options["secret"] = "VERY-SECRET-VALUE"
    with pytest.raises(ShardOpenError) as info:
        list(wds_core.WebDataset("s3://team-a/data/shard-000.tar", storage=wds_core.Storage(options, retry=FAST)))
    assert "VERY-SECRET-VALUE" not in str(info.value) and "AKIDTEAMB" not in repr(info.value.__dict__)
    assert "s3://team-a/data/shard-000.tar" in str(info.value)


@pytest.mark.slow
def test_s3_faults_beyond_s3fs_own_retries_lose_nothing(s3, s3_data, monkeypatch):
    small_ranges(monkeypatch, 16384)
    wds_core.register_storage("s3://team-a/", **s3["team-a"].client_options("team-a"))
    faults = s3["team-a"].faults
    faults.spacing = 2
    faults.cut(3, after=5000)
    faults.fail(8, status=503)  # more than s3fs retries on its own
    faults.cut(2, after=10)
    dataset = wds_core.WebDataset(
        "s3://team-a/data/shard-{000..002}.tar", storage=wds_core.Storage(retry=outlasting(13))
    )
    assert contents(dataset) == contents_of(s3_data[:3])
    assert faults.injected["cut"] == 5 and faults.injected["status"] == 8


def test_s3_backend_retries_are_off_the_policy_is_the_only_loop(s3, s3_data):
    server = s3["team-a"]
    options = server.client_options("team-a")
    url = "s3://team-a/data/shard-000.tar"
    server.faults.fail(10_000, status=503)
    try:
        before = len(server.reads)
        with pytest.raises(ShardOpenError, match="after 3 attempts"):
            list(
                wds_core.WebDataset(
                    url, storage=wds_core.Storage(options, retry=RetryPolicy(attempts=3, initial_delay=0.01))
                )
            )
        assert len(server.reads) - before == 3  # one GET an attempt (botocore and s3fs would make 5 each)
    finally:
        server.faults.clear()
    # the user's own filesystem (other options, so another instance) keeps s3fs's retries
    import s3fs

    assert s3fs.S3FileSystem(**options).retries == s3fs.S3FileSystem.retries
    ours, _ = reading_filesystem(url, options)
    assert ours.retries == 1 and ours.config_kwargs["retries"]["total_max_attempts"] == 1
    # retries the options ask for are the user's: kept (a budget bounds them, as the next test shows)
    own = {**options, "config_kwargs": {"retries": {"max_attempts": 3, "mode": "standard"}}}
    theirs, _ = reading_filesystem(url, own)
    assert theirs.retries == s3fs.S3FileSystem.retries and theirs.config_kwargs["retries"]["max_attempts"] == 3


@pytest.fixture
def silent_server():
    """A port that accepts connections and never answers (a hung server)."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held = []

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    for conn in held:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["s3", "http", "ftp"])
def test_the_budget_cuts_off_an_attempt_that_hangs(silent_server, scheme):
    """ftp (issue 28): the backend connects when it is made, which was outside the budget (30 s, a raw
    TimeoutError); it is a request of the policy now."""
    if scheme == "s3":
        url, options = "s3://b/x.tar", {"key": "k", "secret": "s", "endpoint_url": f"http://{silent_server}"}
    else:
        url, options = f"{scheme}://{silent_server}/x.tar", {}
    dataset = wds_core.WebDataset(url, storage=wds_core.Storage(options, retry=RetryPolicy(attempts=5, budget=1.5)))
    started = time.monotonic()
    with pytest.raises(ShardOpenError, match=r"after 1 attempt in .*the retry budget is 1.5 s.*cut off") as info:
        list(dataset)
    # without the cut-off the backend waits out its own read timeout (60 s), retries included
    assert time.monotonic() - started < 20 and info.value.offset == (None if scheme == "ftp" else 0)
    assert dataset.stats["gave_up"] == 1 and dataset.stats["retries"] == 0


def test_s3_pipeline_pickles_for_spawned_workers_without_losing_options(s3, s3_data):
    wds_core.register_storage("s3://team-a/", **s3["team-a"].client_options("team-a"))
    dataset = wds_core.WebDataset("s3://team-a/data/shard-000.tar")
    data = pickle.dumps(dataset)
    wds_core.unregister_storage()
    assert contents(pickle.loads(data)) == contents_of(s3_data[:1])


# ---------------------------------------------------------------- GCS


def test_gcs_through_the_emulator(gcs_server, tmp_path):
    import gcsfs

    paths, expected = local_dataset(str(tmp_path), nshards=2)
    fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **gcs_server.client_options())
    upload(fs, paths, "gbucket/set")
    wds_core.register_storage("gs://gbucket/", **gcs_server.client_options())
    assert contents(wds_core.WebDataset("gs://gbucket/set/shard-{000..001}.tar")) == expected


# ---------------------------------------------------------------- units


def test_range_stream_reads_and_seeks_across_ranges():
    import fsspec

    data = bytes(range(256)) * 400
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/range/x.bin", data)
    asked = []
    fetch = fs.cat_file
    fs.cat_file = lambda path, start, end, **kw: asked.append((start, end)) or fetch(path, start=start, end=end)
    plan = ReadAhead(1000, 4000, 3, 9000, ramp=0)
    stream = RangeStream(FsspecSource(fs, "/range/x.bin"), "memory://range/x.bin", len(data), FAST, plan)
    got, pos = [], 0
    for size in [1, 999, 1, 2500, 7, 0, 10_000, 100_000]:
        got.append(stream.read(size))
        pos += len(got[-1])
        assert stream.tell() == pos
    assert b"".join(got) == data
    ranges = sorted(asked)  # the I/O threads ask in the order they run: under load, not always the plan's
    assert ranges[:3] == [(0, 1000), (1000, 5000), (5000, 9000)]  # a small first range, then larger ones ahead
    assert [end - start for start, end in ranges[1:-1]] == [4000] * (len(ranges) - 2)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # each byte asked for once
    assert stream.read(10) == b""
    del asked[:]
    assert stream.seek(50_000) == 50_000 and stream.read(5) == data[50_000:50_005]
    assert asked[0] == (50_000, 51_000)  # a seek starts again from a small range at the new position
    assert stream.read(2995) == data[50_005:53_000]
    assert stream.seek(49_000) == 49_000 and stream.read(5) == data[49_000:49_005]
    stream.seek(-10, os.SEEK_END)
    assert stream.read() == data[-10:]
    stream.close()


def test_transient_errors_are_told_apart():
    assert is_transient(ConnectionResetError())
    assert is_transient(TimeoutError())
    assert not is_transient(FileNotFoundError())
    assert not is_transient(PermissionError())

    class Status(Exception):
        def __init__(self, status):
            self.status = status

    assert is_transient(Status(503)) and is_transient(Status(429)) and not is_transient(Status(403))
    assert not is_transient(ValueError("bad"))
    botocore = pytest.importorskip("botocore.exceptions")
    assert not is_transient(botocore.NoCredentialsError())
    assert is_transient(botocore.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"))
    assert is_transient(botocore.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"))
    aiohttp = pytest.importorskip("aiohttp")
    assert is_transient(aiohttp.ClientPayloadError("cut")) and is_transient(aiohttp.ServerDisconnectedError())


def test_unknown_protocol_names_itself():
    with pytest.raises(ShardOpenError, match="no storage backend for nosuch://"):
        open_shard("nosuch://bucket/a.tar")


class _Counting:
    """A filesystem that counts the requests made to the one it wraps."""

    def __init__(self, fs):
        self.fs, self.calls = fs, []

    def cat_file(self, path, start=None, end=None):
        self.calls.append(("range", start, end))
        return self.fs.cat_file(path, start=start, end=end)

    def info(self, path):
        self.calls.append(("info",))
        return self.fs.info(path)


def test_a_shard_within_the_first_range_costs_one_request():
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.pipe_file("/lazy/small.bin", b"x" * 999)
    fs = _Counting(memory)
    stream = RangeStream(
        FsspecSource(fs, "/lazy/small.bin"), "memory://lazy/small.bin", None, FAST, ReadAhead(1000, 4000, 4)
    )
    assert stream.read() == b"x" * 999 and stream.read(5) == b""
    assert fs.calls == [("range", 0, 1000)] and stream.size == 999


def test_a_larger_shard_learns_its_size_while_reading():
    import fsspec

    data = bytes(range(256)) * 40
    memory = fsspec.filesystem("memory")
    memory.pipe_file("/lazy/big.bin", data)
    fs = _Counting(memory)
    plan = ReadAhead(1000, 4000, 4, ramp=0)
    stream = RangeStream(FsspecSource(fs, "/lazy/big.bin"), "memory://lazy/big.bin", None, FAST, plan)
    assert stream.read(10) == data[:10]
    assert stream.read() == data[10:] and stream.size == len(data)
    # the first range, then the size, then the window up to the end (no range past it; the pool's threads may
    # start them in any order)
    assert fs.calls[:2] == [("range", 0, 1000), ("info",)]
    assert sorted(fs.calls[2:]) == [("range", 1000, 5000), ("range", 5000, 9000), ("range", 9000, 10240)]
    fresh = RangeStream(FsspecSource(fs, "/lazy/big.bin"), "memory://lazy/big.bin", None, FAST, plan)
    fresh.seek(-6, os.SEEK_END)
    assert fresh.read() == data[-6:]
    exact = RangeStream(
        FsspecSource(_Counting(memory), "/lazy/big.bin"), "memory://lazy/big.bin", None, FAST, ReadAhead(len(data))
    )
    assert exact.read() == data  # the first range is exactly the object: its size is looked up, then it ends


@pytest.mark.parametrize(
    "url, hint",
    [
        ("s3://b/x.tar", 'pip install s3fs (or pip install -e ".[s3]"'),
        ("gs://b/x.tar", 'pip install gcsfs (or pip install -e ".[gcs]"'),
    ],
)
def test_a_missing_backend_names_its_install_command(url, hint):
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['s3fs'] = sys.modules['gcsfs'] = None\n"
        "from wds_core.io.storage import open_shard\n"
        f"try:\n    open_shard({url!r})\nexcept OSError as exn:\n    print(exn)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert hint in out and url in out


@pytest.mark.slow
def test_s3_restore_inside_a_large_shard_makes_one_ranged_request_at_the_offset(s3, tmp_path):
    """Issue 21: not the first 32 MB range (to look for compression) and a prefetch, then the range needed."""
    import s3fs

    samples = [{"__key__": f"k{i:03d}", "bin": bytes([i]) * 1_000_000} for i in range(40)]
    with wds_core.TarWriter(str(tmp_path / "big.tar")) as sink:
        for sample in samples:
            sink.write(sample)
    options = s3["team-a"].client_options("team-a")
    upload(s3fs.S3FileSystem(skip_instance_cache=True, **options), [str(tmp_path / "big.tar")], "team-a/restore")
    url = "s3://team-a/restore/big.tar"

    def dataset():
        return wds_core.WebDataset(url, storage=options)

    first = dataset()
    stream = iter(first)
    for _ in range(35):
        next(stream)
    state = first.state_dict()
    stream.close()
    assert _offset_of(state) > 32 << 20  # past the first range a fresh read would fetch
    server = s3["team-a"]
    for plain in (True, False):  # the state says the shard is a plain tar; an older one does not
        if not plain:
            state = _without_plain(state)
        del server.reads[:]
        again = dataset()
        again.load_state_dict(state)
        restored = next(iter(again))
        assert restored["__key__"] == "k035" and restored["bin"] == bytes([35]) * 1_000_000
        ranges = [r for path, r in server.reads if path.endswith("/big.tar")]
        # a range at the offset and ranges read ahead from there, nothing before it (the read-ahead is concurrent,
        # so the server may log them in any order)
        starts = [int(r.split("=")[1].split("-")[0]) for r in ranges if r != "bytes=0-5"]
        assert min(starts) == _offset_of(state), ranges
        assert ("bytes=0-5" in ranges) != plain, ranges  # without the state's word: its first 6 bytes alone


def _offset_of(state):
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "shards" in node and node.get("offset", -1) >= 0:  # the reader's state, reading a shard
                found.append(node["offset"])
            for value in node.values():
                walk(value)

    walk(state)
    assert len(found) == 1, state
    return found[0]


def _without_plain(state):
    if isinstance(state, dict):
        return {k: _without_plain(v) for k, v in state.items() if k != "plain"}
    return state


@pytest.mark.parametrize("first, size", [(1000, 3001), (512, 512), (700, 100_000), (256 << 10, 4 << 20)])
def test_members_parse_as_ranges_arrive_with_any_range_sizes(tmp_path, first, size):
    """The tar reader takes what has arrived (read_arrived) and carries the bytes past the last whole block."""
    import fsspec

    from wds_core.tar import iter_members

    samples = [{"__key__": f"k{i:03d}", "bin": bytes([i]) * (i * 397 % 5000), "txt": "x" * i} for i in range(60)]
    path = str(tmp_path / "ranges.tar")
    with wds_core.TarWriter(path) as sink:
        for sample in samples:
            sink.write(sample)
    data = open(path, "rb").read()
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/ranges/x.tar", data)
    with open(path, "rb") as local:
        expected = list(iter_members(local, path))
    stream = RangeStream(
        FsspecSource(fs, "/ranges/x.tar"), "memory://ranges/x.tar", None, FAST, ReadAhead(first, size, 3)
    )
    assert list(iter_members(stream, path)) == expected
    stream.close()
    cut = fs.pipe_file("/ranges/cut.tar", data[: len(data) // 2 + 100]) or "/ranges/cut.tar"
    stream = RangeStream(FsspecSource(fs, cut), "memory://ranges/cut.tar", None, FAST, ReadAhead(first, size, 3))
    got = []
    with pytest.raises(wds_core.TruncatedShardError):
        for item in iter_members(stream, path):
            got.append(item)
    stream.close()  # a shard left unread lets go of the ranges it asked for when closed
    assert got == expected[: len(got)] and len(got) > 0


@pytest.mark.slow
def test_resume_at_every_step_while_the_next_shard_is_requested_ahead(http_server, monkeypatch):
    """The reader takes the next shard from its list early (to request it ahead): the state carries it."""
    from wds_core.testing import check_resume

    _, expected = local_dataset(http_server.root)
    read_with(monkeypatch, ReadAhead(2048, 2048, 4, 8 * 2048, shards_ahead=2))
    url = http_server.url + "/shard-{000..002}.tar"

    def make():
        return wds_core.DataPipeline(
            wds_core.SimpleShardList(url), wds_core.tarfile_to_samples(), wds_core.shuffle(5, seed=3)
        )

    keys = check_resume(make, step=7)
    assert len(keys) == len(set(keys)) == len(expected)
    pipeline = wds_core.DataPipeline(wds_core.SimpleShardList(url), wds_core.tarfile_to_samples())
    stream = iter(pipeline)
    next(stream)  # the first sample goes out before the shards ahead are opened, with the second
    assert len(pipeline.state_dict()["chain"]["shards"]) == 1
    next(stream)
    shards = [shard_digest(f"{http_server.url}/shard-00{n}.tar") for n in (0, 1, 2)]  # and ReadAhead.shards_ahead
    assert pipeline.state_dict()["chain"]["shards"] == shards


def test_the_next_shard_is_requested_while_one_is_read_and_nothing_outlives_a_break(tmp_path):
    from tests.servers import HttpServer, Shape

    server = HttpServer(str(tmp_path), shape=Shape(latency=0.05))
    try:
        _, expected = local_dataset(str(tmp_path), nshards=3)
        url = server.url + "/shard-{000..002}.tar"
        dataset = wds_core.WebDataset(url)
        stream = iter(dataset)
        next(stream), next(stream)  # the shards ahead are opened with the second sample
        deadline = time.monotonic() + 5
        while not any(r for r in server.ranges[1:]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(server.ranges) >= 2  # the second shard was asked for before the first one was read
        stream.close()
        time.sleep(0.3)  # what was running when the reader stopped finishes; nothing new starts
        asked = len(server.ranges)
        time.sleep(0.3)
        assert len(server.ranges) == asked
        assert contents(wds_core.WebDataset(url)) == expected
    finally:
        server.stop()


def test_sizes_come_with_the_first_ranges_and_the_first_sample_before_the_shards_ahead(http_server):
    """The first range's Content-Range says each shard's size: no HEAD, for the shard read or those ahead; and
    the first sample is handed over before the shards ahead are asked for (their bytes would compete with it)."""
    _, expected = local_dataset(http_server.root, nshards=3)
    dataset = wds_core.WebDataset(http_server.url + "/shard-{000..002}.tar")
    stream = iter(dataset)
    next(stream)
    assert http_server.gets == 1
    rest = list(stream)
    assert len(rest) + 1 == len(expected) and http_server.heads == 0


def test_a_reader_left_open_at_exit_prints_nothing(tmp_path):
    """The interpreter exiting with ranges in flight and requested ahead: no traceback from the I/O pool."""
    import subprocess
    import sys

    from tests.servers import HttpServer, Shape

    server = HttpServer(str(tmp_path), shape=Shape(latency=0.05))
    try:
        local_dataset(str(tmp_path), nshards=3)
        code = (
            "import wds_core\n"
            "from wds_core.io.remote.readahead import ReadAhead\n"
            f"stream = iter(wds_core.WebDataset({server.url + '/shard-{000..002}.tar'!r}, storage=wds_core.Storage(\n"
            "    read_ahead=ReadAhead(first_range=1024, range_bytes=1024, in_flight=4, budget=8192))))\n"
            "next(stream), next(stream)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    finally:
        server.stop()


def test_with_a_cache_the_next_shards_are_requested_ahead_too_and_only_whole_ones_are_kept(tmp_path):
    """Issue 30, item 6: the shard cache fills from the same engine, shards ahead included."""
    from tests.servers import HttpServer, Shape

    root, cache = tmp_path / "store", tmp_path / "cache"
    root.mkdir()
    server = HttpServer(str(root), shape=Shape(latency=0.05))
    try:
        _, expected = local_dataset(str(root), nshards=3)
        url = server.url + "/shard-{000..002}.tar"
        at_once = wds_core.ReadAhead(ramp=0)  # no start-up bound: the shards ahead are asked for at once
        dataset = wds_core.WebDataset(
            url, storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache)), read_ahead=at_once)
        )
        stream = iter(dataset)
        next(stream), next(stream)
        deadline = time.monotonic() + 5
        while server.gets < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.gets >= 3  # the shards after the first were asked for while the first is read
        dataset.close()  # the shards opened ahead are dropped: no partial file stays
        assert not [p.name for p in cache.rglob("*") if p.name.endswith(".partial")]
        got = list(wds_core.WebDataset(url, storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache)))))
        assert contents(got) == expected
        assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == [f"shard-00{i}.tar" for i in range(3)]
        gets = server.gets
        assert (
            contents(wds_core.WebDataset(url, storage=wds_core.Storage(cache=wds_core.ShardCache(str(cache)))))
            == expected
        )
        assert server.gets == gets  # read from the cache
    finally:
        server.stop()


@pytest.mark.slow
def test_stragglers_are_asked_for_again_and_the_first_answer_wins(tmp_path, monkeypatch):
    from tests.servers import HttpServer, Shape

    server = HttpServer(str(tmp_path), shape=Shape(latency=0.01, stragglers=0.3, straggle=40, seed=5))
    try:
        _, expected = local_dataset(str(tmp_path), nshards=2)
        read_with(monkeypatch, ReadAhead(4096, 8192, 4, 1 << 20, hedge_after=0.1))
        dataset = wds_core.WebDataset(server.url + "/shard-{000..001}.tar")
        started = time.monotonic()
        got = list(dataset)
        assert contents(got) == expected and len(got) == len(expected)  # each range used once
        assert dataset.stats["hedged"] > 0
        assert time.monotonic() - started < 20  # a hang guard: 30% of the requests take 0.4 s without hedging
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    "drip, policy, said",
    [
        ("body", RetryPolicy(attempts=3, budget=2.0), "cut off after the 2.0 s left of the budget"),
        ("head", RetryPolicy(attempts=3, budget=2.0), "cut off after the 2.0 s left of the budget"),
        ("body", RetryPolicy(attempts=2, initial_delay=0.01, min_rate=100, rate_window=1.0), "slower than the 100"),
        ("head", RetryPolicy(attempts=2, initial_delay=0.01, min_rate=100, rate_window=1.0), "slower than the 100"),
    ],
    ids=["body-budget", "headers-budget", "body-rate", "headers-rate"],
)
def test_a_server_trickling_its_answer_is_cut_off(http_server, drip, policy, said):
    """Issue 43: a server that answers a range and then sends a byte every 0.2 s keeps each socket read within its
    timeout; the reader was still reading after 40 s with a budget of 3 s.  The whole attempt, headers and body,
    is held to the time left of the budget, and a response slower than the policy's least rate is cut off."""
    local_dataset(http_server.root, nshards=1)
    http_server.faults.drip(10, 0.2, head=drip == "head")
    started = time.monotonic()
    with pytest.raises(ShardOpenError, match=said) as info:
        list(wds_core.WebDataset(http_server.url + "/shard-000.tar", storage=wds_core.Storage(retry=policy)))
    assert time.monotonic() - started < 20  # bounded (4.2 s at most here); a hang would be the test's timeout
    assert info.value.offset == 0 and "shard-000.tar" in str(info.value)


@pytest.mark.slow
def test_fsspec_reads_are_given_the_time_their_bytes_take_at_the_least_rate(http_server, monkeypatch):
    """A backend wds cannot watch byte by byte (fsspec's HTTP client, asked for by an option only it knows) is given
    a minute plus its range's bytes at the least rate, and cut off there (an async backend's call is cancelled)."""
    from wds_core.io.remote import retries

    paths, _ = local_dataset(http_server.root, nshards=1)
    url = http_server.url + "/shard-000.tar"
    options = {"client_kwargs": {"trust_env": False}}  # fsspec's HTTP backend, not the direct one
    fs, path = reading_filesystem(url, options)
    policy = RetryPolicy(attempts=1, min_rate=1000)
    assert policy.attempt_time(8000, None) == retries.IDLE_TIMEOUT + 8.0 and policy.attempt_time(8000, 2.0) == 2.0
    source = FsspecSource(fs, path, policy)
    assert source.get(0, 1000, None)[0] == open(paths[0], "rb").read(1000)
    http_server.faults.drip(1, 0.2)
    monkeypatch.setattr(retries, "IDLE_TIMEOUT", 1.0)  # a second plus 1000 bytes at 1000 bytes/s: 2 s
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        source.get(0, 1000, None)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("conditional", [True, False], ids=["If-Match honoured", "If-Match ignored"])
def test_a_shard_replaced_by_one_of_the_same_size_mid_read_is_an_error(http_server, monkeypatch, conditional):
    """Issue 43: an object swapped for another of the same size while it was read gave wrong samples and no error.
    The first answer's ETag is pinned: later ranges are asked with If-Match (a server honouring it answers 412),
    and an answer with another ETag (a server ignoring it) is refused; either way a ShardChangedError."""
    from wds_core.errors import ShardChangedError

    http_server.conditional = conditional
    paths, _ = local_dataset(http_server.root, nshards=1)
    small_ranges(monkeypatch)
    reader = iter(wds_core.WebDataset(http_server.url + "/shard-000.tar", storage=wds_core.Storage(retry=FAST)))
    first = [next(reader) for _ in range(3)]
    data = open(paths[0], "rb").read()
    time.sleep(0.01)  # another modification time: another ETag
    swapped = data.replace(b"-txt", b"-TXT")  # every sample's text (the members' names end in .txt)
    assert len(swapped) == len(data) and swapped != data
    with open(paths[0] + ".new", "wb") as out:
        out.write(swapped)
    os.replace(paths[0] + ".new", paths[0])  # as a store swaps an object: at once, never half written
    with pytest.raises(ShardChangedError, match="replaced while it was read") as info:
        for sample in reader:
            first.append(sample)
    assert "shard-000.tar" in str(info.value) and info.value.offset is not None
    assert all(sample["txt"].endswith(b"-txt") for sample in first)  # nothing of the new object was handed out
    assert any("If-Match" in seen for seen in http_server.headers)


def test_a_run_dropped_mid_epoch_closes_its_remote_shards_at_once(http_server, monkeypatch):
    """Issue 43: a loop that stops early left its run to the cycle collector (each stage's iterator holds its own
    generator), with its shards open and their ranges in flight and buffered, up to the read-ahead budget: a
    DataLoader worker grew by that every epoch until a collection.  Dropping the iterator closes the run at once,
    and closing a remote shard ends the requests still under way."""
    import gc
    import weakref

    from wds_core.io.remote import rangestream as remote

    local_dataset(http_server.root, nshards=3, nsamples=60, size=20_000)
    small_ranges(monkeypatch, 16384)
    opened: weakref.WeakSet = weakref.WeakSet()
    made = remote.RangeStream.__init__

    def counted(self, *args, **kwargs):
        made(self, *args, **kwargs)
        opened.add(self)

    monkeypatch.setattr(remote.RangeStream, "__init__", counted)
    gc.disable()  # what the cycle collector would free, some time later, does not count
    try:
        dataset = wds_core.WebDataset(http_server.url + "/shard-{000..002}.tar")
        items = iter(dataset)
        for _ in range(5):
            next(items)
        streams = list(opened)
        assert streams and not any(stream.closed for stream in streams)
        del items
        assert all(stream.closed for stream in streams)
        assert all(stream.source.attempts.stopped for stream in streams)
        assert dataset.state_dict()["chain"]  # the position is still there to save
    finally:
        gc.enable()


@pytest.mark.slow
def test_closing_a_remote_shard_ends_its_ranges_under_way(tmp_path, monkeypatch):
    """The ranges a closed shard had in flight end when it is closed (their sockets shut down), instead of
    downloading the rest for nothing: here 2 MB ranges at 200 KB/s a connection, which would take 10 s."""
    from tests.servers import HttpServer, Shape

    server = HttpServer(str(tmp_path), shape=Shape(bandwidth=200_000))
    try:
        local_dataset(str(tmp_path), nshards=1, nsamples=100, size=60_000)
        read_with(monkeypatch, ReadAhead(first_range=1 << 20, range_bytes=2 << 20, in_flight=4, shards_ahead=0, ramp=0))
        stream = open_shard(server.url + "/shard-000.tar")
        stream.read(100)  # the first range is here; the next ones are starting (their threads may lag)
        attempts = stream.source.attempts
        deadline = time.monotonic() + 5
        while not attempts.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert attempts.running
        started = time.monotonic()
        stream.close()
        while attempts.running and time.monotonic() - started < 8:
            time.sleep(0.01)
        assert not attempts.running and time.monotonic() - started < 3
    finally:
        server.stop()
