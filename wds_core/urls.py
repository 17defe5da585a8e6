"""Shard specs: brace expansion, lists of URLs and ``::``-joined specs."""

from __future__ import annotations

import os
from collections.abc import Iterable

import braceexpand

from .errors import EmptyDatasetError, SpecError

__all__ = ["expand_urls"]


def expand_urls(spec: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """Expand a shard spec into the list of shard URLs it names.

    ``spec`` is a string with ``{000..009}`` / ``{a,b}`` braces, several such
    strings joined by ``::``, or a list of them (each element is expanded too).

    >>> expand_urls("data-{00..02}.tar::extra.tar")
    ['data-00.tar', 'data-01.tar', 'data-02.tar', 'extra.tar']
    """
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if isinstance(spec, str):
        parts: Iterable[str | os.PathLike] = spec.split("::")
    elif isinstance(spec, Iterable) and not isinstance(spec, (bytes, dict)):
        parts = spec
    else:
        raise SpecError(f"a shard spec must be a string or a list of strings, got {type(spec).__name__}")
    urls: list[str] = []
    for part in parts:
        if isinstance(part, os.PathLike):
            part = os.fspath(part)
        if not isinstance(part, str):
            raise SpecError(f"shard URLs must be strings, got {type(part).__name__}: {part!r}")
        if part == "":
            continue
        urls.extend(braceexpand.braceexpand(part))
    if not urls:
        raise EmptyDatasetError(f"the shard spec {spec!r} expands to no URL")
    return urls
