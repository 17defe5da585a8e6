"""A local stand-in for the Hugging Face Hub (``HF_ENDPOINT``), and a rate-limited object store.

:class:`HubServer` is two hosts on 127.0.0.1, as the Hub is: the *Hub* answers ``/{datasets/,spaces/,}ORG/REPO/
resolve/REV/PATH`` and ``/buckets/NS/BUCKET/resolve/PATH`` with a 302 to the *storage* host, whose URL is signed and
expires (``?Expires=...&Signature=...``: a stale or forged one is a 403, as a CDN answers), and lists
``/api/{datasets,models,spaces}/ORG/REPO/tree/REV[/PATH]`` and ``/api/buckets/NS/BUCKET/tree[/PREFIX]`` as JSON pages
(a ``Link: <...>; rel="next"`` header past ``page`` entries), as huggingface_hub reads them.  A repository named in
``private`` needs ``Authorization: Bearer <token>`` (401 otherwise); past ``rate`` requests a second the Hub answers
429 with ``Retry-After``.  Every request is recorded with its headers, per host.

:class:`LimitedStore` serves the files of a folder by ranges and admits ``rate`` requests a second (a fixed window,
as the Hub and stores count): beyond, ``429`` with ``Retry-After`` (the seconds to the next window) or ``503
SlowDown`` without one, as S3 answers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.servers import free_port

__all__ = ["HubServer", "LimitedStore", "Window"]


class Window:
    """At most ``rate`` requests admitted each whole second; :meth:`admit` is ``None`` or the seconds to wait."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.second, self.count = 0, 0
        self.admitted = self.refused = 0
        self.lock = threading.Lock()

    def admit(self) -> float | None:
        if self.rate is None:
            self.admitted += 1
            return None
        with self.lock:
            now = time.time()
            if int(now) != self.second:
                self.second, self.count = int(now), 0
            if self.count < self.rate:
                self.count += 1
                self.admitted += 1
                return None
            self.refused += 1
            return int(now) + 1 - now


def _send_range(handler: BaseHTTPRequestHandler, data: bytes, etag: str, head: bool = False) -> None:
    """``data`` (or its asked-for range) as a file server sends it, with ``ETag`` and ``If-Match`` honoured."""
    wanted = handler.headers.get("If-Match")
    if wanted not in (None, etag):
        handler.send_error(412)
        return
    match = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range", ""))
    start, end = 0, len(data)
    if match:
        start = int(match.group(1))
        if start >= len(data):
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{len(data)}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        end = min(len(data), int(match.group(2)) + 1 if match.group(2) else len(data))
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
    else:
        handler.send_response(200)
    handler.send_header("Content-Length", str(end - start))
    handler.send_header("ETag", etag)
    handler.send_header("Accept-Ranges", "bytes")
    handler.end_headers()
    if not head:
        handler.wfile.write(data[start:end])


