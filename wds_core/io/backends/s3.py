"""S3 range requests from the I/O pool's threads: signed here, or through botocore's (thread-safe) client.

When the credentials are given (the options' ``key``/``secret``/``token``, or
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``), or
``anon=True``, and the endpoint is known (``endpoint_url``, path-style, or
AWS's with a region from ``client_kwargs`` or ``AWS_REGION``), each request
is signed here (Signature Version 4, ``hashlib`` and ``hmac``) and sent by
:class:`~wds_core.io.backends.http.HttpSource`: a process reads its first sample
without importing botocore (0.2 s on a 2-core machine).  Otherwise -- a
profile, a credentials file, an instance role, ``config_kwargs``,
``use_ssl=False``, a China region -- botocore's client is used, made once per
set of options and process.  ``AWS_CA_BUNDLE`` is honoured either way.

s3fs's options are read as s3fs reads them (``key``/``secret``/``token``,
``anon``, ``endpoint_url``, ``client_kwargs``, ``config_kwargs``, ``profile``,
``use_ssl``); an option this module does not know (``requester_pays``,
``version_aware``, ``s3_additional_kwargs``, ``session``...) leaves the shard
to s3fs, so that no option is dropped.  One client per set of options and
process, its connection pool as large as the I/O pool, botocore's retries off
unless ``config_kwargs`` sets them (wds's retry policy is the only one).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
import urllib.parse
from typing import Any

from ...errors import ShardChangedError
from ..remote.rangestream import RangeSource
from ..remote.retries import DEFAULT_RETRY, Attempts, NotInStore, Pace, RetryPolicy
from ..shardsink import ShardSink
from .base import Settings
from .http import HttpSource
from .httpconn import read_body
from .ranged import RangedBackend
from .s3client import PastTheEnd, no_such_bucket, s3_client, s3_object, status_error, store_error
from .s3upload import s3_upload

__all__ = ["S3", "S3Backend", "S3Source", "SignedS3Source", "read_paced", "s3_source"]

_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_VIRTUAL_BUCKET = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")  # names AWS serves as <bucket>.s3.<region>...


def _signed_source(bucket: str, key: str, options: dict[str, Any], retry: RetryPolicy) -> SignedS3Source | None:
    """A :class:`SignedS3Source` when the options say all it needs (see the module doc), else ``None``."""
    client = options.get("client_kwargs") or {}
    if options.get("profile") or options.get("config_kwargs") or set(client) - {"endpoint_url", "region_name"}:
        return None
    env = os.environ
    if options.get("use_ssl") is False:
        return None
    endpoint = options.get("endpoint_url") or client.get("endpoint_url")
    endpoint = endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    region = client.get("region_name") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    credentials: tuple[str, str, str | None] | None = None
    if not options.get("anon"):
        key_id, secret = options.get("key") or options.get("username"), options.get("secret") or options.get("password")
        token = options.get("token")
        if not key_id and not secret:
            key_id, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
            token = env.get("AWS_SESSION_TOKEN")
        if not key_id or not secret:
            return None  # a profile, a credentials file or the instance's role: botocore finds those
        credentials = (key_id, secret, token)
    path = urllib.parse.quote(key, safe="/~")
    if endpoint:
        url = f"{endpoint.rstrip('/')}/{urllib.parse.quote(bucket, safe='')}/{path}"
    elif region and _VIRTUAL_BUCKET.fullmatch(bucket) and not region.startswith("cn-"):  # China: amazonaws.com.cn
        url = f"https://{bucket}.s3.{region}.amazonaws.com/{path}"
    else:
        return None  # the bucket's region is found by botocore's redirects
    source = SignedS3Source(url, credentials, region or "us-east-1", env.get("AWS_CA_BUNDLE") or None, retry)
    source.bucket, source.key = bucket, key
    return source


class SignedS3Source(HttpSource):
    """An S3 object read by ranged GETs signed with Signature Version 4 (``credentials=None``: anonymous)."""

    def __init__(
        self,
        url: str,
        credentials: tuple[str, str, str | None] | None,
        region: str,
        cafile: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        super().__init__(url, cafile=cafile, retry=retry)  # AWS_CA_BUNDLE, as botocore reads it
        self.credentials, self.region = credentials, region
        self.bucket, self.key = "", ""  # the object's, for errors in the store's words
        self._keys: tuple[str, bytes] = ("", b"")  # (day, signing key of that day)

    def get(self, start: int, end: int, left: float | None) -> tuple[bytes | bytearray, int | None]:
        try:
            return super().get(start, end, left)
        except OSError as exn:
            raise self._in_words(exn) from None

    def info(self, left: float | None) -> dict[str, Any]:
        try:
            return super().info(left)
        except (FileNotFoundError, PermissionError):  # a HEAD's answer has no body to say what is wrong: a GET's has
            self.get(0, 1, left)
            raise
        except OSError as exn:
            raise self._in_words(exn) from None

    def _in_words(self, exn: OSError) -> Exception:
        """An error answer as the store said it (no such bucket, no such key, access denied...)."""
        answer = getattr(exn, "answer", None)
        if answer is None:
            return exn
        status, code, region = answer
        return store_error(status, code, region, self.bucket, self.key)

    def signed(self, method: str, url: str, headers: dict[str, str]) -> dict[str, str]:
        if self.credentials is None:
            return {}
        key_id, secret, token = self.credentials
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        if parts.port and parts.port != (443 if parts.scheme == "https" else 80):
            host = f"{host}:{parts.port}"  # as http.client sends it
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        day = stamp[:8]
        added = {"x-amz-date": stamp, "x-amz-content-sha256": _EMPTY_SHA256}
        if token:
            added["x-amz-security-token"] = token
        signed = {"host": host, **added}
        signed.update((name.lower(), value.strip()) for name, value in headers.items() if name.lower() == "range")
        names = sorted(signed)
        canonical = "\n".join(
            [method, parts.path or "/", parts.query, "".join(f"{n}:{signed[n]}\n" for n in names), ";".join(names),
             _EMPTY_SHA256]
        )  # fmt: skip
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(secret, day), to_sign.encode(), hashlib.sha256).hexdigest()
        added["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"
        )
        return added

    def _signing_key(self, secret: str, day: str) -> bytes:
        if self._keys[0] != day:
            key = f"AWS4{secret}".encode()
            for part in (day, self.region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            self._keys = (day, key)
        return self._keys[1]


class S3Source:
    """One S3 object, read by ranged ``GetObject`` calls (with no retry budget: botocore's calls cannot be cut off
    mid-request); each response's body held to the retry policy's least rate (:func:`read_paced`)."""

    sizes_in_ranges = True  # ContentRange

    def __init__(self, options: dict[str, Any], bucket: str, key: str, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self.options, self.bucket, self.key, self.retry = options, bucket, key, retry
        self.etag: str | None = None  # the first answer's: later ranges are asked of that object only (IfMatch)
        self.attempts = Attempts(retry)  # the requests under way, stopped when the reader closes the shard

    def close(self) -> None:
        """The reader is done with the object: bodies still being read (ranges read ahead) end now."""
        self.attempts.stop()

    def get(self, start: int, end: int, left: float | None) -> tuple[bytes, int | None]:
        if end <= start:
            return b"", None
        pinned = {} if self.etag is None else {"IfMatch": self.etag}
        try:
            answer = s3_client(self.options).get_object(
                Bucket=self.bucket, Key=self.key, Range=f"bytes={start}-{end - 1}", **pinned
            )
        except Exception as exn:
            error = status_error(exn, self.bucket, self.key)
            if isinstance(error, PastTheEnd):
                return b"", error.size
            raise error from None
        body, pace = answer["Body"], self.attempts.begin(left)
        try:
            if self.etag is None:
                self.etag = answer.get("ETag")
            elif answer.get("ETag") not in (None, self.etag):  # a store that ignored IfMatch
                raise ShardChangedError(f"the shard was replaced while it was read (its ETag was {self.etag})")
            data = read_paced(body, end - start, pace)
        finally:
            self.attempts.end(pace)
            body.close()
        total = (answer.get("ContentRange") or "").rpartition("/")[2]
        return data, int(total) if total.isdigit() else None

    def version(self) -> str | None:
        """The object's ETag as the first answer gave it."""
        return None if self.etag is None else f"etag:{self.etag}"

    def info(self, left: float | None) -> dict[str, Any]:
        client = s3_client(self.options)
        try:
            answer = client.head_object(Bucket=self.bucket, Key=self.key)
        except Exception as exn:
            error = status_error(exn, self.bucket, self.key)
            if isinstance(error, FileNotFoundError):  # a HEAD's answer has no body: is it the bucket or the key?
                error = self._missing_bucket(client) or error
            raise error from None
        return {"type": "file", "size": int(answer["ContentLength"])}

    def _missing_bucket(self, client: Any) -> Exception | None:
        """The error that says the bucket is missing, if it is (one more request, on the way to an error)."""
        try:
            client.head_bucket(Bucket=self.bucket)
        except Exception as exn:
            error = status_error(exn, self.bucket)
            if isinstance(error, FileNotFoundError):
                return NotInStore(no_such_bucket(self.bucket))
        return None


