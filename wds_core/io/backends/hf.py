"""``hf://`` shards on the Hugging Face Hub, read by ranges through wds's own HTTP client.

The forms are huggingface_hub's: ``hf://datasets/ORG/REPO[@REVISION]/PATH``, ``hf://spaces/...``,
``hf://models/ORG/REPO/...`` (or ``hf://ORG/REPO/...``), and Storage Buckets ``hf://buckets/NS/BUCKET/PATH``
(no revision); a revision with a slash is written quoted (``@refs%2Fconvert%2Fparquet``).  A shard is the Hub's
*resolve* URL (``{endpoint}/datasets/ORG/REPO/resolve/REVISION/PATH``), which answers with a redirect to a signed
URL on the storage host; :class:`HfSource` reads it as any HTTP(S) object (:mod:`.http`: kept-alive connections,
ranges that grow with the link, the If-Match pin), and:

* **resolves a shard once**: the redirect is kept for the process (:data:`RESOLVED`) until the signed URL
  expires (its ``Expires`` / ``X-Amz-Date`` + ``X-Amz-Expires``, else five minutes), so every range, and every
  epoch's open, goes straight to the storage host; forked DataLoader workers start with the parent's.  A signed URL
  refused (expired early, revoked) sends the next try to the Hub again.
* **sends the token to the Hub only**: ``Authorization: Bearer`` goes to the endpoint's host, never on to the
  redirect's host (:func:`.httpconn.same_origin`), and never into a message, a cache file's name or a state
  (which hold the ``hf://`` URL).  The token is the storage options' ``token`` (``storage={"hf://": {"token":
  ...}}``), else huggingface_hub's (``HF_TOKEN``, then the file ``hf auth login`` saved), else, without
  huggingface_hub, ``HF_TOKEN`` and ``$HF_HOME/token``.  The endpoint is the options' ``endpoint``, else
  ``HF_ENDPOINT``, else ``https://huggingface.co``.
* **lists once**: a glob in a spec (``hf://datasets/ORG/REPO/train/*.tar``) is listed when the dataset is made,
  through huggingface_hub (``pip install huggingface_hub``), and the list travels to the workers with the dataset.

The Hub's rate limit (429 with ``Retry-After``) slows the process down (:mod:`..remote.throttle`).  Writing to
``hf://`` goes through huggingface_hub's own filesystem (fsspec's ``hf`` protocol), where the Hub allows it.
"""

from __future__ import annotations

import fnmatch
import glob as _glob
import hashlib
import os
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from ...errors import SpecError
from ..forklocks import ForkSafeLock
from ..provenance import DataURL
from ..remote.retries import DEFAULT_RETRY, RetryPolicy, with_retries
from .http import HttpSource, http_settings, redirected
from .ranged import RangedBackend

__all__ = ["HF", "RESOLVED", "HfBackend", "HfPath", "HfSource", "expand_hf", "hf_endpoint", "hf_token", "parse_hf"]

_KINDS = {"datasets": "dataset", "spaces": "space", "models": "model", "buckets": "bucket"}
_DEFAULT_ENDPOINT = "https://huggingface.co"
_KEEP = 300.0  # seconds a redirect is kept when its signed URL does not say when it expires
_MARGIN = 30.0  # a signed URL is asked for again this long before it expires


@dataclass(frozen=True)
class HfPath:
    """An ``hf://`` URL read: the repository's kind (``dataset``, ``model``, ``space``, ``bucket``), its id
    (``ORG/REPO``), the revision (``None`` for a bucket) and the path in it."""

    kind: str
    repo: str
    revision: str | None
    path: str

    def resolve_url(self, endpoint: str) -> str:
        """The Hub URL that answers with the file (a redirect to the storage host for a large one)."""
        path = urllib.parse.quote(self.path, safe="/")
        if self.kind == "bucket":
            return f"{endpoint}/buckets/{self.repo}/resolve/{path}"
        prefix = {"dataset": "datasets/", "space": "spaces/", "model": ""}[self.kind]
        revision = urllib.parse.quote(self.revision or "main", safe="")
        return f"{endpoint}/{prefix}{self.repo}/resolve/{revision}/{path}"

    def url(self, path: str | None = None) -> str:
        """The ``hf://`` URL of ``path`` (this one's by default) in the same repository and revision."""
        plural = {v: k for k, v in _KINDS.items()}[self.kind]
        at = "" if self.revision is None else "@" + urllib.parse.quote(self.revision, safe="")
        return f"hf://{plural}/{self.repo}{at}/{self.path if path is None else path}"


