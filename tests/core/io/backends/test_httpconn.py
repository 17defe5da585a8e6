"""wds's HTTP connections: the proxy the environment names, bodies read past an offset, object stores' error codes,
and whether a redirect stays with its origin."""

import io

import pytest

from wds_core.io.backends.httpconn import Proxy, proxy_for, read_body, same_origin, store_error_code


@pytest.fixture
def no_proxies(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_environments_proxy_with_its_own_credentials(no_proxies):
    assert proxy_for("http://data.example/a.tar") is None
    no_proxies.setenv("HTTP_PROXY", "http://alice:p%40ss@proxy.example:3128")
    no_proxies.setenv("NO_PROXY", "internal.example")
    assert proxy_for("http://data.example/a.tar") == Proxy("proxy.example", 3128, "Basic YWxpY2U6cEBzcw==")
    assert proxy_for("http://internal.example/a.tar") is None
    no_proxies.setenv("HTTPS_PROXY", "https://proxy.example")
    with pytest.raises(ValueError, match="must be an http:// proxy"):
        proxy_for("https://data.example/a.tar")


def test_a_body_is_read_past_its_offset_and_never_beyond_what_is_wanted():
    body = io.BytesIO(bytes(range(256)) * 1000)
    assert read_body(body.read, 1000, 50) == (bytes(range(256)) * 1000)[1000:1050]
    assert read_body(io.BytesIO(b"short").read, 10, 5) == b""  # ended before the offset
    assert read_body(io.BytesIO(b"short").read, 0, 100) == b"short"


def test_an_object_stores_error_code_is_named():
    class Answer:
        def __init__(self, body, kind):
            self.body, self.kind = body, kind

        def getheader(self, name, default=""):
            return self.kind if name == "Content-Type" else default

        def read(self, n):
            return self.body[:n]

    xml = b"<?xml version='1.0'?><Error><Code>NoSuchKey</Code><Message>...</Message></Error>"
    assert store_error_code(Answer(xml, "application/xml")) == " (NoSuchKey)"
    assert store_error_code(Answer(xml, "text/plain")) == ""


@pytest.mark.parametrize(
    "first, then, same",
    [
        ("http://a.example/x", "http://a.example:80/y", True),
        ("http://a.example/x", "https://a.example/y", True),  # moved up to https on the default ports
        ("https://a.example/x", "http://a.example/y", False),
        ("http://a.example:8080/x", "http://a.example:8081/y", False),
        ("http://a.example/x", "http://b.example/y", False),
    ],
)
def test_a_redirect_keeps_its_origin_only_to_the_same_host_and_port(first, then, same):
    assert same_origin(first, then) is same
