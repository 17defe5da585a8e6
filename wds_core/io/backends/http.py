"""``http://`` and ``https://`` objects, read by ``Range`` requests straight from the I/O pool's threads.

fsspec's HTTP backend runs every request of a process on one event loop
thread, which reads each response in small pieces of Python: with 16 ranges
in flight it tops out near 220 MB/s on a 2-core machine, while 16 plain
connections read in C (``http.client``) give 515 MB/s.  So an HTTP(S) shard is
read by :class:`HttpSource`: ``http.client`` connections kept alive per host
and process, through the environment's proxy for the host (:mod:`.httpconn`),
redirects followed (the options' credentials sent on only to the same host,
never from https to http), the object's size taken from the first range's
``Content-Range`` (no request of its own), each response held to the retry
policy's least rate.

Every http(s) shard is read this way, whatever its options: fsspec's client
(aiohttp) follows a redirect to another host with every header it was given and
follows https to http, so no URL is handed to it.  The options it would take
are read here (:func:`http_settings`): ``headers`` (also in ``client_kwargs``),
``auth`` (a ``(user, password)`` pair or aiohttp's ``BasicAuth``), ``ssl`` /
``verify_ssl`` (``False``, or an :class:`ssl.SSLContext`); the ones that only
tune fsspec's caching are ignored; any other is refused, naming it, rather than
dropped.  Writing goes through fsspec (:mod:`.fsspec`).
"""

from __future__ import annotations

import base64
import functools
import http.client
import re
import ssl
import time
import urllib.parse
from typing import Any

from ...errors import ShardChangedError, ShardOpenError
from ..remote.links import link_for
from ..remote.retries import DEFAULT_RETRY, Attempts, Pace, RetryPolicy
from ..remote.throttle import retry_after
from .httpconn import (
    CONNECTIONS,
    HARMLESS_HEADERS,
    PacedResponse,
    proxy_for,
    read_body,
    same_origin,
    store_error_code,
)
from .ranged import RangedBackend

__all__ = ["HTTP", "HttpBackend", "HttpSource", "RequestError", "http_settings", "http_source", "redirected"]

_MAX_REDIRECTS = 5
_PINNED = {"etag": "ETag", "size": "size", "modified": "Last-Modified"}
_CONTENT_RANGE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)")