def parse_hf(url: str) -> HfPath:
    """``url`` read as an ``hf://`` URL (see the module doc); a :class:`SpecError` says what is wrong with it."""
    if not url.startswith("hf://"):
        raise SpecError(f"not an hf:// URL: {url!r}")
    parts = url[len("hf://") :].split("/")
    kind = "model"
    if parts and parts[0] in _KINDS:
        kind = _KINDS[parts.pop(0)]
    if len(parts) < 3 or not parts[0] or not parts[1]:
        raise SpecError(
            f"an hf:// URL names a repository and a file in it: hf://datasets/ORG/REPO[@REVISION]/PATH (or "
            f"hf://buckets/NS/BUCKET/PATH), got {url!r}"
        )
    name, _, revision = parts[1].partition("@")
    if kind == "bucket" and revision:
        raise SpecError(f"a Storage Bucket has no revisions: {url!r}")
    path = "/".join(parts[2:])
    if not path or ".." in path.split("/"):
        raise SpecError(f"an hf:// URL names a file in its repository, got {url!r}")
    revision_text = urllib.parse.unquote(revision) if revision else None
    return HfPath(kind, f"{parts[0]}/{name}", None if kind == "bucket" else (revision_text or "main"), path)


def hf_endpoint(options: dict[str, Any] | None = None) -> str:
    """The Hub's address: the options' ``endpoint``, else ``HF_ENDPOINT``, else huggingface.co."""
    named = (options or {}).get("endpoint") or os.environ.get("HF_ENDPOINT") or _DEFAULT_ENDPOINT
    return str(named).rstrip("/")


def hf_token(options: dict[str, Any] | None = None) -> str | None:
    """The token for the Hub: the options' ``token``, else huggingface_hub's, else ``HF_TOKEN`` or the saved one."""
    given = (options or {}).get("token")
    if isinstance(given, str) and given:
        return given
    if given is False:
        return None
    try:
        from huggingface_hub import get_token
    except ImportError:
        pass
    else:
        return get_token()
    named = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if named:
        return named.strip()
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    saved = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    try:
        with open(saved, encoding="utf-8") as file:
            return file.read(4096).strip() or None
    except OSError:
        return None


# (resolve URL, a digest of the credentials it was asked with) -> (where it redirected, until when: monotonic); the
# digest keeps one context's redirect from serving another's credentials (never the token itself)
RESOLVED: dict[tuple[str, str], tuple[str, float]] = {}
_resolved_lock = ForkSafeLock()


