"""Which storage options and URL rewrites apply to a URL.

Options for fsspec backends (``endpoint_url``, ``key``/``secret``/``token``,
``profile``, ``anon``, ``client_kwargs``...) come from four places; for each
URL the **longest matching prefix** of each place is taken, and the places are
merged with this precedence (later wins)::

    the backend's own environment  <  WDS_CONFIG file  <  register_storage()  <  storage_options=

``storage_options=`` is either one flat dict (for every remote URL of the
pipeline) or a dict keyed by URL prefixes (``{"s3://a/": {...}, "s3://b/":
{...}}``).  Nested dicts such as ``client_kwargs`` are merged one level deep.

The configuration file (:mod:`wds_core.io.config`) is named by ``WDS_CONFIG`` (default
``$XDG_CONFIG_HOME/wds/config.yaml``, i.e. ``~/.config/wds/config.yaml``); it
is read when a URL is first resolved and re-read when it changes::

    storage:
      - prefix: s3://team-a-bucket/
        options: {endpoint_url: "https://minio.internal:9000", key: "...", secret: "..."}
    rewrite:
      - prefix: gs://bucket/
        replacement: /mnt/mirror/bucket/

URL rewrites map a URL prefix onto another before anything is opened, e.g. a
bucket onto a local mirror: ``register_rewrite()``, the file's ``rewrite:``
list, and ``WDS_REWRITE`` / webdataset's ``GOPEN_REWRITE``
(``"pattern=replacement;..."``: regular expressions matched at the start of
the URL, as in webdataset; the first match wins).  Rewrites to ``pipe:``
commands that come from the environment or the file are refused unless
``WDS_ALLOW_PIPE=1``.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..errors import SpecError, is_secret_name, redact, redact_url
from .config import check_prefix, config_file, config_path
from .forklocks import ForkSafeLock
from .provenance import same_origin
from .shelltemplate import command_template

__all__ = [
    "StorageOptions",
    "options_for",
    "options_over",
    "register_rewrite",
    "register_storage",
    "rewrite_url",
    "unregister_rewrite",
    "unregister_storage",
]

_lock = ForkSafeLock()
_registered: dict[str, dict[str, Any]] = {}
_rewrites: dict[str, str] = {}


def redact_options(options: Any) -> Any:
    """A copy of ``options`` fit for messages: values of secret-looking keys replaced by ``***``."""
    if isinstance(options, dict):
        return {k: "***" if is_secret_name(str(k)) and v is not None else redact_options(v) for k, v in options.items()}
    if isinstance(options, (list, tuple)):
        return type(options)(redact_options(v) for v in options)
    if isinstance(options, str):
        return redact(options)  # an endpoint URL with user info, a header's value...
    return options


class StorageOptions(dict):
    """A dict of storage options whose ``repr`` hides credentials."""

    def __repr__(self) -> str:
        return f"StorageOptions({redact_options(dict(self))!r})"

    __str__ = __repr__


def register_storage(prefix: str, **options: Any) -> None:
    """Use ``options`` for every URL that starts with ``prefix`` (the longest registered prefix wins).

    Registering a prefix again replaces its options.  Registered options live in
    this process; worker processes started with ``spawn`` receive them with the
    pipeline (they are part of the reading stage's pickled state).
    """
    with _lock:
        _registered[check_prefix(prefix)] = dict(options)


def unregister_storage(prefix: str | None = None) -> None:
    """Forget the options registered for ``prefix``, or all of them."""
    _forget(_registered, prefix)


def register_rewrite(prefix: str, replacement: str) -> None:
    """Rewrite URLs starting with ``prefix`` to start with ``replacement`` instead."""
    with _lock:
        _rewrites[check_prefix(prefix)] = str(replacement)


def unregister_rewrite(prefix: str | None = None) -> None:
    """Forget the rewrite for ``prefix``, or all registered rewrites."""
    _forget(_rewrites, prefix)


def _forget(table: dict[str, Any], prefix: str | None) -> None:
    with _lock:
        if prefix is None:
            table.clear()
        else:
            table.pop(prefix, None)


def registered() -> dict[str, Any]:
    """The registered options and rewrites, to carry into worker processes."""
    with _lock:
        return {"storage": {k: dict(v) for k, v in _registered.items()}, "rewrite": dict(_rewrites)}


def _env_rewrites() -> list[tuple[str, re.Pattern, str]]:
    rules = []
    for name in ("WDS_REWRITE", "GOPEN_REWRITE"):
        text = os.environ.get(name, "")
        for rule in filter(None, (part.strip() for part in text.split(";"))):
            if "=" not in rule:
                raise SpecError(f"{name}: each rule is pattern=replacement, got {rule!r}")
            pattern, replacement = rule.split("=", 1)
            try:
                rules.append((name, re.compile(pattern), replacement))
            except re.error as exn:
                raise SpecError(f"{name}: {pattern!r} is not a valid regular expression ({exn})") from None
    return rules


def pipes_allowed() -> bool:
    """Whether ``WDS_ALLOW_PIPE`` allows shell commands that come from the environment or a file."""
    return os.environ.get("WDS_ALLOW_PIPE", "").lower() in ("1", "true", "yes")


def _checked(url: str, source: str) -> str:
    if url.startswith("pipe:") and not pipes_allowed():
        raise SpecError(
            f"{source} rewrites a URL to a shell command ({redact_url(url)}); "
            "set WDS_ALLOW_PIPE=1 to allow commands from the environment or configuration files"
        )
    return url


def rewrite_url(url: str, carried: dict[str, Any] | None = None) -> str:
    """``url`` after the first matching rewrite: environment rules, then registered, then the config file.

    Environment rules are regular expressions matched at the start of the URL,
    as in webdataset; registered and configured rules are literal prefixes.  A
    rewrite to ``pipe:`` from the environment or the file needs ``WDS_ALLOW_PIPE=1``.
    ``carried`` is a :func:`registered` snapshot from the process that made the
    pipeline: its rewrites count as registered here (those of this process win).

    What a rewrite makes of a URL from data keeps its origin (:mod:`.provenance`): a rule that passes the URL's text
    on (``mirror://(.*)=\\1``) cannot turn ``mirror://pipe:CMD`` from a spec file into a command that runs.  A rule
    to a ``pipe:`` command makes the parts of the URL it substitutes the command's arguments, never shell text
    (:mod:`.shelltemplate`).
    """
    if not isinstance(url, str):
        return url
    for name, pattern, replacement in _env_rewrites():
        match = pattern.match(url)
        if match:
            return _checked(_rewritten(url, replacement, match, url[match.end() :]), name)
    with _lock:
        rules = {**((carried or {}).get("rewrite") or {}), **_rewrites}
    prefix = _longest(rules, url)
    if prefix is not None:
        return _rewritten(url, rules[prefix], None, url[len(prefix) :])
    table = config_file()["rewrite"]
    prefix = _longest(table, url)
    if prefix is not None:
        return _checked(_rewritten(url, table[prefix], None, url[len(prefix) :]), config_path())
    return url


def _rewritten(url: str, replacement: str, match: re.Match[str] | None, rest: str) -> str:
    """``url`` rewritten by a rule: ``replacement`` (a regular expression's template when ``match`` is given, else a
    prefix) followed by ``rest``; a command of the rule's own (:func:`~.shelltemplate.command_template`), or text that
    keeps ``url``'s origin."""
    if replacement.startswith("pipe:"):
        return command_template(replacement, match, rest)
    return same_origin(url, (match.expand(replacement) if match is not None else replacement) + rest)


def _longest(table: dict[str, Any], url: str) -> str | None:
    best = None
    for prefix in table:
        if url.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def _is_prefix_table(options: dict[str, Any]) -> bool:
    return bool(options) and all(isinstance(k, str) and "://" in k for k in options)


def options_over(caller: dict[str, Any] | None, options: dict[str, Any] | None, urls: list[str]) -> dict | None:
    """``options`` for the URLs ``urls`` over the ``caller``'s (flat, or keyed by URL prefix).

    A dataset-spec source's own ``storage_options`` apply to its shards only.
    """
    if options is None:
        return caller
    if caller is None or not _is_prefix_table(caller):
        return {**(caller or {}), **options}
    return {**caller, **{url: options for url in urls}}


def _merge(into: dict[str, Any], options: dict[str, Any]) -> None:
    for name, value in options.items():
        if isinstance(value, dict) and isinstance(into.get(name), dict):
            into[name] = {**into[name], **value}
        else:
            into[name] = value


def options_for(
    url: str, explicit: dict[str, Any] | None = None, carried: dict[str, Any] | None = None
) -> StorageOptions:
    """The storage options for ``url``: config file, then registered, then ``explicit`` (see the module doc).

    ``carried`` is a :func:`registered` snapshot from the process that made the pipeline: its options count as
    registered here (those of this process win)."""
    merged: dict[str, Any] = {}
    with _lock:
        registered_now = {**((carried or {}).get("storage") or {}), **_registered}
    explicit = explicit or {}
    if _is_prefix_table(explicit):
        prefix = _longest(explicit, url)
        explicit = explicit[prefix] if prefix is not None else {}
    for table in (config_file()["storage"], registered_now):
        prefix = _longest(table, url)
        if prefix is not None:
            _merge(merged, table[prefix])
    _merge(merged, explicit)
    return StorageOptions(merged)
