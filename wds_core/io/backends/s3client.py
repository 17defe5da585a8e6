"""S3 options as s3fs reads them, and botocore's client for those this package honours (one per set of options
and process, its connection pool as large as the I/O pool, botocore's retries off unless ``config_kwargs`` sets
them: wds's retry policy is the only one); what S3's errors mean to the retry policy (:func:`status_error`).
Reading (:mod:`.s3`) and writing (:mod:`.s3upload`) both use them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

from ...errors import ShardChangedError
from ..forklocks import ForkSafeLock
from ..remote.retries import NotInStore
from .http import RequestError

__all__ = ["PastTheEnd", "no_such_bucket", "s3_client", "s3_object", "status_error", "store_error"]

_IGNORED = {  # s3fs options about its own caches and uploads: nothing to do with reading a range
    "skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths", "default_block_size",
    "default_fill_cache", "default_cache_type", "cache_regions", "max_concurrency", "fixed_upload_size",
    "asynchronous", "loop", "local_expiry_check",
}  # fmt: skip
_KNOWN = {"key", "secret", "token", "username", "password", "anon", "endpoint_url", "client_kwargs", "config_kwargs"}
_KNOWN |= {"profile", "use_ssl"}
_CLIENT_KEYS = {"endpoint_url", "region_name", "verify", "use_ssl", "aws_access_key_id", "aws_secret_access_key"}
_CLIENT_KEYS |= {"aws_session_token"}
_POOL = 64  # connections of one client: as many as the I/O pool has threads

_clients: dict[str, Any] = {}
_clients_pid = 0
_clients_lock = ForkSafeLock()


def s3_client(options: dict[str, Any]) -> Any:
    """botocore's S3 client for options :func:`s3_object` returned (one per set of options and process)."""
    global _clients, _clients_pid
    name = json.dumps(options, sort_keys=True, default=repr)
    with _clients_lock:
        if _clients_pid != os.getpid():
            _clients, _clients_pid = {}, os.getpid()
        client = _clients.get(name)
        if client is None:
            client = _clients[name] = _make_client(options)
        return client


def _make_client(options: dict[str, Any]) -> Any:
    import botocore.session
    from botocore import UNSIGNED
    from botocore.config import Config

    session = botocore.session.Session(profile=options.get("profile"))
    settings = dict(options.get("config_kwargs") or {})
    settings.setdefault("retries", {"total_max_attempts": 1})
    settings.setdefault("max_pool_connections", _POOL)
    if options.get("anon"):
        settings["signature_version"] = UNSIGNED
    made: dict[str, Any] = {"use_ssl": options.get("use_ssl", True)}
    if options.get("endpoint_url"):
        made["endpoint_url"] = options["endpoint_url"]
    key, secret = options.get("key") or options.get("username"), options.get("secret") or options.get("password")
    if key:
        made["aws_access_key_id"] = key
    if secret:
        made["aws_secret_access_key"] = secret
    if options.get("token"):
        made["aws_session_token"] = options["token"]
    made.update(options.get("client_kwargs") or {})
    return session.create_client("s3", config=Config(**settings), **made)


def s3_object(url: str, options: dict[str, Any]) -> tuple[dict[str, Any], str, str] | None:
    """The options this module honours, the bucket and the key of ``url``; ``None`` when the s3 extra is not
    installed or an option is one only s3fs knows."""
    known = {name: value for name, value in options.items() if name not in _IGNORED}
    if set(known) - _KNOWN or set(known.get("client_kwargs") or {}) - _CLIENT_KEYS:
        return None
    if not _installed("s3fs") or not _installed("botocore"):  # without the s3 extra, the error names it
        return None
    bucket, _, key = url.split("://", 1)[1].partition("/")
    if not bucket or not key:
        return None
    return known, bucket, key


def _installed(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


class PastTheEnd(Exception):
    def __init__(self, size: int | None) -> None:
        self.size = size


def status_error(exn: Exception, bucket: str = "", key: str = "") -> Exception:
    """A botocore ClientError as the exception wds's retry policy reads, saying what is wrong as the store says it
    (no such bucket, no such key, access denied and why, wrong region or endpoint); any other exception as it is."""
    response = getattr(exn, "response", None)
    if "ClientError" not in {cls.__name__ for cls in type(exn).__mro__} or not isinstance(response, dict):
        return exn
    error = response.get("Error", {})
    code = str(error.get("Code", ""))
    meta = response.get("ResponseMetadata", {})
    status = int(meta.get("HTTPStatusCode") or 0)
    if status == 416 or code == "InvalidRange":
        size = str(error.get("ActualObjectSize", ""))
        return PastTheEnd(int(size) if size.isdigit() else None)
    if status == 412 or code == "PreconditionFailed":  # IfMatch failed: another object is there now
        return ShardChangedError("the shard was replaced while it was read (its ETag no longer matches)")
    region = (meta.get("HTTPHeaders") or {}).get("x-amz-bucket-region") or error.get("Region") or ""
    return store_error(status, code, region, bucket, key)


def store_error(status: int, code: str, region: str, bucket: str, key: str) -> Exception:
    """The exception for an S3 error answer (``status``, the body's ``code``, the bucket's ``region`` header)."""
    message = f"{code or 'HTTP'} ({status})"
    if code == "NoSuchBucket":
        return NotInStore(no_such_bucket(bucket))
    if code == "NoSuchKey" or (status == 404 and code in ("", "404", "NotFound")):
        return NotInStore(f"no such key {key!r} in bucket {bucket!r}" if key else message)
    if status in (401, 403) or code in _DENIED_CODES:
        return PermissionError(_DENIED_CODES.get(code, _DENIED_CODES["403"]).format(code=code or "HTTP", status=status))
    if status in (301, 307) or code in (
        "PermanentRedirect",
        "AuthorizationHeaderMalformed",
        "IllegalLocationConstraintException",
    ):
        where = (
            f"bucket {bucket!r} is in region {region!r}"
            if region
            else f"the store redirected the request for bucket {bucket!r}"
        )
        return RequestError(f"wrong region or endpoint ({code or 'HTTP'} {status}): {where}; {_REGION_HINT}", status)
    return RequestError(message, status or 500)


def no_such_bucket(bucket: str) -> str:
    return (
        f"no such bucket {bucket!r} at this endpoint: create it first (with your store's console or tools, or "
        f"python -c \"import s3fs; s3fs.S3FileSystem().makedirs('{bucket}', exist_ok=True)\"), or check the "
        "bucket's name and the endpoint (AWS_ENDPOINT_URL, storage_options endpoint_url)"
    )


_DENIED_CODES = {
    "InvalidAccessKeyId": "access denied: the store knows no such access key ID ({code}, {status})",
    "SignatureDoesNotMatch": "access denied: the secret key does not match the access key ID ({code}, {status})",
    "ExpiredToken": "access denied: the session token has expired ({code}, {status})",
    "AccessDenied": "access denied: these credentials may not do this to this bucket or key ({code}, {status})",
    "403": "access denied: wrong credentials, or no permission for this bucket or key (HTTP {status})",
}
_REGION_HINT = (
    "set the region (AWS_REGION, or storage_options client_kwargs region_name) or the endpoint (AWS_ENDPOINT_URL)"
)
