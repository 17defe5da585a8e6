"""The configuration file, the one place configuration is read from: ``WDS_CONFIG``, else
``$XDG_CONFIG_HOME/wds/config.yaml``; read when first asked and re-read when it changes.

Its sections: ``storage`` and ``rewrite`` (:mod:`~wds_core.io.storage_config`), ``decode_limits``
(:class:`~wds_core.limits.DecodeLimits`), ``secure``, ``secure_roots`` and ``secure_protocols``
(:mod:`~wds_core.io.secure`).  :func:`configured` gives one of them.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import SpecError
from .forklocks import ForkSafeLock

__all__ = ["check_prefix", "config_exists", "config_file", "config_path", "configured", "parse_config"]

_lock = ForkSafeLock()
_file_cache: dict[str, Any] = {"id": None, "storage": {}, "rewrite": {}}


def check_prefix(prefix: Any) -> str:
    if not isinstance(prefix, str) or not prefix:
        raise SpecError(f"a storage prefix is a non-empty URL prefix such as 's3://bucket/', got {prefix!r}")
    return prefix


def config_path() -> str:
    """The configuration file: ``WDS_CONFIG``, else ``$XDG_CONFIG_HOME/wds/config.yaml``."""
    named = os.environ.get("WDS_CONFIG")
    if named:
        return os.path.expanduser(named)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "wds", "config.yaml")


def config_exists() -> bool:
    """Whether the configuration file (:func:`config_path`) is there: configuration, read wherever it is (secure
    mode's roots are for data)."""
    return os.path.exists(config_path())


def config_file() -> dict[str, Any]:
    path = config_path()
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        if os.environ.get("WDS_CONFIG"):
            raise SpecError(f"WDS_CONFIG names {path!r}, which does not exist") from None
        return {"storage": {}, "rewrite": {}}
    ident = (path, stat.st_mtime_ns, stat.st_size)
    with _lock:
        if _file_cache["id"] == ident:
            return _file_cache
    parsed = parse_config(path)
    with _lock:
        _file_cache.update(parsed, id=ident)
        return _file_cache


def parse_config(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as stream:
        text = stream.read()
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError as exn:
            raise SpecError(f"{path}: not valid JSON ({exn})") from None
    else:
        try:
            import yaml
        except ImportError:
            raise SpecError(f"{path}: reading YAML needs PyYAML: pip install pyyaml (or use a .json file)") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exn:
            raise SpecError(f"{path}: not valid YAML ({exn})") from None
    data = data or {}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping with 'storage' and/or 'rewrite' lists")
    storage, rewrite = {}, {}
    for i, entry in enumerate(data.get("storage") or []):
        if not isinstance(entry, dict) or "prefix" not in entry or not isinstance(entry.get("options", {}), dict):
            raise SpecError(f"{path}: storage entry {i} needs 'prefix' and an 'options' mapping")
        storage[check_prefix(entry["prefix"])] = dict(entry.get("options") or {})
    for i, entry in enumerate(data.get("rewrite") or []):
        if not isinstance(entry, dict) or "prefix" not in entry or "replacement" not in entry:
            raise SpecError(f"{path}: rewrite entry {i} needs 'prefix' and 'replacement'")
        rewrite[check_prefix(entry["prefix"])] = str(entry["replacement"])
    limits = data.get("decode_limits") or {}
    if not isinstance(limits, dict) or not all(isinstance(v, int) and v > 0 for v in limits.values()):
        raise SpecError(f"{path}: decode_limits is a mapping of limit names to positive byte counts")
    secure = data.get("secure", False)
    roots = data.get("secure_roots") or []
    protocols = data.get("secure_protocols") or []
    lists = (roots, protocols)
    if not isinstance(secure, bool) or not all(
        isinstance(x, list) and all(isinstance(r, str) for r in x) for x in lists
    ):
        raise SpecError(f"{path}: secure is true or false, secure_roots a list of folders, secure_protocols of names")
    return {"storage": storage, "rewrite": rewrite, "decode_limits": dict(limits), "secure": secure,
            "secure_roots": roots, "secure_protocols": protocols}  # fmt: skip


def configured(name: str) -> Any:
    """An entry of the configuration file other than storage and rewrites (``decode_limits``), or None."""
    return config_file().get(name)