class RequestError(OSError):
    """A request answered with an HTTP error status (``status``); 408, 429 and 5xx are retried, a rate limit (429,
    503 with ``Retry-After`` or a ``SlowDown`` code) after the wait it asked for (:mod:`..remote.throttle`)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after: float | None = None  # seconds the answer's Retry-After asked for
        self.store_code = ""  # the error code of an object store's answer (SlowDown)


def redirected(was: str, moved: str, status: int) -> str:
    """Where a redirect from ``was`` to ``moved`` (its ``Location``) leads; a ``PermissionError`` when that is not
    an http(s) URL with a host (file:, data:...) or goes from https down to http."""
    url = urllib.parse.urljoin(was, moved)
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:  # file:, data:, a host-less URL...
        raise PermissionError(f"HTTP {status}: refused a redirect to a {parts.scheme or 'relative'}: URL")
    if parts.scheme == "http" and urllib.parse.urlsplit(was).scheme == "https":
        raise PermissionError(f"HTTP {status}: refused a redirect from https to http (a downgrade)")
    return url


class HttpSource:
    """An object behind an HTTP(S) URL, read by ``Range`` requests on kept-alive connections."""

    sizes_in_ranges = True  # Content-Range

    def __init__(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        cafile: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        context: ssl.SSLContext | None = None,
    ) -> None:
        self.url = url
        self.headers = dict(headers or {})
        self.cafile = cafile  # certificates to trust for https, instead of the system's
        self.context = context  # or the TLS settings themselves (the options' ssl=)
        self.location = url  # where the last redirect led; asked first, the URL again if it fails
        self.retry = retry  # its least rate holds every response to (and the budget, the time left it gives)
        self.pinned: dict[str, str] = {}  # the first answer's ETag, Last-Modified and size: later ones must match
        self.attempts = Attempts(retry)  # the requests under way, stopped when the reader closes the shard

    def close(self) -> None:
        """The reader is done with the object: requests still under way (ranges read ahead) end now."""
        self.attempts.stop()

    def range_hint(self, least: int, most: int) -> int | None:
        """The range size that keeps a connection to where the object is read from busy (:mod:`..remote.links`)."""
        parts = urllib.parse.urlsplit(self.location)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return link_for(parts.scheme, parts.hostname or "", port).target(least, most)

    def get(self, start: int, end: int, left: float | None) -> tuple[bytes | bytearray, int | None]:
        if end <= start:
            return b"", None
        asked = {"Range": f"bytes={start}-{end - 1}", **self._conditions()}
        try:
            status, headers, body = self._request("GET", asked, end - start, left, start)
        except RequestError as exn:
            if exn.status == 412:  # If-Match (If-Unmodified-Since) failed: another object is there now
                raise self._changed("the server says it no longer matches the one read so far") from None
            raise
        if status == 416:  # asked from the end of the object or past it
            match = _CONTENT_RANGE.fullmatch(headers.get("Content-Range", "").strip())
            total = int(match.group(3)) if match and match.group(3) != "*" else None
            return b"", total
        if status == 200:  # the server ignored Range: the bytes were read from the start and cut here
            length = headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            self._pin(headers, total)
            return body, total
        match = _CONTENT_RANGE.fullmatch(headers.get("Content-Range", "").strip())
        if match is None or match.group(1) is None or int(match.group(1)) != start:
            raise RequestError(f"asked for bytes {start}-{end - 1}, got {headers.get('Content-Range')!r}", 502)
        total = None if match.group(3) == "*" else int(match.group(3))
        self._pin(headers, total)
        return body, total

    def _pin(self, headers: Any, total: int | None) -> None:
        """Keep the first answer's ETag, Last-Modified and size; a later answer that differs is another object (a
        server that ignores If-Match still says what it sends)."""
        now = {"etag": headers.get("ETag"), "modified": headers.get("Last-Modified"), "size": total}
        now = {name: str(value) for name, value in now.items() if value is not None}
        if not self.pinned:
            self.pinned = now
            return
        for name in ("etag", "size", "modified"):
            if name in now and name in self.pinned and now[name] != self.pinned[name]:
                raise self._changed(f"its {_PINNED[name]} was {self.pinned[name]}, now {now[name]}")

    def version(self) -> str | None:
        """The object's ETag (else Last-Modified) as the first answer gave it."""
        if "etag" in self.pinned:
            return f"etag:{self.pinned['etag']}"
        return f"modified:{self.pinned['modified']}" if "modified" in self.pinned else None

    def _conditions(self) -> dict[str, str]:
        """The headers that make a server refuse to answer from another object than the one read so far: If-Match
        with a strong ETag, else If-Unmodified-Since."""
        etag = self.pinned.get("etag", "")
        if etag and not etag.startswith("W/"):
            return {"If-Match": etag}
        if "modified" in self.pinned:
            return {"If-Unmodified-Since": self.pinned["modified"]}
        return {}

    def _changed(self, why: str) -> ShardChangedError:
        # named by the retry loop, with the offset
        return ShardChangedError(f"the shard was replaced while it was read ({why}); read it again from its start")

    def signed(self, method: str, url: str, headers: dict[str, str]) -> dict[str, str]:
        """Headers that authenticate a request (none here; an S3 source signs each one)."""
        return {}

    def info(self, left: float | None) -> dict[str, Any]:
        status, headers, _ = self._request("HEAD", {}, 0, left, 0)
        length = headers.get("Content-Length")
        return {"type": "file", "size": int(length) if length and length.isdigit() else None}

    def _request(
        self, method: str, extra: dict[str, str], wanted: int, left: float | None, start: int
    ) -> tuple[int, http.client.HTTPMessage, bytes | bytearray]:
        pace = self.attempts.begin(left)  # one clock for the attempt, redirects included
        try:
            return self._follow(method, extra, wanted, pace, start)
        finally:
            self.attempts.end(pace)

    def _follow(
        self, method: str, extra: dict[str, str], wanted: int, pace: Pace, start: int
    ) -> tuple[int, http.client.HTTPMessage, bytes | bytearray]:
        url = self.location
        for _ in range(_MAX_REDIRECTS + 1):
            try:
                status, headers, body, moved = self._once(method, url, extra, wanted, pace, start)
            except (FileNotFoundError, PermissionError):
                if url == self.url:
                    raise
                self.location = url = self.url  # a redirect's signed location may have expired: ask the URL again
                continue
            if moved is None:
                self.location = url
                return status, headers, body
            url = redirected(url, moved, status)
        raise RequestError(f"more than {_MAX_REDIRECTS} redirects", 310)

    def _once(
        self, method: str, url: str, extra: dict[str, str], wanted: int, pace: Pace, start: int
    ) -> tuple[int, http.client.HTTPMessage, bytes | bytearray, str | None]:
        parts = urllib.parse.urlsplit(url)
        scheme, host = parts.scheme, parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        try:
            proxy = proxy_for(url)
        except ValueError as exn:
            raise PermissionError(str(exn)) from None
        place = (scheme, host, port, self.context or self.cafile, proxy)
        target = urllib.parse.quote(parts.path or "/", safe="/%:@!$&'()*+,;=~") + (
            f"?{parts.query}" if parts.query else ""
        )
        if same_origin(self.url, url):
            headers = {**self.headers, **extra, **self.signed(method, url, extra)}
        else:  # redirected to another host: neither the options' credentials nor a signature go there
            headers = {**{k: v for k, v in self.headers.items() if k.lower() in HARMLESS_HEADERS}, **extra}
        headers["Accept-Encoding"] = "identity"
        if proxy is not None and scheme == "http":  # the proxy is asked for the whole URL, and told who asks
            target = f"http://{parts.netloc.rpartition('@')[2]}{target}"
            if proxy.authorization:
                headers["Proxy-Authorization"] = proxy.authorization
        for attempt in range(2):
            asked = time.monotonic()
            connection, kept = CONNECTIONS.take(place)
            connection.timeout = pace.wait()  # connecting (a kept connection's socket is set by each read)
            connection.response_class = functools.partial(PacedResponse, pace=pace)  # type: ignore[assignment]
            try:
                connection.request(method, target, headers=headers)
                response = connection.getresponse()
            except (ConnectionError, http.client.BadStatusLine) as exn:
                connection.close()
                if kept and attempt == 0:  # the server closed the idle connection: a fresh one, not a retry
                    continue
                raise ConnectionError(f"{type(exn).__name__}: {exn}") from None
            except BaseException:
                connection.close()
                raise
            break
        answered = time.monotonic()
        try:
            status = response.status
            if status in (301, 302, 303, 307, 308) and response.getheader("Location"):
                connection.close()  # the body of a redirect is not read, so the connection is not kept
                return status, response.msg, b"", response.getheader("Location")
            if status == 416:
                connection.close()
                return status, response.msg, b"", None
            if status not in (200, 206):  # an error, or a redirect without a place to go (S3's wrong region)
                said = store_error_code(response)
                connection.close()
                error: OSError
                if status in (404, 410):
                    error = FileNotFoundError(f"HTTP {status}{said}")
                elif status in (401, 403):
                    error = PermissionError(f"HTTP {status}{said}")
                else:
                    error = RequestError(f"HTTP {status} {response.reason}{said}", status)
                    error.retry_after = retry_after(response.getheader("Retry-After"))
                    error.store_code = said.strip(" ()")
                # what an object store said, for its backend to say in its words (no such bucket...)
                region = response.getheader("x-amz-bucket-region") or ""
                error.answer = (status, said.strip(" ()"), region)  # type: ignore[union-attr]
                raise error
            body: bytes | bytearray
            if method == "HEAD":
                response.read()
                body = b""
            elif status == 200:  # the whole object is coming: read up to the end of the range, drop the rest
                body = read_body(response.read, start, wanted, response.readinto)
            else:
                body = read_body(response.read, 0, wanted, response.readinto)
                if len(body) < wanted and response.length:
                    raise ConnectionError(f"the response stopped after {len(body)} of {wanted} bytes")
            if method == "GET":
                link_for(scheme, host, port).record(len(body), answered - asked, time.monotonic() - answered)
        except http.client.HTTPException as exn:  # IncompleteRead and the like: the connection broke mid-body
            connection.close()
            raise ConnectionError(f"{type(exn).__name__}: {exn}") from None
        except BaseException:
            connection.close()
            raise
        if response.isclosed() and not response.will_close:
            CONNECTIONS.give_back(place, connection)
        else:
            connection.close()
        return status, response.msg, body, None


