"""Shard specs: brace expansion, lists of URLs, ``::``-joined specs and ``${NAME}`` variables.

``${NAME}`` in a spec is replaced by the environment variable ``WDS_NAME`` (as
webdataset does; read when the spec is expanded), repeatedly, so a variable
may itself contain ``${...}``; a missing variable is an error naming it.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Callable, Iterable

import braceexpand

from ..errors import EmptyDatasetError, SpecError, redact
from .provenance import DataURL

__all__ = ["expand_data", "expand_env", "expand_urls", "folder_of", "join_url", "no_urls", "spec_parts"]

_VARIABLE = re.compile(r"\$\{(\w+)\}")
_MAX_NESTING = 10


def _lookup(match: re.Match[str]) -> str:
    name = "WDS_" + match.group(1)
    if name not in os.environ:
        raise SpecError(f"the shard spec uses ${{{match.group(1)}}}, but the environment variable {name} is not set")
    return os.environ[name]


def expand_env(spec: str) -> str:
    """``spec`` with each ``${NAME}`` replaced by the environment variable ``WDS_NAME``.

    >>> os.environ["WDS_ROOT"] = "/data"
    >>> expand_env("${ROOT}/train-{000..009}.tar")
    '/data/train-{000..009}.tar'
    """
    for _ in range(_MAX_NESTING):
        if "${" not in spec:
            return spec
        spec = _VARIABLE.sub(_lookup, spec)
    if _VARIABLE.search(spec):
        raise SpecError(f"the shard spec's ${{...}} variables nest more than {_MAX_NESTING} deep: {spec!r}")
    return spec


def spec_parts(spec: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """The brace patterns a shard spec joins (``::`` parts of a string, or a list's elements), with
    ``${NAME}`` variables expanded and empty parts left out; a spec of another type is a :class:`SpecError`.
    A :class:`~.provenance.DataURL` (a URL read from data, expanded once by its reader) is a part as it is."""
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, DataURL):
        return [spec]
    if isinstance(spec, str):
        given: Iterable[str | os.PathLike] = spec.split("::")
    elif isinstance(spec, Iterable) and not isinstance(spec, (bytes, dict)):
        given = spec
    else:
        raise SpecError(f"a shard spec must be a string or a list of strings, got {type(spec).__name__}")
    parts: list[str] = []
    for part in given:
        if isinstance(part, os.PathLike):
            part = os.fspath(part)
        if not isinstance(part, str):
            raise SpecError(f"shard URLs must be strings, got {type(part).__name__}: {part!r}")
        if isinstance(part, DataURL):  # a URL its reader made whole: taken as it is, never expanded again
            parts.append(part)
        elif part != "":
            part = expand_env(part)
            check_braces(part)
            parts.append(part)
    return parts


# what braceexpand expands: a group with a comma at its top level, or an integer or letter sequence
_SEQUENCE = re.compile(r"-?\d+\.\.-?\d+(?:\.\.-?\d+)?|[a-zA-Z]\.\.[a-zA-Z](?:\.\.-?\d+)?")


def _expands(group: str) -> bool:
    depth, i = 0, 0
    while i < len(group):
        c = group[i]
        if c == "\\":
            i += 2
            continue
        depth += (c == "{") - (c == "}")
        if c == "," and depth == 0:
            return True
        i += 1
    return _SEQUENCE.fullmatch(group) is not None


def check_braces(part: str) -> None:
    """A :class:`SpecError` saying where, when a brace pattern of ``part`` is unbalanced or would not expand
    (braceexpand keeps such a group as it is, and the shard named ``...{000...009}...`` is then "not found");
    a ``pipe:`` command's braces are its own."""
    if part.startswith("pipe:") or ("{" not in part and "}" not in part):
        return
    opened: list[int] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            opened.append(i)
        elif c == "}":
            if not opened:
                raise SpecError(f"the shard spec {redact(part)!r} has a '}}' without its '{{' (at {i})")
            start = opened.pop()
            group = part[start + 1 : i]
            if not _expands(group):
                raise SpecError(
                    f"the brace group {{{group}}} at {start} of the shard spec {redact(part)!r} does not expand: a "
                    "range is written {000..009} (two dots; {0..99..2} with a step), a list {a,b,c}"
                )
        i += 1
    if opened:
        raise SpecError(f"the shard spec {redact(part)!r} has a '{{' (at {opened[-1]}) that is never closed")


def no_urls(spec: object) -> EmptyDatasetError:
    """The error for a shard spec that names no shard."""
    return EmptyDatasetError(f"the shard spec {spec!r} expands to no URL")


def expand_urls(spec: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """Expand a shard spec into the list of shard URLs it names.

    ``spec`` is a string with ``{000..009}`` / ``{a,b}`` braces, several such
    strings joined by ``::``, or a list of them (each element is expanded too).

    >>> expand_urls("data-{00..02}.tar::extra.tar")
    ['data-00.tar', 'data-01.tar', 'data-02.tar', 'extra.tar']
    """
    urls = [url for part in spec_parts(spec) for url in _expanded(part)]
    if not urls:
        raise no_urls(spec)
    return urls


def _expanded(part: str) -> list[str]:
    return [part] if isinstance(part, DataURL) else list(braceexpand.braceexpand(part))


def expand_data(pattern: object, origin: str) -> list[str]:
    """The URLs of a brace pattern read from data (``origin`` names it: a source of a spec file...), as text, its
    ``${NAME}`` variables and braces expanded once; whoever reads the data makes each URL whole and wraps it as a
    :class:`~.provenance.DataURL`, which is never expanded again."""
    if not isinstance(pattern, (str, int, float)) or isinstance(pattern, bool):
        raise SpecError(f"{origin}: a shard pattern is text, got {type(pattern).__name__}: {pattern!r}")
    return [str(url) for url in expand_urls(str(pattern))]


def folder_of(url: str) -> str:
    """The folder of ``url`` (ending in a separator), against which relative URLs in it are resolved."""
    if "://" in url:
        return url.rsplit("/", 1)[0] + "/"
    return os.path.dirname(os.path.abspath(url)) + os.sep


def _plain_relative(url: str) -> bool:
    """Whether ``url`` is a relative name with nothing to normalise: no empty segment, none of dots alone (a loop
    over its segments: the regular expression it replaces backtracked for minutes on a long name from data)."""
    return all(segment.strip(".") for segment in url.split("/"))


def url_joiner(base: str | None) -> Callable[[str], str]:
    """``join_url`` with ``base`` fixed, quicker for the plain relative names of a long shard list."""
    if base is None:
        return lambda url: url
    if os.sep != "/" and "://" not in base:
        return functools.partial(join_url, base)
    prefix = join_url(base, "x")[:-1]

    def join(url: str) -> str:
        if _plain_relative(url) and "://" not in url and not url.startswith("pipe:") and url != "-":
            return prefix + url  # what normalising base/url gives: url has nothing to normalise
        return join_url(base, url)

    return join


def join_url(base: str | None, url: str) -> str:
    """``url`` resolved against the folder URL ``base`` (absolute URLs and paths are kept)."""
    if base is None or "://" in url or url.startswith(("/", "pipe:")) or url == "-":
        return url
    if "://" in base:
        scheme, rest = base.split("://", 1)
        host, _, path = rest.partition("/")
        return f"{scheme}://{host}/{posixpath.normpath(posixpath.join(path, url)).lstrip('/')}"
    return os.path.normpath(os.path.join(base, url))
