"""HTTP(S) range requests through wds's own client (http.client, kept-alive connections) on real servers: sizes,
redirects, errors, retries, proxies, and credentials that stay with their host."""

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import wds_core
from tests.core.io.remote.test_rangestream import contents, local_dataset
from wds_core.errors import ShardNotFoundError, ShardOpenError
from wds_core.io.backends import backend_for
from wds_core.io.backends.fsspec import FsspecSource
from wds_core.io.backends.http import HttpSource, RequestError
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