def _expires(location: str) -> float:
    """Seconds from now until the signed URL ``location`` expires (what it says, else :data:`_KEEP`)."""
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    now = time.time()
    try:
        if "Expires" in query:
            return float(query["Expires"]) - now
        if "X-Amz-Expires" in query and "X-Amz-Date" in query:
            signed = time.mktime(time.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ")) - time.timezone
            return signed + float(query["X-Amz-Expires"]) - now
    except (ValueError, OverflowError):
        pass
    return _KEEP


class HfSource(HttpSource):
    """An ``hf://`` shard: its resolve URL read as an HTTP(S) object, its redirect kept for the process."""

    def __init__(self, url: str, headers: dict[str, str], retry: RetryPolicy, context: Any) -> None:
        super().__init__(url, headers, retry=retry, context=context)
        asked = "\0".join(f"{k.lower()}:{v}" for k, v in sorted(self.headers.items()))
        self.key = (url, hashlib.sha256(asked.encode()).hexdigest()[:16])
        self.resolving = ForkSafeLock()  # ranges asked for at once wait for one resolution, not one each
        self.resolved = False
        with _resolved_lock:
            kept = RESOLVED.get(self.key)
        if kept is not None and kept[1] - _MARGIN > time.monotonic():
            self.location, self.resolved = kept[0], True

    def _follow(self, method: str, extra: dict[str, str], wanted: int, pace: Any, start: int) -> Any:
        if not self.resolved:
            with self.resolving:
                if not self.resolved:
                    self._resolve(pace)
        answer = super()._follow(method, extra, wanted, pace, start)
        if self.location != self.url:
            with _resolved_lock:
                if RESOLVED.get(self.key, ("",))[0] != self.location:
                    RESOLVED[self.key] = (self.location, time.monotonic() + _expires(self.location))
        else:
            with _resolved_lock:
                RESOLVED.pop(self.key, None)
        return answer

    def _resolve(self, pace: Any) -> None:
        """Ask the Hub where the file is (a ``HEAD`` of its resolve URL, the redirect not followed); the read that
        follows keeps it in :data:`RESOLVED` (:meth:`_follow`)."""
        status, _, _, moved = self._once("HEAD", self.url, {}, 0, pace, 0)
        # a file the Hub serves itself (a small one) is read from the resolve URL
        self.location = self.url if moved is None else redirected(self.url, moved, status)
        self.resolved = True


class HfBackend(RangedBackend):
    """``hf://`` URLs (see the module doc); written through fsspec's ``hf`` filesystem (huggingface_hub's)."""

    name = "a Hugging Face Hub file"

    def source(self, url: str, options: dict[str, Any], retry: RetryPolicy, stats: Any = None) -> HfSource:
        where = parse_hf(url)
        options = dict(options)
        endpoint, token = hf_endpoint(options), hf_token(options)
        options.pop("endpoint", None), options.pop("token", None)
        resolve = where.resolve_url(endpoint)
        headers, context = http_settings(resolve, options)
        if token and not any(name.lower() == "authorization" for name in headers):
            headers["Authorization"] = f"Bearer {token}"
        return HfSource(resolve, headers, retry, context)

    def direct(self, url: str, options: dict[str, Any], retry: RetryPolicy) -> HfSource:
        return self.source(url, options, retry)


HF = HfBackend()


def expand_hf(url: str, options: dict[str, Any] | None = None, retry: RetryPolicy = DEFAULT_RETRY) -> list[str]:
    """The ``hf://`` URLs a glob names, listed once through huggingface_hub, sorted; a URL without one as is."""
    where = parse_hf(url)
    if not _glob.has_magic(where.path):
        return [url]
    try:
        from huggingface_hub import HfApi
    except ImportError:
        raise SpecError(
            f"listing {url!r} (a glob over the Hub) needs huggingface_hub: pip install huggingface_hub "
            "(or name the shards with a brace range, which needs no listing)"
        ) from None
    fixed = []
    for part in where.path.split("/"):
        if _glob.has_magic(part):
            break
        fixed.append(part)
    folder = "/".join(fixed)
    api = HfApi(endpoint=hf_endpoint(options), token=hf_token(options) or False)

    def listing(left: float | None) -> list[str]:
        entries: Any
        if where.kind == "bucket":
            entries = api.list_bucket_tree(where.repo, prefix=folder or None, recursive=True)
        else:
            entries = api.list_repo_tree(
                where.repo, folder or None, recursive=True, revision=where.revision, repo_type=where.kind
            )
        return [entry.path for entry in entries if type(entry).__name__ in ("RepoFile", "BucketFile")]

    paths = with_retries("list the repository", listing, where.url(folder or "."), None, retry)
    found = sorted(path for path in paths if fnmatch.fnmatchcase(path, where.path))
    if not found:
        raise SpecError(f"no file of {where.url(folder or '.')} matches {url!r}")
    origin = where.url(folder or ".")
    return [DataURL(where.url(path), origin) for path in found]  # names from a listing: never expanded again
