"""``wids.wids_specs``: wids's dataset descriptions read, rebased and resolved, over wds's storage and bounds.

wids 0.1.x code (and wids's own tests) imports ``from wids import wids_specs`` to load a description
(``load_remote_dsdesc_raw``, the older ``load_remote_spec``), resolve it (``resolve_dsdesc``,
``load_dsdesc_and_resolve``; the older ``extract_shardlist`` and ``load_remote_shardlist``) and merge URLs
(``urlmerge``, ``urldir``).  The shapes are wids's (lists of ``{"url", "nsamples", ...}`` dicts, the same keys
set); what differs on purpose: a description is read through wds's storage layer (any URL it reads, with its
storage options, retries and secure mode) and at most :data:`MAX_DESCRIPTION_BYTES`; a malformed one is a
:class:`DescriptionError`, which is an ``AssertionError`` too (wids ``assert``\\ s); a shard URL that is a ``pipe:``
command is refused unless ``allow_pipe=True`` (a description is data); nested descriptions are followed at most
:data:`MAX_INDIRECTION` deep.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
from typing import Any
from urllib.parse import urlparse, urlunparse

from ..errors import SpecError
from ..io.commands import refuse_command
from ..io.storage import Storage

__all__ = [
    "MAX_DESCRIPTION_BYTES",
    "MAX_INDIRECTION",
    "DescriptionError",
    "check_shards",
    "extract_shardlist",
    "load_dsdesc_and_resolve",
    "load_remote_dsdesc_raw",
    "load_remote_shardlist",
    "load_remote_spec",
    "rebase_shardlist",
    "resolve_dsdesc",
    "set_all",
    "urldir",
    "urlmerge",
]

MAX_DESCRIPTION_BYTES = 256 << 20  # a description of a few million shards; what is past it is not read
MAX_INDIRECTION = 10  # source_url followed at most this deep (wids 0.1.x's extract_shardlist: 10)


class DescriptionError(SpecError, AssertionError):
    """A dataset description wids would reject with an ``assert``: a :class:`SpecError` that is an
    ``AssertionError`` too, for code that catches what wids raises."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise DescriptionError(message)


def urldir(url: str) -> str:
    """The folder part of ``url`` (``s3://b/d/x.json`` -> ``s3://b/d``)."""
    parsed = urlparse(url)
    return parsed._replace(path=os.path.dirname(parsed.path)).geturl()


def urlmerge(base: str, url: str) -> str:
    """``url`` resolved against ``base``: missing scheme and host from ``base``, its path joined to ``base``'s (an
    absolute one kept), its params, query and fragment its own."""
    parsed_base, parsed = urlparse(base), urlparse(url)
    path = parsed.path
    if not path.startswith("/"):
        path = posixpath.normpath(posixpath.join(parsed_base.path, path))
    parts = (parsed.scheme or parsed_base.scheme, parsed.netloc or parsed_base.netloc, path, parsed.params,
             parsed.query, parsed.fragment)  # fmt: skip
    return urlunparse(parts)


def check_shards(shards: Any) -> list[dict[str, Any]]:
    """``shards`` when it is a list of dicts each with a ``url`` and ``nsamples``."""
    _require(isinstance(shards, list), f"a shard list is a list, got {type(shards).__name__}")
    for shard in shards:
        _require(isinstance(shard, dict), f"a shard entry is a mapping, got {shard!r}")
        _require("url" in shard and "nsamples" in shard, f"a shard entry needs url and nsamples, got {shard!r}")
    return shards  # type: ignore[no-any-return]


def set_all(shards: list[dict[str, Any]], key: str, value: Any) -> None:
    """Give every entry of ``shards`` that lacks ``key`` the ``value`` (nothing when ``value`` is ``None``)."""
    if value is None:
        return
    for shard in shards:
        shard.setdefault(key, value)


def load_remote_dsdesc_raw(source: Any) -> dict[str, Any]:
    """The description at ``source`` (a path or any URL wds reads, with the storage options registered or
    configured for it, or an open file) as parsed JSON."""
    if isinstance(source, (io.IOBase, io.TextIOBase)) or hasattr(source, "read"):
        text = _read_at_most(source, MAX_DESCRIPTION_BYTES + 1)
        where = getattr(source, "name", "the stream")
    else:
        where = os.fspath(source)
        with Storage().open(where) as stream:
            text = _read_at_most(stream, MAX_DESCRIPTION_BYTES + 1)
    if len(text) > MAX_DESCRIPTION_BYTES:
        raise DescriptionError(f"{where}: a dataset description over {MAX_DESCRIPTION_BYTES:,} bytes")
    try:
        body = json.loads(text)
    except ValueError as exn:
        raise DescriptionError(f"{where}: not a JSON dataset description: {exn}") from None
    _require(isinstance(body, dict), f"{where}: a dataset description is a JSON object, got {type(body).__name__}")
    return body  # type: ignore[no-any-return]


load_remote_spec = load_remote_dsdesc_raw  # wids 0.1.x's earlier name