def read_paced(body: Any, wanted: int, pace: Pace) -> bytes:
    """Up to ``wanted`` bytes of a botocore response body, each wait for bytes held to ``pace``.

    ``StreamingBody.read(n)`` waits for all ``n`` bytes, each socket read within botocore's read timeout, so a
    server sending a byte every fraction of a second holds it for ever; here the body is read with urllib3's
    ``read1`` (what has arrived, one socket read at most), the socket's timeout set to what ``pace`` allows.
    """
    raw: Any = getattr(body, "_raw_stream", None)
    if not hasattr(raw, "read1"):  # not urllib3's response: read as botocore reads
        return body.read(wanted)  # type: ignore[no-any-return]
    sock = getattr(getattr(raw, "_connection", None), "sock", None)
    if sock is not None:
        pace.watch(sock)

    def read(n: int) -> bytes:
        wait = pace.wait()
        if sock is not None:
            sock.settimeout(wait)
        piece: bytes = raw.read1(n)
        if piece:
            pace.arrived(len(piece))
        return piece

    return bytes(read_body(read, 0, wanted))  # pieces joined: bytes already (no copy)


def s3_source(
    url: str, options: dict[str, Any], retry: RetryPolicy = DEFAULT_RETRY
) -> SignedS3Source | S3Source | None:
    """A :class:`SignedS3Source` or an :class:`S3Source` for ``url``, its responses held to ``retry``'s least rate;
    ``None`` when the s3 extra is not installed or an option is one only s3fs knows."""
    found = s3_object(url, options)
    if found is None:
        return None
    known, bucket, key = found
    return _signed_source(bucket, key, known, retry) or S3Source(known, bucket, key, retry)


class S3Backend(RangedBackend):
    """``s3://`` (and ``s3a://``) objects: read by ranges straight from the I/O pool's threads (:func:`s3_source`),
    written in parts uploaded in parallel (:mod:`.s3upload`); through s3fs when an option is one only s3fs knows,
    or a retry ``budget`` is set (botocore's calls cannot be cut off mid-request)."""

    def direct(self, url: str, options: dict[str, Any], retry: RetryPolicy) -> RangeSource | None:
        return None if retry.budget is not None else s3_source(url, options, retry)

    def create(self, url: str, settings: Settings) -> ShardSink:
        upload = s3_upload(url, settings.options_for(url), settings.retry)  # None: an option only s3fs knows
        return upload if upload is not None else super().create(url, settings)


S3 = S3Backend()
