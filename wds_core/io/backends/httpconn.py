"""HTTP connections for the direct sources (:mod:`.http`, :mod:`.s3`): kept alive per host and process, through the
environment's proxy for the host (``http_proxy``, ``https_proxy``, ``all_proxy``, ``no_proxy``, as curl and
requests read them: ``https`` through a ``CONNECT`` tunnel, ``http`` by asking the proxy for the whole URL), their
responses read through the attempt's :class:`~.retries.Pace` (every wait for bytes, headers included, held to the
time left and the least rate), and whether a redirect's host may be sent the options' credentials.
"""

from __future__ import annotations

import base64
import functools
import http.client
import io
import os
import re
import ssl
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, NamedTuple

from ..forklocks import ForkSafeLock
from ..remote.retries import Pace

__all__ = [
    "CONNECTIONS",
    "HARMLESS_HEADERS",
    "PacedResponse",
    "Proxy",
    "proxy_for",
    "read_body",
    "same_origin",
    "store_error_code",
]

PIECE = 4 << 20  # a response body is read in pieces this size


@functools.lru_cache(maxsize=8)
def _tls(cafile: str | None) -> ssl.SSLContext:
    """The TLS settings of HTTPS connections: the system's certificates, or those of ``cafile``."""
    return ssl.create_default_context(cafile=cafile)


class Proxy(NamedTuple):
    """A forward proxy, and the ``Proxy-Authorization`` its URL's user info makes (``None`` without)."""

    host: str
    port: int
    authorization: str | None


