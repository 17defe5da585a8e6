"""S3 range requests signed here or by botocore, against a real S3 server (moto) on loopback: each bucket's keys,
faults mid-flight, trickling ranges, objects replaced mid-read."""

import time

import pytest

import wds_core
from tests.core.io.backends.test_http import FAST, direct_source
from tests.core.io.remote.test_rangestream import contents, local_dataset, upload
from wds_core.errors import ShardOpenError
from wds_core.io.backends.s3 import S3Source
from wds_core.io.remote.rangestream import RetryPolicy


def s3_dataset(s3, tmp_path, prefix, nshards):
    """Shards uploaded to bucket team-a under ``prefix``: the server, its options, the local paths, the samples."""
    s3fs = pytest.importorskip("s3fs")
    server = s3["team-a"]
    options = server.client_options("team-a")
    paths, expected = local_dataset(str(tmp_path), nshards=nshards)
    upload(s3fs.S3FileSystem(skip_instance_cache=True, **options), paths, f"team-a/{prefix}")
    return server, options, paths, expected


@pytest.mark.parametrize("through", ["signed here", "botocore"])
def test_s3_ranges_with_each_buckets_keys(s3, tmp_path, through):
    from wds_core.io.backends.s3 import SignedS3Source

    _, options, paths, expected = s3_dataset(s3, tmp_path, "direct", 2)
    if through == "botocore":
        options["config_kwargs"] = {"connect_timeout": 5}  # a botocore setting: its client reads the ranges
    source = direct_source("s3://team-a/direct/shard-000.tar", options, RetryPolicy())
    assert isinstance(source, SignedS3Source if through == "signed here" else S3Source)
    data = open(paths[0], "rb").read()
    assert source.get(100, 612, None) == (data[100:612], len(data))
    assert source.get(len(data), len(data) + 10, None)[0] == b""
    assert source.info(None)["size"] == len(data)
    url = "s3://team-a/direct/shard-{000..001}.tar"
    assert contents(wds_core.WebDataset(url, storage=options)) == expected
    with pytest.raises(FileNotFoundError):
        direct_source("s3://team-a/direct/nope.tar", options, RetryPolicy()).get(0, 10, None)
    wrong = {**options, "key": "AKIDTEAMB"}
    with pytest.raises(PermissionError, match="InvalidAccessKeyId"):
        direct_source("s3://team-a/direct/shard-000.tar", wrong, RetryPolicy()).get(0, 10, None)
    # options only s3fs understands, and a retry budget (botocore cannot be cut off mid-request), go to s3fs
    assert direct_source("s3://team-a/x.tar", {**options, "requester_pays": True}, RetryPolicy()) is None
    assert direct_source("s3://team-a/x.tar", options, RetryPolicy(budget=5.0)) is None


@pytest.mark.parametrize("shaped", [False, True])
def test_s3_faults_mid_flight_lose_and_repeat_nothing(s3, tmp_path, monkeypatch, shaped):
    """Cut and failed responses among the ranges in flight -- from moto itself, or from moto behind an object
    store's latency with 10% of the responses 10x slower (hedged) -- and every sample once."""
    from tests.core.io.remote.test_rangestream import outlasting, small_ranges
    from tests.servers import Shape, ShapingProxy

    server, options, _, expected = s3_dataset(s3, tmp_path, "faults", 3)
    proxy = ShapingProxy(server.endpoint, Shape(latency=0.01, stragglers=0.1, straggle=10, seed=3)) if shaped else None
    faulty = proxy or server
    try:
        if proxy is not None:
            options["client_kwargs"] = {**options["client_kwargs"], "endpoint_url": proxy.endpoint}
        small_ranges(monkeypatch, 8192)
        faulty.faults.spacing = 3
        faulty.faults.cut(4, after=1000)
        faulty.faults.fail(4, status=503)
        url = "s3://team-a/faults/shard-{000..002}.tar"
        samples = list(wds_core.WebDataset(url, storage=wds_core.Storage(options, retry=outlasting(8))))
        assert contents(samples) == expected and len(samples) == len(expected)
        assert faulty.faults.injected["cut"] == faulty.faults.injected["status"] == 4
    finally:
        if proxy is not None:
            proxy.stop()


