"""Range requests without fsspec's event loop: HTTP(S) through http.client, S3 through botocore, on real servers."""

import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import wds_core
from tests.core.io.remote.test_rangestream import contents, local_dataset, upload
from wds_core.errors import ShardNotFoundError, ShardOpenError
from wds_core.io.backends import backend_for
from wds_core.io.backends.fsspec import FsspecSource
from wds_core.io.backends.http import HttpSource, RequestError
from wds_core.io.backends.s3 import S3Source
from wds_core.io.remote.rangestream import RetryPolicy


def direct_source(url, options, retry):
    """The source that reads ``url`` without fsspec, as its backend makes it (``None``: fsspec's client reads)."""
    return backend_for(url).direct(url, options, retry)


def range_source(url, options, retry):
    return backend_for(url).source(url, options, retry)


FAST = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.02)


def test_the_size_comes_with_the_first_range_and_connections_are_kept(http_server):
    data = os.urandom(100_000)
    with open(os.path.join(http_server.root, "x.bin"), "wb") as out:
        out.write(data)
    source = HttpSource(http_server.url + "/x.bin")
    assert source.get(0, 1000, None) == (data[:1000], len(data))
    assert source.get(99_000, 101_000, None) == (data[99_000:], len(data))  # the end of the object
    assert source.get(100_000, 100_100, None) == (b"", len(data))  # 416: past the end
    assert source.info(None) == {"type": "file", "size": len(data)}
    stream = wds_core.io.storage.open_shard(http_server.url + "/x.bin")
    assert stream.read() == data
    gets = http_server.gets
    assert stream.size == len(data) and gets == len(http_server.ranges)  # no HEAD was needed to learn the size


def test_a_server_that_ignores_range_is_read_from_the_start_and_cut(tmp_path):
    from tests.servers import HttpServer

    server = HttpServer(str(tmp_path), honour_range=False)
    try:
        data = os.urandom(50_000)
        (tmp_path / "x.bin").write_bytes(data)
        source = HttpSource(server.url + "/x.bin")
        assert source.get(20_000, 21_000, None) == (data[20_000:21_000], len(data))
        assert wds_core.io.storage.open_shard(server.url + "/x.bin").read() == data
    finally:
        server.stop()