# fsspec's HTTP options that only tune its own caching and listing: nothing of a read depends on them
_FSSPEC_TUNING = frozenset({
    "block_size", "cache_type", "cache_options", "simple_links", "same_scheme", "encoded", "size_policy",
    "skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths", "asynchronous", "loop",
})  # fmt: skip
_CLIENT = frozenset({"headers", "auth", "ssl", "verify_ssl", "trust_env", "timeout", "raise_for_status"})


def http_settings(url: str, options: dict[str, Any]) -> tuple[dict[str, str], ssl.SSLContext | None]:
    """The headers and the TLS context of the storage ``options`` for ``url`` (see the module doc); an option that
    cannot be honoured here is a :class:`ShardOpenError` naming it."""
    client = options.get("client_kwargs") or {}
    unknown = sorted(set(options) - _FSSPEC_TUNING - {"headers", "client_kwargs", "auth", "ssl", "verify_ssl"})
    unknown += sorted(f"client_kwargs.{name}" for name in set(client) - _CLIENT)
    if unknown:
        raise ShardOpenError(
            f"the storage option {', '.join(unknown)} is not one wds's HTTP client takes (it takes headers, auth, "
            "ssl, verify_ssl and client_kwargs of those; proxies come from http_proxy/https_proxy/no_proxy); "
            "http(s) shards are never handed to fsspec's client, which sends credentials on to another host",
            url=url,
        )
    headers = {**dict(client.get("headers") or {}), **dict(options.get("headers") or {})}
    auth = options.get("auth", client.get("auth"))
    if auth is not None and not any(name.lower() == "authorization" for name in headers):
        headers["Authorization"] = _basic(auth, url)
    verify = options.get("ssl", options.get("verify_ssl", client.get("ssl", client.get("verify_ssl", True))))
    if isinstance(verify, ssl.SSLContext):
        return headers, verify
    if verify is False:
        unverified = ssl.create_default_context()
        unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
        return headers, unverified
    return headers, None


def _basic(auth: Any, url: str) -> str:
    """The ``Authorization`` of ``auth``: aiohttp's ``BasicAuth`` (its ``encode()``) or a ``(user, password)``."""
    if callable(getattr(auth, "encode", None)) and not isinstance(auth, (str, bytes)):
        return str(auth.encode())
    if isinstance(auth, (tuple, list)) and len(auth) == 2:
        return "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
    raise ShardOpenError(f"auth is a (user, password) pair or aiohttp.BasicAuth, got {type(auth).__name__}", url=url)


def http_source(url: str, options: dict[str, Any], retry: RetryPolicy = DEFAULT_RETRY) -> HttpSource:
    """An :class:`HttpSource` for ``url`` with the storage ``options`` (:func:`http_settings`)."""
    headers, context = http_settings(url, options)
    return HttpSource(url, headers, retry=retry, context=context)


class HttpBackend(RangedBackend):
    """``http://`` and ``https://`` objects (see the module doc)."""

    def direct(self, url: str, options: dict[str, Any], retry: RetryPolicy) -> HttpSource:
        return http_source(url, options, retry)


HTTP = HttpBackend()