@pytest.mark.parametrize("token", [None, "SESSION/TOKEN+="])
@pytest.mark.parametrize("key", ["plain/shard-000.tar", "odd name/ü+=&?~(1).tar"])
def test_s3_requests_are_signed_as_botocore_signs_them(monkeypatch, key, token):
    """Our Signature Version 4 against botocore's, on the same request at the same second."""
    import datetime
    import time as clock

    pytest.importorskip("s3fs")
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from wds_core.io.backends.s3 import SignedS3Source

    now = datetime.datetime(2026, 11, 26, 9, 30, 15)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: now)
    monkeypatch.setattr(clock, "gmtime", lambda *args: now.timetuple())
    options = {"key": "AKIDEXAMPLE", "secret": "wJalr/EXAMPLEKEY", "client_kwargs": {"region_name": "eu-west-3"}}
    if token:
        options["token"] = token
    source = direct_source(f"s3://my-bucket/{key}", options, RetryPolicy())
    assert isinstance(source, SignedS3Source)
    assert source.url.startswith("https://my-bucket.s3.eu-west-3.amazonaws.com/")
    ours = source.signed("GET", source.url, {"Range": "bytes=0-262143"})
    request = AWSRequest(
        "GET", source.url, headers={"Range": "bytes=0-262143", "x-amz-content-sha256": ours["x-amz-content-sha256"]}
    )
    botocore.auth.S3SigV4Auth(Credentials("AKIDEXAMPLE", "wJalr/EXAMPLEKEY", token), "s3", "eu-west-3").add_auth(
        request
    )
    assert ours["Authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]


def test_s3_signed_here_or_by_botocore(monkeypatch):
    pytest.importorskip("s3fs")
    from wds_core.io.backends.s3 import SignedS3Source

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    endpoint = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}
    keys = {"key": "k", "secret": "s"}
    assert isinstance(direct_source("s3://b/x.tar", {**keys, **endpoint}, RetryPolicy()), SignedS3Source)
    assert direct_source("s3://b/x.tar", {**keys, **endpoint}, RetryPolicy()).url == "http://127.0.0.1:9/b/x.tar"
    assert isinstance(direct_source("s3://b/x.tar", {"anon": True, **endpoint}, RetryPolicy()), SignedS3Source)
    # credentials found by botocore (profile, files, instance role), a region to discover, config: botocore's client
    assert isinstance(direct_source("s3://b/x.tar", endpoint, RetryPolicy()), S3Source)
    assert isinstance(direct_source("s3://bucket/x.tar", keys, RetryPolicy()), S3Source)
    assert isinstance(
        direct_source("s3://b/x.tar", {**keys, **endpoint, "config_kwargs": {"a": 1}}, RetryPolicy()), S3Source
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    assert (
        direct_source("s3://bucket/x.tar", {}, RetryPolicy()).url == "https://bucket.s3.us-west-2.amazonaws.com/x.tar"
    )
    china = {"client_kwargs": {"region_name": "cn-north-1"}}
    assert isinstance(direct_source("s3://bucket/x.tar", china, RetryPolicy()), S3Source)
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/private-ca.pem")  # trusted for https, as botocore trusts it
    assert direct_source("s3://bucket/x.tar", {}, RetryPolicy()).cafile == "/etc/private-ca.pem"


@pytest.mark.slow
@pytest.mark.parametrize("through", ["signed here", "botocore", "s3fs"])
def test_an_s3_server_trickling_a_range_is_cut_off(s3, tmp_path, through):
    """Issue 43: every backend that reads bodies holds them to the policy: the direct sources (signed here, or
    botocore's client, whose body is read with urllib3's read1) to the least rate, s3fs (a budget) to the time
    left."""
    server, options, _, _ = s3_dataset(s3, tmp_path, "trickle", 1)
    policy = RetryPolicy(attempts=2, initial_delay=0.01, min_rate=200, rate_window=1.0)
    said = "slower than the 200"
    if through == "botocore":
        options["config_kwargs"] = {"connect_timeout": 5}
    elif through == "s3fs":
        policy, said = RetryPolicy(attempts=2, initial_delay=0.01, budget=2.0), "the retry budget is 2 s"
    server.faults.drip(4, 0.2)
    started = time.monotonic()
    with pytest.raises(ShardOpenError, match=said) as info:
        list(wds_core.WebDataset("s3://team-a/trickle/shard-000.tar", storage=wds_core.Storage(options, retry=policy)))
    assert time.monotonic() - started < 20 and info.value.offset == 0


@pytest.mark.parametrize("through", ["signed here", "botocore"])
def test_an_s3_object_replaced_mid_read_is_an_error(s3, tmp_path, monkeypatch, through):
    """Issue 43: the first range's ETag is pinned (If-Match on every later range, and compared): an object swapped
    for another of the same size is a ShardChangedError naming the shard, not samples of two objects."""
    import s3fs

    from tests.core.io.remote.test_rangestream import small_ranges
    from wds_core.errors import ShardChangedError

    _, options, paths, _ = s3_dataset(s3, tmp_path, "swapped", 1)
    if through == "botocore":
        options["config_kwargs"] = {"connect_timeout": 5}
    small_ranges(monkeypatch)
    reader = iter(
        wds_core.WebDataset("s3://team-a/swapped/shard-000.tar", storage=wds_core.Storage(options, retry=FAST))
    )
    got = [next(reader) for _ in range(3)]
    data = open(paths[0], "rb").read()
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3["team-a"].client_options("team-a"))
    fs.pipe_file("team-a/swapped/shard-000.tar", data.replace(b"-txt", b"-TXT"))  # the same size, other bytes
    with pytest.raises(ShardChangedError, match="replaced while it was read") as info:
        for sample in reader:
            got.append(sample)
    assert "s3://team-a/swapped/shard-000.tar" in str(info.value)
    assert all(sample["txt"].endswith(b"-txt") for sample in got)