class _Redirects(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    target = ""
    status = 302

    def do_GET(self):
        self.send_response(self.status)
        self.send_header("Location", self.target + self.path.split("?")[0])
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_redirects_are_followed_and_the_location_kept(http_server, tmp_path):
    paths, expected = local_dataset(http_server.root, nshards=2)
    handler = type("Handler", (_Redirects,), {"target": http_server.url})
    front = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{front.server_port}/shard-{{000..001}}.tar?sig=1"
        assert contents(wds_core.WebDataset(url)) == expected
        source = HttpSource(f"http://127.0.0.1:{front.server_port}/shard-000.tar")
        source.get(0, 10, None)
        assert source.location == http_server.url + "/shard-000.tar"
    finally:
        front.shutdown()
        front.server_close()


@pytest.mark.parametrize("place", ["file:///etc/passwd", "ftp://127.0.0.1/x.tar", "data:text/plain,x"])
def test_a_redirect_only_leads_to_another_http_url(place):
    handler = type("Handler", (_Redirects,), {"target": place, "status": 307})
    front = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    try:
        with pytest.raises(PermissionError, match="refused a redirect"):
            HttpSource(f"http://127.0.0.1:{front.server_port}/shard.tar").get(0, 10, None)
    finally:
        front.shutdown()
        front.server_close()


def test_http_errors_are_named_and_only_transient_ones_retried(http_server):
    source = HttpSource(http_server.url + "/nope.tar")
    with pytest.raises(FileNotFoundError):
        source.get(0, 10, None)
    with pytest.raises(ShardNotFoundError):
        wds_core.io.storage.open_shard(http_server.url + "/nope.tar").read(1)
    local_dataset(http_server.root, nshards=1)
    http_server.faults.fail(10, status=500)
    with pytest.raises(ShardOpenError, match="HTTP 500") as failure:
        list(wds_core.WebDataset(http_server.url + "/shard-000.tar?token=SECRET", storage=wds_core.Storage(retry=FAST)))
    assert "SECRET" not in str(failure.value) and "after 4 attempts" in str(failure.value)
    assert RequestError("x", 503).status == 503


def test_cut_responses_are_short_reads_retried_not_data(http_server):
    _, expected = local_dataset(http_server.root, nshards=1, nsamples=60, size=20_000)
    http_server.faults.cut(3, after=5000)
    samples = list(wds_core.WebDataset(http_server.url + "/shard-000.tar", storage=wds_core.Storage(retry=FAST)))
    assert contents(samples) == expected and http_server.faults.injected["cut"] == 3


def test_every_http_url_is_read_by_wds_s_own_client(monkeypatch):
    """Issue 56, case 6: an option besides headers, or a proxy in the environment, handed the shard to fsspec's
    client, which sends every header on to another host and follows https to http."""
    assert isinstance(direct_source("http://h/x.tar", {}, RetryPolicy()), HttpSource)
    source = direct_source("http://h/x.tar", {"client_kwargs": {}, "block_size": 0}, RetryPolicy())
    assert isinstance(source, HttpSource) and source.headers == {}
    auth = direct_source("http://h/x.tar", {"client_kwargs": {"auth": ("alice", "pw")}}, RetryPolicy())
    assert auth.headers == {"Authorization": "Basic YWxpY2U6cHc="}
    for unknown in ({"client_kwargs": {"cookies": {"a": "b"}}}, {"get_client": print}):
        with pytest.raises(ShardOpenError, match="not one wds's HTTP client takes"):
            direct_source("http://h/x.tar", unknown, RetryPolicy())
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert isinstance(direct_source("http://h/x.tar", {}, RetryPolicy()), HttpSource)  # through the proxy
    assert direct_source("gs://b/x.tar", {}, RetryPolicy()) is None
    assert isinstance(range_source("memory://x/y.tar", {}, FAST), FsspecSource)


@pytest.fixture
def proxy(monkeypatch):
    from tests.servers import ForwardProxy

    server = ForwardProxy()
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield server
    server.stop()


@pytest.mark.parametrize("options", [{"client_kwargs": {}}, {"client_kwargs": {"trust_env": True}}])
def test_credentials_stay_with_their_host_through_a_proxy_and_with_any_options(http_server, tmp_path, proxy,
                                                                                monkeypatch, options):  # fmt: skip
    """With options fsspec's client took, and an http_proxy set: the shard is read through the proxy (which gets
    its own Proxy-Authorization), and a redirect to another host gets none of the credentials."""
    from tests.servers import HttpServer

    _, expected = local_dataset(http_server.root, nshards=1)
    front = HttpServer(str(tmp_path))
    monkeypatch.setenv("http_proxy", f"http://proxyuser:proxypass@127.0.0.1:{proxy.port}")
    try:
        front.redirect_to = f"http://localhost:{http_server.port}"
        url = front.url + "/moved/shard-000.tar"
        got = wds_core.WebDataset(url, storage=wds_core.Storage({**options, "headers": CREDENTIALS}, retry=FAST))
        assert contents(got) == expected
        assert front.headers[0]["X-Api-Key"] == "TOPSECRET"  # the URL's own host: all of them
        reads = [seen for seen in http_server.headers if "Range" in seen]
        assert reads and not any(name in seen for seen in reads for name in CREDENTIALS)
        assert all(target.startswith("http://") for target in proxy.asked) and len(proxy.asked) >= 2
        assert set(proxy.authorizations) == {"Basic cHJveHl1c2VyOnByb3h5cGFzcw=="}
        assert not any("Proxy-Authorization" in seen for seen in front.headers + reads)
    finally:
        front.stop()


def test_https_through_a_proxy_is_tunnelled_and_a_downgrade_refused(http_server, tmp_path, proxy, monkeypatch):
    import ssl

    from tests.servers import HttpServer, self_signed

    local_dataset(http_server.root, nshards=1)
    certificate, key = self_signed(str(tmp_path))
    front = HttpServer(str(tmp_path), tls=(certificate, key))
    local_dataset(str(tmp_path), nshards=1)
    monkeypatch.setenv("https_proxy", proxy.url)
    monkeypatch.setenv("http_proxy", proxy.url)
    options = {"headers": CREDENTIALS, "client_kwargs": {}, "ssl": ssl.create_default_context(cafile=certificate)}
    try:
        data = open(os.path.join(str(tmp_path), "shard-000.tar"), "rb").read()
        source = direct_source(front.url + "/shard-000.tar", options, FAST)
        assert source.get(0, 10, None)[0] == data[:10]
        assert proxy.asked == [f"CONNECT 127.0.0.1:{front.port}"]  # the TLS went through, end to end
        front.redirect_to = http_server.url
        with pytest.raises(PermissionError, match="refused a redirect from https to http"):
            direct_source(front.url + "/moved/shard-000.tar", options, FAST).get(0, 10, None)
        assert http_server.gets == 0
    finally:
        front.stop()


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


CREDENTIALS = {"Authorization": "Bearer TOPSECRET", "Cookie": "session=TOPSECRET", "X-Api-Key": "TOPSECRET"}


@pytest.mark.parametrize("where", ["another host", "the same host"])
def test_credentials_follow_a_redirect_only_to_the_same_host(http_server, tmp_path, where):
    """Issue 43: the options' Authorization header went on to another host named by a 302 (127.0.0.1:A to
    localhost:B).  As curl, requests and urllib do, credentials (and a signature) go only where the URL points:
    another host gets the harmless headers alone, the same one all of them."""
    from tests.servers import HttpServer

    _, expected = local_dataset(http_server.root, nshards=1)
    front = HttpServer(str(tmp_path))
    try:
        if where == "another host":
            front.redirect_to, server = f"http://localhost:{http_server.port}", http_server
        else:  # the same host, another path of it
            local_dataset(str(tmp_path), nshards=1)
            front.redirect_to, server = front.url, front
        options = {"headers": {**CREDENTIALS, "User-Agent": "wds-test"}}
        url = front.url + "/moved/shard-000.tar"
        assert contents(wds_core.WebDataset(url, storage=options)) == expected
        assert front.headers[0]["Authorization"] == "Bearer TOPSECRET"  # the URL's own host: all of them
        reads = [seen for seen in server.headers if "Range" in seen and seen is not front.headers[0]]
        assert reads and all(seen["User-Agent"] == "wds-test" for seen in reads)
        sent = {name for seen in reads for name in seen if name in CREDENTIALS}
        assert sent == (set() if where == "another host" else set(CREDENTIALS))
    finally:
        front.stop()


def test_a_redirect_from_https_to_http_is_refused(http_server, tmp_path):
    from tests.servers import HttpServer, self_signed

    local_dataset(http_server.root, nshards=1)
    certificate, key = self_signed(str(tmp_path))
    front = HttpServer(str(tmp_path), tls=(certificate, key))
    front.redirect_to = http_server.url
    try:
        source = HttpSource(front.url + "/moved/shard-000.tar", CREDENTIALS, cafile=certificate)
        with pytest.raises(PermissionError, match="refused a redirect from https to http"):
            source.get(0, 10, None)
        assert http_server.gets == 0  # nothing was asked of the http server
        front.redirect_to = front.url  # https to https on the same host is followed
        local_dataset(str(tmp_path), nshards=1)
        data = open(os.path.join(str(tmp_path), "shard-000.tar"), "rb").read()
        assert (
            HttpSource(front.url + "/moved/shard-000.tar", CREDENTIALS, cafile=certificate).get(0, 10, None)[0]
            == data[:10]
        )
    finally:
        front.stop()


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
