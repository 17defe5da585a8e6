"""wids v1 dataset descriptors: read (local or any URL the storage layer opens), resolved, and written.

A descriptor is JSON::

    {"wids_version": 1, "name": "...", "info": "...", "base": "optional/prefix/",
     "shardlist": [{"url": "shard-000.tar", "nsamples": 1000, "filesize": 123, "md5sum": "..."}],
     "datasets": [{"source_url": "other.json", "weight": 2.0},
                  {"name": "part", "base": "s3://bucket/part/", "shardlist": [...], "weight": 1.0}]}

Relative shard URLs are resolved against the descriptor's ``base`` when it
has one (itself resolved against the descriptor's location) and against the
descriptor's own folder otherwise; a nested dataset uses its own ``base``, or
the folder of its ``source_url``.  Each resolved shard is a dict with ``url``,
``nsamples`` (``None`` when not given) and whatever else the entry had
(``filesize``, ``md5sum``), plus ``weight`` and ``dataset`` from its component.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import SpecError
from ..io import files
from ..io.commands import refuse_command
from ..io.storage import Storage, storage_argument
from ..io.urls import folder_of, join_url, url_joiner

__all__ = ["load_descriptor", "resolve_descriptor", "write_descriptor"]


def _asfolder_of(base: str) -> str:
    return base if base.endswith(("/", os.sep)) else base + "/"


def _shards(body: dict[str, Any], folder: str | None, where: str, allow_pipe: bool) -> list[dict[str, Any]]:
    base = body.get("base")
    if base is not None:
        if not isinstance(base, str):
            raise SpecError(f"{where}: base is a URL or folder, got {type(base).__name__}")
        folder = _asfolder_of(join_url(folder, base))
    shards = []
    join = url_joiner(folder)
    listed = body.get("shardlist", [])
    if not isinstance(listed, list):
        raise SpecError(f"{where}: shardlist is a list of shard entries, got {type(listed).__name__}")
    for entry in listed:
        if not isinstance(entry, dict) or "url" not in entry:
            raise SpecError(f"{where}: every shardlist entry needs a url, got {entry!r}")
        shard = dict(entry)
        shard["url"] = refuse_command(join(str(entry["url"])), where, allow_pipe)  # a base may make a command
        nsamples = shard.get("nsamples")
        shard["nsamples"] = None if nsamples is None else int(nsamples)
        shards.append(shard)
    return shards


def resolve_descriptor(
    body: dict[str, Any], location: str | None = None, storage: Storage | None = None, allow_pipe: bool = False
) -> dict[str, Any]:
    """A descriptor with every shard URL resolved and nested datasets flattened into ``shardlist``; the
    descriptors it references are read through ``storage``.  A descriptor is data: a shard URL that is a
    ``pipe:`` command (as written, or made by its ``base``) is refused unless ``allow_pipe``."""
    where = location or "dataset descriptor"
    if not isinstance(body, dict):
        raise SpecError(f"{where}: a descriptor is a JSON object, got {type(body).__name__}")
    if body.get("wids_version", 1) != 1:
        raise SpecError(f"{where}: unknown wids_version {body.get('wids_version')!r} (this reads version 1)")
    folder = folder_of(location) if location else None
    shards = _shards(body, folder, where, allow_pipe)
    for shard in shards:
        shard.setdefault("weight", body.get("weight"))
        shard.setdefault("dataset", body.get("name"))
    components = body.get("datasets", [])
    if not isinstance(components, list) or not all(isinstance(c, dict) for c in components):
        raise SpecError(f"{where}: datasets is a list of mappings")
    for component in components:
        weight = component.get("weight")
        source, sub_folder = component.get("source_url"), folder
        if source is not None:
            source = refuse_command(join_url(folder, str(source)), where, allow_pipe)
            component = json.loads((storage or Storage()).read_bytes(source))
            if "source_url" in component:
                raise SpecError(f"{source}: a referenced descriptor may not reference another one")
            sub_folder = folder_of(source)
        part = _shards(component, sub_folder, source or where, allow_pipe)
        for shard in part:
            shard["weight"], shard["dataset"] = weight, component.get("name")
        shards.extend(part)
    if not shards:
        raise SpecError(f"{where}: the descriptor lists no shards")
    resolved = {k: v for k, v in body.items() if k not in ("shardlist", "datasets", "base")}
    resolved["shardlist"] = shards
    return resolved


def load_descriptor(
    source: Any, storage: Storage | dict | None = None, allow_pipe: bool = False, *,
    storage_options: Storage | dict | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Read (when ``source`` is a path, URL or open file) and resolve a wids v1 descriptor.

    ``storage``: a :class:`~wds_core.io.storage.Storage`, or the explicit options of one; ``allow_pipe``:
    accept ``pipe:`` shard URLs in it (:func:`resolve_descriptor`).

    Relative shard URLs of a descriptor read from an open file resolve against
    the file's folder when it has a ``name`` that is a path, else against the
    current directory.
    """
    storage = Storage.of(storage_argument("load_descriptor", storage, storage_options))
    if isinstance(source, dict):
        return resolve_descriptor(source, None, storage, allow_pipe)
    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        where = name if isinstance(name, str) and files.isfile(name) else None
        try:
            body = json.loads(source.read())
        except ValueError as exn:
            raise SpecError(f"{name or 'the stream'}: not a JSON dataset descriptor: {exn}") from None
        return resolve_descriptor(body, where, storage, allow_pipe)
    try:
        body = json.loads(storage.read_bytes(source))
    except (OSError, ValueError) as exn:
        raise SpecError(f"{source}: cannot read the dataset descriptor: {exn}") from None
    return resolve_descriptor(body, source, storage, allow_pipe)


def write_descriptor(
    path: str, shards: list[dict[str, Any]], name: str = "", base: str | None = None, info: str | None = None
) -> None:
    """Write a wids v1 dataset descriptor listing ``shards`` to the local file ``path``.

    Local shard URLs are written relative to the descriptor's folder (when they are inside it).
    """
    folder = os.path.dirname(os.path.abspath(path))
    entries = []
    for shard in shards:
        entry = dict(shard)
        url = entry["url"]
        if "://" not in url and not url.startswith("pipe:"):
            relative = os.path.relpath(os.path.abspath(url), folder)
            entry["url"] = url if relative.startswith("..") else relative
        entries.append(entry)
    body: dict[str, Any] = {"wids_version": 1, "name": name}
    if base is not None:
        body["base"] = base
    if info is not None:
        body["info"] = info
    body["shardlist"] = entries
    files.write_atomic(path, json.dumps(body, indent=1))
