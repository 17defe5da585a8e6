"""webdataset's key rules: which sample, and which field of it, a tar member's name stands for.

A member ``dir/abc.seg.JPG`` belongs to the sample with key ``dir/abc`` (the path up to the first dot of the
basename) under the field ``seg.JPG`` (the rest; readers lower-case it); top-level ``__*__`` members are
metadata.  The tar readers and indexer name members by these rules, and :mod:`wds_core.tar.grouping` groups
members into samples by them.
"""

from __future__ import annotations

import re

__all__ = ["is_meta", "split_key"]

_KEY_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_META_RE = re.compile(r"__[^/]*__($|/)")


def split_key(name: str) -> tuple[str, str] | tuple[None, None]:
    """``(key, field)`` of a member name, or ``(None, None)`` when it has none.

    >>> split_key("dir.v2/abc.seg.JPG")
    ('dir.v2/abc', 'seg.JPG')
    """
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot > slash + 1 and "\n" not in name:
        return name[:dot], name[dot + 1 :]
    match = _KEY_RE.match(name)
    if match is None:
        return None, None
    return match.group(1), match.group(2)


def is_meta(name: str) -> bool:
    """Top-level ``__name__`` members (and anything under a ``__dir__/``) are metadata."""
    return name.startswith("__") and _META_RE.match(name) is not None