def proxy_for(url: str) -> Proxy | None:
    """The proxy the environment names for ``url`` (``None``: connect straight), read when asked, as curl and
    requests read it; a proxy's user info becomes its ``Proxy-Authorization``, never a header the host sees."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    named = proxies.get(parts.scheme) or proxies.get("all")
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    if not named or bypass(parts.hostname or "", proxies):
        return None
    proxy = urllib.parse.urlsplit(named if "://" in named else f"http://{named}")
    if proxy.scheme != "http":
        raise ValueError(f"the proxy for {parts.scheme}:// URLs must be an http:// proxy, got a {proxy.scheme}:// one")
    authorization = None
    if proxy.username is not None:
        user = urllib.parse.unquote(proxy.username) + ":" + urllib.parse.unquote(proxy.password or "")
        authorization = "Basic " + base64.b64encode(user.encode()).decode("ascii")
    return Proxy(proxy.hostname or "", proxy.port or 80, authorization)


_Place = tuple[str, str, int, Any, "Proxy | None"]  # scheme, host, port, CA file or TLS context, proxy


class _Connections:
    """Idle keep-alive connections of this process, per (scheme, host, port, CA file); a forked child starts
    empty."""

    def __init__(self, most: int = 64) -> None:
        self.most = most
        self.idle: dict[_Place, list[http.client.HTTPConnection]] = {}
        self.lock = ForkSafeLock()
        self.pid = os.getpid()

    def take(self, place: _Place) -> tuple[http.client.HTTPConnection, bool]:
        """A connection to the host, and whether it was kept from an earlier request."""
        with self.lock:
            if self.pid != os.getpid():
                self.idle, self.pid = {}, os.getpid()
            kept = self.idle.get(place)
            if kept:
                return kept.pop(), True
        scheme, host, port, tls, proxy = place
        if scheme == "http":  # no TLS settings made: loading the system's certificates delays a process's first request
            if proxy is None:
                return http.client.HTTPConnection(host, port), False
            return http.client.HTTPConnection(proxy.host, proxy.port), False  # asked for the whole URL
        context = tls if isinstance(tls, ssl.SSLContext) else _tls(tls)
        if proxy is None:
            return http.client.HTTPSConnection(host, port, context=context), False
        connection = http.client.HTTPSConnection(proxy.host, proxy.port, context=context)
        tunnel = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
        connection.set_tunnel(host, port, headers=tunnel)  # TLS with the host itself, through the proxy
        return connection, False

    def give_back(self, place: _Place, connection: http.client.HTTPConnection) -> None:
        with self.lock:
            kept = self.idle.setdefault(place, [])
            if self.pid == os.getpid() and sum(map(len, self.idle.values())) < self.most:
                kept.append(connection)
                return
        connection.close()

    def close_all(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, {}
        for kept in idle.values():
            for connection in kept:
                connection.close()


CONNECTIONS = _Connections()


class PacedSocket(io.RawIOBase):
    """A connection's socket as a response reads it (``raw``: the socket's own file, which keeps the socket open
    while the response reads), every wait for bytes held to the attempt's :class:`Pace`: the time left of the
    budget, and the least rate.  Each socket read is bounded by its timeout alone, so a server sending a byte
    every fraction of a second would hold a plain response (its headers or its body) for ever."""

    def __init__(self, raw: Any, sock: Any, pace: Pace) -> None:
        super().__init__()
        self.raw, self.sock, self.pace = raw, sock, pace
        pace.watch(sock)

    def readable(self) -> bool:
        return True

    def readinto(self, into: Any) -> int:
        self.sock.settimeout(self.pace.wait())
        count = self.raw.readinto(into)
        if count:
            self.pace.arrived(count)
        return count  # type: ignore[no-any-return]

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
        super().close()


class PacedResponse(http.client.HTTPResponse):
    """An HTTP response read through a :class:`PacedSocket` (given as ``pace``)."""

    def __init__(self, sock: Any, debuglevel: int = 0, method: str | None = None, url: str | None = None, *,
                 pace: Pace) -> None:  # fmt: skip
        super().__init__(sock, debuglevel, method, url)
        self.fp = io.BufferedReader(PacedSocket(self.fp.detach(), sock, pace))  # nothing was read from it yet


def read_body(
    read: Callable[[int], bytes], skip: int, wanted: int, readinto: Callable[[Any], int] | None = None
) -> bytes | bytearray:
    """At most ``wanted`` bytes of a response body that ``read(n)`` gives (up to ``n`` bytes, ``b""`` at its end),
    after its first ``skip`` (read and dropped piece by piece).  With ``readinto`` (the response's), the body is
    read into one buffer of its size: pieces joined at the end would hold a large range twice for a moment."""
    while skip > 0:
        dropped = len(read(min(PIECE, skip)))
        if not dropped:
            return b""
        skip -= dropped
    if readinto is not None and wanted > PIECE:
        buffer = bytearray(wanted)
        view, got = memoryview(buffer), 0
        while got < wanted:
            count = readinto(view[got : min(wanted, got + PIECE)])
            if not count:
                break
            got += count
        view.release()
        del buffer[got:]
        return buffer
    pieces, got = [], 0
    while got < wanted:
        piece = read(min(PIECE, wanted - got))
        if not piece:
            break
        pieces.append(piece)
        got += len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


_ERROR_CODE = re.compile(rb"<Code>([^<]{1,100})</Code>")


def store_error_code(response: http.client.HTTPResponse) -> str:
    """The error code an object store's error body gives (``<Code>NoSuchKey</Code>``), as `` (NoSuchKey)``."""
    try:
        head = response.read(4096) if response.getheader("Content-Type", "").endswith("xml") else b""
    except (OSError, http.client.HTTPException):
        return ""
    match = _ERROR_CODE.search(head)
    return f" ({match.group(1).decode('ascii', 'replace')})" if match else ""


# the options' headers that go on to another host after a redirect (the others may carry credentials:
# Authorization, Cookie, an API key or token header of the store's own), and the default ports of each scheme
HARMLESS_HEADERS = frozenset({"user-agent", "accept", "accept-language", "cache-control", "pragma"})
PORTS = {"http": 80, "https": 443}


def same_origin(first: str, then: str) -> bool:
    """Whether ``then`` (where a redirect led) is the host ``first`` names, as curl and requests judge it before they
    send credentials on: the same scheme, host and port, or ``http`` moved up to ``https`` on the default ports."""
    a, b = urllib.parse.urlsplit(first), urllib.parse.urlsplit(then)
    if (a.hostname or "").lower() != (b.hostname or "").lower():
        return False
    ports = (a.port or PORTS.get(a.scheme), b.port or PORTS.get(b.scheme))
    if a.scheme == b.scheme:
        return ports[0] == ports[1]
    return (a.scheme, b.scheme) == ("http", "https") and ports == (80, 443)
