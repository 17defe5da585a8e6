"""Real storage servers on 127.0.0.1 for the tests: S3 (moto), GCS (gcp-storage-emulator), HTTP with Range.

Each server runs in a thread of the test process on a free port.  The S3 and
HTTP servers (and ``ShapingProxy``, which puts an object store's latency and bandwidth in front of moto's S3)
can inject faults into the next requests (``Faults``): cut the
connection after part of an object's bytes, or answer 503.  The HTTP server
can also be shaped like an object store (``Shape``: latency, bandwidth per
connection, jitter, stragglers), for the tests and ``benchmarks/`` (harness.servers).  The S3 server
serves only its own buckets and checks that each request is signed with the
access key of the bucket, as two separate S3 endpoints with separate accounts
would.
"""

from __future__ import annotations

import contextlib
import email.utils
import io
import json
import logging
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Faults:
    """Faults to inject into the next object reads (GET requests for object bytes)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cuts: list[int] = []  # for each of the next reads: bytes sent before the connection is cut
        self.errors: list[int] = []  # for each of the next reads: an HTTP status to answer instead
        self.slow: list[tuple[str, float]] = []  # for each of the next reads: ("drip" | "drip-head" | "stall", s)
        self.injected = Counter()
        self.spacing = 0  # requests served normally between two injected faults
        self._quiet = 0

    def cut(self, times: int, after: int) -> None:
        with self.lock:
            self.cuts += [after] * times

    def fail(self, times: int, status: int = 503) -> None:
        with self.lock:
            self.errors += [status] * times

    def drip(self, times: int, every: float, head: bool = False) -> None:
        """The next reads answered one byte every ``every`` seconds: the body (each socket read within any timeout)
        or, with ``head``, the status line and headers too; an upload's body taken in so."""
        with self.lock:
            self.slow += [("drip-head" if head else "drip", every)] * times

    def stall(self, times: int, seconds: float) -> None:
        """The next requests answered after ``seconds``."""
        with self.lock:
            self.slow += [("stall", seconds)] * times

    def pass_next(self, requests: int) -> None:
        """Serve the next ``requests`` reads normally before the first fault."""
        with self.lock:
            self._quiet = requests

    def clear(self) -> None:
        with self.lock:
            self.cuts.clear()
            self.errors.clear()
            self.slow.clear()
            self.injected.clear()
            self.spacing = self._quiet = 0

    def next_fault(self) -> tuple[str, Any] | None:
        with self.lock:
            if self._quiet > 0 and (self.errors or self.cuts or self.slow):
                self._quiet -= 1
                return None
            self._quiet = self.spacing
            if self.errors:
                self.injected["status"] += 1
                return ("status", self.errors.pop(0))
            if self.cuts:
                self.injected["cut"] += 1
                return ("cut", self.cuts.pop(0))
            if self.slow:
                kind, seconds = self.slow.pop(0)
                self.injected[kind] += 1
                return (kind, seconds)
        return None


def _dripped(body: Any, every: float) -> Any:
    """A WSGI body sent one byte every ``every`` seconds (until the client goes)."""
    for piece in body:
        for at in range(len(piece)):
            yield piece[at : at + 1]
            time.sleep(every)


def _drip(out: Any, data: bytes, every: float) -> None:
    """``data`` written one byte every ``every`` seconds (until the client goes)."""
    try:
        for at in range(len(data)):
            out.write(data[at : at + 1])
            out.flush()
            time.sleep(every)
    except OSError:
        pass


def _cut_body(body: Any, limit: int) -> Any:
    sent = 0
    for piece in body:
        if sent + len(piece) >= limit:
            yield piece[: limit - sent]
            raise ConnectionAbortedError("fault injected: connection cut")
        sent += len(piece)
        yield piece


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that says nothing of clients that went away mid-answer (a reader closing a shard
    ends its ranges under way)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _quiet_werkzeug() -> None:
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)