def _refuse(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes = b"") -> None:
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class _Host:
    """One threaded HTTP host on 127.0.0.1 whose requests go to ``answer(handler, head)``."""

    def __init__(self, answer: Any) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path, headers)
        host = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                host.requests.append(("GET", self.path, dict(self.headers.items())))
                answer(self, False)

            def do_HEAD(self) -> None:  # noqa: N802
                host.requests.append(("HEAD", self.path, dict(self.headers.items())))
                answer(self, True)

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        ThreadingHTTPServer.request_queue_size = 256
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class HubServer:
    """The Hub and its storage host (see the module doc).  ``add(kind, repo, path, data)`` puts a file in a
    repository (``kind``: ``dataset``, ``model``, ``space`` or ``bucket``); ``revisions`` maps a branch to its
    commit for every repository (``main`` by default)."""

    SECRET = b"stand-in signing key"

    def __init__(self, token: str = "hf_secret_token_123", rate: float | None = None, expires: float = 600.0,
                 page: int = 50) -> None:  # fmt: skip
        self.token = token
        self.files: dict[tuple[str, str, str], bytes] = {}  # (kind, repo, path) -> bytes
        self.private: set[str] = set()
        self.expires = expires  # seconds a signed URL holds
        self.page = page
        self.window = Window(rate)
        self.resolves = 0
        self.direct = False  # answer resolve URLs with the file itself (as the Hub does for a small one)
        self.storage = _Host(self._storage)
        self.hub = _Host(self._hub)
        self.url = self.hub.url

    def add(self, kind: str, repo: str, path: str, data: bytes) -> None:
        self.files[(kind, repo, path)] = data

    def _key(self, kind: str, repo: str, path: str) -> str:
        return hashlib.sha256(f"{kind}\0{repo}\0{path}".encode()).hexdigest()[:32]

    def _sign(self, key: str, until: int) -> str:
        return hmac.new(self.SECRET, f"{key}:{until}".encode(), hashlib.sha256).hexdigest()

    def _allowed(self, handler: BaseHTTPRequestHandler, repo: str) -> bool:
        if repo not in self.private:
            return True
        if handler.headers.get("Authorization") == f"Bearer {self.token}":
            return True
        _refuse(handler, 401, {"X-Error-Code": "RepoNotFound"}, b'{"error": "Invalid credentials"}')
        return False

    def _hub(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        wait = self.window.admit()
        if wait is not None:
            _refuse(handler, 429, {"Retry-After": str(max(1, round(wait)))}, b'{"error": "rate limited"}')
            return
        parts = urllib.parse.urlsplit(handler.path)
        path = urllib.parse.unquote(parts.path)
        resolve = re.fullmatch(r"/(datasets/|spaces/|buckets/)?([^/]+/[^/]+)/resolve/(.+)", path)
        tree = re.fullmatch(r"/api/(datasets|models|spaces|buckets)/([^/]+/[^/]+)/tree(/.*)?", path)
        if resolve:
            kind = {"datasets/": "dataset", "spaces/": "space", "buckets/": "bucket"}.get(resolve.group(1) or "",
                                                                                         "model")  # fmt: skip
            repo, rest = resolve.group(2), resolve.group(3)
            name = rest if kind == "bucket" else rest.split("/", 1)[1] if "/" in rest else ""
            self._resolve(handler, kind, repo, name)
        elif tree:
            kind = {"datasets": "dataset", "models": "model", "spaces": "space", "buckets": "bucket"}[tree.group(1)]
            self._tree(handler, kind, tree.group(2), tree.group(3) or "", dict(urllib.parse.parse_qsl(parts.query)))
        else:
            _refuse(handler, 404, {}, b"{}")

    def _resolve(self, handler: BaseHTTPRequestHandler, kind: str, repo: str, name: str) -> None:
        if not self._allowed(handler, repo):
            return
        if (kind, repo, name) not in self.files:
            _refuse(handler, 404, {"X-Error-Code": "EntryNotFound"}, b"{}")
            return
        self.resolves += 1
        key = self._key(kind, repo, name)
        if self.direct:
            _send_range(handler, self.files[(kind, repo, name)], f'"{key}"', handler.command == "HEAD")
            return
        until = int(time.time() + self.expires)
        location = f"{self.storage.url}/blobs/{key}?Expires={until}&Signature={self._sign(key, until)}"
        _refuse(handler, 302, {"Location": location, "X-Repo-Commit": "0" * 40,
                               "X-Linked-Size": str(len(self.files[(kind, repo, name)]))})  # fmt: skip

    def _tree(self, handler: BaseHTTPRequestHandler, kind: str, repo: str, rest: str, query: dict[str, str]) -> None:
        if not self._allowed(handler, repo):
            return
        folder = rest.lstrip("/")
        if kind != "bucket":  # /tree/REV[/PATH]
            folder = folder.split("/", 1)[1] if "/" in folder else ""
        recursive = query.get("recursive", "false").lower() == "true"
        entries, folders = [], set()
        for (k, r, path), data in sorted(self.files.items()):
            if k != kind or r != repo or not path.startswith(folder.rstrip("/") + "/" if folder else ""):
                continue
            below = path[len(folder.rstrip("/")) + 1 :] if folder else path
            if "/" in below and not recursive:
                folders.add((folder.rstrip("/") + "/" if folder else "") + below.split("/")[0])
                continue
            entries.append({"type": "file", "path": path, "size": len(data), "oid": hashlib.sha1(data).hexdigest()})
        entries = [{"type": "directory", "path": f, "oid": "0" * 40, "size": 0} for f in sorted(folders)] + entries
        start = int(query.get("cursor", "0"))
        page = entries[start : start + self.page]
        headers = {"Content-Type": "application/json"}
        if start + self.page < len(entries):
            nxt = dict(query, cursor=str(start + self.page))
            parts = urllib.parse.urlsplit(handler.path)
            headers["Link"] = f'<{self.url}{parts.path}?{urllib.parse.urlencode(nxt)}>; rel="next"'
        _refuse(handler, 200, headers, json.dumps(page).encode())

    def _storage(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        parts = urllib.parse.urlsplit(handler.path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        key = parts.path.rsplit("/", 1)[-1]
        until = int(query.get("Expires", "0") or 0)
        if not hmac.compare_digest(self._sign(key, until), query.get("Signature", "")) or until < time.time():
            _refuse(handler, 403, {"Content-Type": "application/xml"},
                    b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>")  # fmt: skip
            return
        for (kind, repo, path), data in self.files.items():
            if self._key(kind, repo, path) == key:
                _send_range(handler, data, f'"{hashlib.md5(data).hexdigest()}"', head)
                return
        _refuse(handler, 404, {}, b"")

    def stop(self) -> None:
        self.hub.stop()
        self.storage.stop()


class LimitedStore:
    """The files of ``root`` by ranges, ``rate`` requests a second admitted (see the module doc); ``slowdown``:
    refuse with 503 SlowDown (no ``Retry-After``) instead of 429."""

    def __init__(self, root: str, rate: float, slowdown: bool = False) -> None:
        self.root, self.slowdown = root, slowdown
        self.window = Window(rate)
        self.served = 0  # bytes of the admitted answers
        self.host = _Host(self._answer)
        self.url = self.host.url

    def _answer(self, handler: BaseHTTPRequestHandler, head: bool) -> None:
        wait = self.window.admit()
        if wait is not None:
            if self.slowdown:
                _refuse(
                    handler,
                    503,
                    {"Content-Type": "application/xml"},
                    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
                )
            else:
                _refuse(handler, 429, {"Retry-After": f"{wait:.3f}"}, b"")
            return
        path = os.path.join(self.root, os.path.basename(urllib.parse.urlsplit(handler.path).path))
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            _refuse(handler, 404, {}, b"")
            return
        _send_range(handler, data, f'"{os.stat(path).st_mtime_ns:x}"', head)
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range", ""))
        if match and not head:
            start = int(match.group(1))
            end = min(len(data), int(match.group(2)) + 1 if match.group(2) else len(data))
            self.served += max(0, end - start)

    def stop(self) -> None:
        self.host.stop()