def _read_at_most(stream: Any, limit: int) -> Any:
    """What ``stream`` gives up to ``limit`` characters or bytes (a read may give fewer than asked before its end)."""
    parts, got = [], 0
    while got < limit:
        part = stream.read(limit - got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return parts[0][:0].join(parts) if parts else b""


def rebase_shardlist(shards: list[dict[str, Any]], base: str | None, allow_pipe: bool = False) -> list[dict[str, Any]]:
    """Each entry's ``url`` resolved against ``base`` (in place; nothing without a base)."""
    for shard in shards:
        url = str(shard["url"]) if base is None else urlmerge(base, str(shard["url"]))
        shard["url"] = refuse_command(url, "a dataset description", allow_pipe)  # data: never a command of its own
    return shards


def resolve_dsdesc(
    dsdesc: dict[str, Any],
    *,
    options: dict[str, Any] | None = None,
    base: str | None = None,
    allow_pipe: bool = False,
) -> dict[str, Any]:
    """wids's resolution of a description: ``options`` laid over it, its ``shardlist`` rebased on ``base``, each
    entry given the description's ``weight`` and ``name``, then each nested dataset's shards (read from its
    ``source_url`` when it has one, rebased on its ``base`` or the folder of its ``source_url``) added with the
    reference's ``weight``, its ``source_url`` and its ``name`` as ``dataset``."""
    _require(isinstance(dsdesc, dict), f"a dataset description is a mapping, got {type(dsdesc).__name__}")
    dsdesc = dict(dsdesc, **(options or {}))
    _require("wids_version" in dsdesc, "No wids_version in dataset description")
    _require(dsdesc["wids_version"] == 1, f"Unknown wids_version {dsdesc['wids_version']!r}")
    shardlist = rebase_shardlist(check_shards([dict(s) for s in dsdesc.get("shardlist", [])]), base, allow_pipe)
    set_all(shardlist, "weight", dsdesc.get("weight"))
    set_all(shardlist, "name", dsdesc.get("name"))
    for component in dsdesc.get("datasets", []):
        _require(isinstance(component, dict), f"a nested dataset is a mapping, got {component!r}")
        weight, source_url = component.get("weight"), component.get("source_url")
        if source_url is not None:
            source_url = refuse_command(str(source_url), "a dataset description", allow_pipe)
            component = load_remote_dsdesc_raw(source_url)
        _require("source_url" not in component, "double indirection in dataset description")
        _require("shardlist" in component, "no shardlist in dataset description")
        sub_base = component.get("base", urldir(source_url) if source_url else None)
        shards = rebase_shardlist(check_shards([dict(s) for s in component["shardlist"]]), sub_base, allow_pipe)
        set_all(shards, "weight", weight)
        set_all(shards, "source_url", source_url)
        set_all(shards, "dataset", component.get("name"))
        shardlist.extend(shards)
    _require(len(shardlist) > 0, "No shards found")
    dsdesc["shardlist"] = shardlist
    return dsdesc


def load_dsdesc_and_resolve(
    source: Any, *, options: dict[str, Any] | None = None, base: str | None = None, allow_pipe: bool = False
) -> dict[str, Any]:
    """:func:`load_remote_dsdesc_raw` then :func:`resolve_dsdesc`."""
    return resolve_dsdesc(load_remote_dsdesc_raw(source), options=options, base=base, allow_pipe=allow_pipe)


def extract_shardlist(dsdesc: dict[str, Any]) -> list[dict[str, Any]]:
    """wids 0.1.x's earlier resolution: the description's shards with its ``weight``, then each nested dataset's
    (``source_url`` followed, at most :data:`MAX_INDIRECTION` deep) with its own ``weight``; no rebasing."""
    _require(isinstance(dsdesc, dict), f"a dataset description is a mapping, got {type(dsdesc).__name__}")
    shardlist = rebase_shardlist(check_shards([dict(s) for s in dsdesc.get("shardlist", [])]), None)
    set_all(shardlist, "weight", dsdesc.get("weight"))
    _require("wids_version" in dsdesc, "No wids_version in dataset description")
    _require(dsdesc["wids_version"] == 1, f"Unknown wids_version {dsdesc['wids_version']!r}")
    for component in dsdesc.get("datasets", []):
        for _ in range(MAX_INDIRECTION):
            if not isinstance(component, dict) or "source_url" not in component:
                break
            url = refuse_command(str(component["source_url"]), "a dataset description")
            component = load_remote_dsdesc_raw(url)
        else:
            raise DescriptionError(f"more than {MAX_INDIRECTION} levels of source_url in the dataset description")
        if isinstance(component, dict) and "shardlist" in component:
            shards = rebase_shardlist(check_shards([dict(s) for s in component["shardlist"]]), None)
            set_all(shards, "weight", component.get("weight"))
            shardlist.extend(shards)
    _require(len(shardlist) > 0, "No shards found")
    return shardlist


def load_remote_shardlist(
    source: Any, *, options: dict[str, Any] | None = None, base: Any = None
) -> list[dict[str, Any]]:
    """wids 0.1.x's: the shards of the description at ``source``, rebased on ``base`` (``None``: the folder of a
    ``source`` given as a URL or path; ``True``: the description's own ``base``)."""
    spec = dict(load_remote_dsdesc_raw(source), **(options or {}))
    shardlist = extract_shardlist(spec)
    if base is None and isinstance(source, str):
        base = urldir(source)
    elif base is True:
        base = spec.get("base")
    return rebase_shardlist(shardlist, base if isinstance(base, str) else None)