class S3Server:
    """moto's S3 service over real sockets, limited to ``buckets`` (name -> access key)."""

    def __init__(self, buckets: dict[str, str]) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        _quiet_werkzeug()
        self.buckets = dict(buckets)
        self.moved: dict[str, str] = {}  # bucket -> the region it is in: its requests answered 301 PermanentRedirect
        self.faults = Faults()
        self.requests: Counter = Counter()  # (bucket, access key) -> requests
        self.reads: list[tuple[str, str | None]] = []  # object GETs: (path, Range header)
        self.writes: list[tuple[str, str, str]] = []  # PUTs and POSTs: (method, path, query)
        self.write_faults = Faults()  # for part uploads (UploadPart) and whole objects (PutObject)
        self._app = DomainDispatcherApplication(create_backend_app)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._serve()

    def _serve(self) -> None:
        from werkzeug.serving import make_server

        self._server = make_server("127.0.0.1", self.port, self._gate, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def go_down(self) -> None:
        """Stop answering: the port refuses connections (an outage) until :meth:`come_back`; the data stays."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def come_back(self) -> None:
        self._serve()

    def outage(self, seconds: float) -> threading.Thread:
        """Down now, back after ``seconds`` (in the background)."""
        self.go_down()
        back = threading.Timer(seconds, self.come_back)
        back.start()
        return back

    def _gate(self, environ: dict, start_response: Any) -> Any:
        bucket = environ.get("PATH_INFO", "/").lstrip("/").split("/", 1)[0]
        match = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
        key = match.group(1) if match else None
        self.requests[(bucket, key)] += 1
        if bucket in self.moved:
            return _xml_error(start_response, "301 Moved Permanently", "PermanentRedirect", "use the bucket's "
                              "endpoint", [("x-amz-bucket-region", self.moved[bucket])])  # fmt: skip
        if bucket not in self.buckets:
            return _xml_error(start_response, "404 Not Found", "NoSuchBucket", "no such bucket on this endpoint")
        if key != self.buckets[bucket]:
            return _xml_error(start_response, "403 Forbidden", "InvalidAccessKeyId", "wrong access key")
        is_object_read = environ["REQUEST_METHOD"] == "GET" and "/" in environ["PATH_INFO"].strip("/")
        if is_object_read:
            self.reads.append((environ["PATH_INFO"], environ.get("HTTP_RANGE")))
        if environ["REQUEST_METHOD"] in ("PUT", "POST"):
            self.writes.append((environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("QUERY_STRING", "")))
            query = environ.get("QUERY_STRING", "")
            whole = environ["REQUEST_METHOD"] == "PUT" and not query and "/" in environ["PATH_INFO"].strip("/")
            fault = self.write_faults.next_fault() if "partNumber=" in query or whole else None  # a part, an object
            if fault and fault[0] == "status":
                environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
                return _xml_error(start_response, f"{fault[1]} Fault", "SlowDown", "fault injected")
            if fault and fault[0] == "stall":
                time.sleep(fault[1])
            elif fault:  # the upload taken in a byte at a time
                length, taken = int(environ.get("CONTENT_LENGTH") or 0), bytearray()
                while len(taken) < length and (byte := environ["wsgi.input"].read(1)):
                    taken += byte
                    time.sleep(fault[1])
                environ["wsgi.input"] = io.BytesIO(bytes(taken))
        fault = self.faults.next_fault() if is_object_read else None
        if fault and fault[0] == "status":
            return _xml_error(start_response, f"{fault[1]} Fault", "SlowDown", "fault injected")
        if fault and fault[0] == "stall":
            time.sleep(fault[1])
        body = self._app(environ, start_response)
        if fault and fault[0] == "cut":
            return _cut_body(body, fault[1])
        return _dripped(body, fault[1]) if fault and fault[0] != "stall" else body

    def client_options(self, bucket: str) -> dict[str, Any]:
        """s3fs options that reach ``bucket`` on this server."""
        return {
            "key": self.buckets[bucket],
            "secret": f"secret-of-{bucket}",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "eu-west-1"},
        }

    def create_buckets(self) -> None:
        import s3fs

        for bucket in self.buckets:
            fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.client_options(bucket))
            fs.mkdir(bucket)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()


def _xml_error(start_response: Any, status: str, code: str, message: str, headers: Any = ()) -> list[bytes]:
    body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body))), *headers])
    return [body]


@dataclass(frozen=True)
class Shape:
    """What one connection to an object store gives: each response starts ``latency`` seconds (plus up to
    ``jitter``) after its request and is sent at ``bandwidth`` bytes/s at most; a ``stragglers`` fraction of the
    responses (drawn with ``seed``) is ``straggle`` times slower."""

    latency: float = 0.0
    bandwidth: float | None = None
    jitter: float = 0.0
    stragglers: float = 0.0
    straggle: float = 10.0
    seed: int = 0


class Shaper:
    """Delays and paces responses as ``shape`` says."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self._rng = random.Random(shape.seed)
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Sleep for the latency of one response; the factor its bytes are slowed by (a straggler's)."""
        shape = self.shape
        with self._lock:
            jitter = self._rng.random() * shape.jitter
            slow = shape.straggle if self._rng.random() < shape.stragglers else 1.0
        if shape.latency or jitter:
            time.sleep((shape.latency + jitter) * slow)
        return slow

    def answer(self, handler: Any, data: bytes, slow: float, cut: int | None) -> None:
        """Send the body ``data``, shaped; with ``cut``, only its first ``cut`` bytes and the connection is reset."""
        if cut is None:
            self.send(handler.wfile, data, slow)
            return
        handler.wfile.write(data[:cut])
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.shutdown(socket.SHUT_RDWR)

    def send(self, out: Any, data: bytes, slow: float) -> None:
        """Write ``data`` to ``out`` at the shape's bandwidth (divided by ``slow``)."""
        rate = self.shape.bandwidth
        if rate is None:
            out.write(data)
            return
        rate /= slow
        started, step, view = time.monotonic(), 256 << 10, memoryview(data)
        for at in range(0, len(data), step):
            out.write(view[at : at + step])
            ahead = (at + step) / rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)


class ShapingProxy:
    """Any HTTP server (moto's S3 for one) behind an object store's latency and per-connection bandwidth: each
    request is passed on to ``upstream`` and its answer sent back shaped (``Shape``), with fault injection."""

    def __init__(self, upstream: str, shape: Shape) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.shaper = Shaper(shape)
        self.faults = Faults()
        self.requests = 0
        self._local = threading.local()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def relay(self) -> None:
                proxy._relay(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = relay

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        ThreadingHTTPServer.request_queue_size = 128
        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def _relay(self, handler: Any) -> None:
        import http.client

        self.requests += 1
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("connection", "keep-alive")}
        for attempt in range(2):  # a kept connection the upstream closed meanwhile: once more on a new one
            connection = getattr(self._local, "connection", None)
            if connection is None:
                connection = self._local.connection = http.client.HTTPConnection(*self.upstream, timeout=60)
            try:
                connection.request(handler.command, handler.path, body=body, headers=headers)
                response = connection.getresponse()
                data = response.read()
                break
            except (ConnectionError, http.client.HTTPException):
                connection.close()
                self._local.connection = None
                if attempt:
                    raise
        slow = self.shaper.wait()
        is_read = handler.command == "GET" and response.status in (200, 206)
        fault = self.faults.next_fault() if is_read else None
        if fault and fault[0] == "status":
            handler.send_error(fault[1])
            return
        handler.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                handler.send_header(name, value)
        handler.send_header("Content-Length", response.getheader("Content-Length", str(len(data))))
        handler.end_headers()
        if handler.command != "HEAD":
            self.shaper.answer(handler, data, slow, fault[1] if fault else None)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class ForwardProxy:
    """A forward HTTP proxy, as ``http_proxy``/``https_proxy`` name one: ``GET http://host/path`` relayed to the
    host, ``CONNECT host:port`` tunnelled (the TLS is the client's and the host's).  It keeps what it was asked
    (``asked``: the request line's target, or ``CONNECT host:port``) and the ``Proxy-Authorization`` it was given."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.authorizations: list[str | None] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                import http.client
                from urllib.parse import urlsplit

                proxy.asked.append(self.path)
                proxy.authorizations.append(self.headers.get("Proxy-Authorization"))
                target = urlsplit(self.path)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-authorization",
                                                                                       "connection")}  # fmt: skip
                upstream = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=30)
                upstream.request("GET", target.path + (f"?{target.query}" if target.query else ""), headers=headers)
                response = upstream.getresponse()
                body = response.read()
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                upstream.close()

            def do_CONNECT(self) -> None:
                proxy.asked.append(f"CONNECT {self.path}")
                proxy.authorizations.append(self.headers.get("Proxy-Authorization"))
                host, _, port = self.path.rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=30)
                self.send_response(200, "Connection established")
                self.end_headers()
                self.close_connection = True
                ends = [self.connection, upstream]

                def pump(source: Any, sink: Any) -> None:
                    try:
                        while data := source.recv(65536):
                            sink.sendall(data)
                    except OSError:
                        pass
                    finally:
                        for end in ends:
                            with contextlib.suppress(OSError):
                                end.shutdown(socket.SHUT_RDWR)

                other = threading.Thread(target=pump, args=(upstream, self.connection), daemon=True)
                other.start()
                pump(self.connection, upstream)
                other.join(30)
                upstream.close()

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = _Server(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class HttpServer:
    """Files of ``root`` over HTTP/1.1 with single-range ``Range`` support, fault injection and, with ``shape``,
    an object store's latency and per-connection bandwidth."""

    def __init__(
        self, root: str, honour_range: bool = True, shape: Shape | None = None, tls: tuple[str, str] | None = None
    ) -> None:
        self.root = root
        self.faults = Faults()
        self.honour_range = honour_range
        self.shape = shape or Shape()
        self.shaper = Shaper(self.shape)
        self.gets = 0  # GET requests served
        self.heads = 0  # HEAD requests served
        self.ranges: list[str] = []  # the Range header of each GET ("" for none)
        self.headers: list[dict[str, str]] = []  # the headers of each GET
        self.redirect_to: str | None = None  # GET /moved/<path> answers 302 to <redirect_to>/<path>
        self.asked: dict[str, list[int]] = {}  # path -> [requests, bytes asked for] (GET /__stats__ says them)
        self.conditional = True  # If-Match and If-Unmodified-Since are honoured (412), as object stores do
        server = self

        class Handler(SimpleHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, directory=server.root, **kwargs)

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._get(self)

            def do_HEAD(self) -> None:
                server._get(self, head=True)

        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        ThreadingHTTPServer.request_queue_size = 128  # many connections at once, as a store takes them
        self._server = _Server(("127.0.0.1", self.port), Handler)
        if tls is not None:  # (certificate file, key file): see self_signed
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()

    def _get(self, handler: Any, head: bool = False) -> None:
        if handler.path == "/__stats__":  # what was asked for, by path, for a benchmark in another process
            body = json.dumps(self.asked).encode()
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        self._count(handler, head)
        if not head:
            self.gets += 1
            self.ranges.append(handler.headers.get("Range", ""))
            self.headers.append(dict(handler.headers.items()))
        else:
            self.heads += 1
        if self.redirect_to is not None and handler.path.startswith("/moved/"):
            handler.send_response(302)
            handler.send_header("Location", self.redirect_to + handler.path[len("/moved") :])
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        slow = self.shaper.wait()
        path = handler.translate_path(handler.path)
        if not os.path.isfile(path):
            handler.send_error(404)
            return
        fault = None if head else self.faults.next_fault()
        if fault and fault[0] == "status":
            handler.send_error(fault[1])
            return
        if fault and fault[0] == "stall":
            time.sleep(fault[1])
        stream = open(path, "rb")  # noqa: SIM115 - one object: its ETag and bytes from the same open file
        try:
            stat = os.fstat(stream.fileno())  # what an object store says of it (S3 clients such as obstore need both)
            self._answer(handler, head, fault, slow, stream, stat)
        finally:
            stream.close()

    def _count(self, handler: Any, head: bool) -> None:
        """One more request for its path, and the bytes it asks for (a GET without a range: the whole file)."""
        counted = self.asked.setdefault(handler.path, [0, 0])
        counted[0] += 1
        if head:
            return
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range", ""))
        path = handler.translate_path(handler.path)
        size = os.path.getsize(path) if os.path.isfile(path) else 0
        if match:
            counted[1] += max(0, min(size, int(match.group(2)) + 1 if match.group(2) else size) - int(match.group(1)))
        else:
            counted[1] += size

    def _answer(self, handler: Any, head: bool, fault: Any, slow: Any, stream: Any, stat: os.stat_result) -> None:
        size = stat.st_size
        etag = f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'
        modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
        wanted, since = handler.headers.get("If-Match"), handler.headers.get("If-Unmodified-Since")
        if self.conditional and (wanted not in (None, etag) or since not in (None, modified)):
            handler.send_error(412)
            return
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", handler.headers.get("Range", ""))
        start, end = 0, size
        if match and self.honour_range and int(match.group(1)) >= size:
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{size}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if match and self.honour_range:
            start = int(match.group(1))
            end = min(size, int(match.group(2)) + 1 if match.group(2) else size)
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        else:
            handler.send_response(200)
        stream.seek(start)  # only the range: a store does not read the whole object for each one
        data = b"" if head else stream.read(max(end - start, 0))
        handler.send_header("Content-Length", str(max(end - start, 0)))
        handler.send_header("Content-Type", "application/x-tar")
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("ETag", etag)
        handler.send_header("Last-Modified", modified)
        if fault and fault[0] == "drip-head":  # the headers so far held back, then all of it a byte at a time
            headers, handler._headers_buffer = b"".join(handler._headers_buffer) + b"\r\n", []
            _drip(handler.wfile, headers + data, fault[1])
            handler.close_connection = True
            return
        handler.end_headers()
        if fault and fault[0] == "drip":
            _drip(handler.wfile, data, fault[1])
            handler.close_connection = True
        elif not head:
            self.shaper.answer(handler, data, slow, fault[1] if fault and fault[0] == "cut" else None)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def self_signed(directory: str) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by its own key, and the key: ``(certificate file, key file)`` in
    ``directory`` (the certificate is also what a client trusts)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_file, key_file = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    with open(cert_file, "wb") as out:
        out.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key_file, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))  # fmt: skip
    return cert_file, key_file


@contextlib.contextmanager
def http_server_process(root: str, shape: Shape) -> Iterator[str]:
    """An :class:`HttpServer` of ``root``'s files shaped by ``shape``, in a process of its own as a store would be
    (it shares no interpreter with the reader being measured): yields its URL, and ends the process after."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        f"import sys; sys.path.insert(0, {repo!r})\n"
        "from tests.servers import HttpServer, Shape\n"
        f"server = HttpServer({root!r}, shape={shape!r})\n"
        "print(server.url, flush=True)\n"
        "sys.stdin.read()\n"
    )
    server = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        yield server.stdout.readline().strip()
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait()


class GcsServer:
    """gcp-storage-emulator in memory, with ``bucket`` created."""

    def __init__(self, bucket: str) -> None:
        from gcp_storage_emulator.server import create_server

        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = create_server("127.0.0.1", self.port, in_memory=True, default_bucket=bucket)
        self._server.start()

    def client_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint, "token": "anon", "project": "wds-tests"}

    def stop(self) -> None:
        self._server.stop()
