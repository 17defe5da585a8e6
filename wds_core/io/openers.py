"""Openers registered by URL scheme (``register_opener``; the drop-in's ``gopen_schemes`` is a view of them), and
the one reading of a URL that says which of them opens it: the storage layer opens with it, and secure mode
checks it (:func:`registered_scheme`), so that the check and the opening cannot take a URL for two things.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPENERS", "register_opener", "registered_scheme", "scheme_opener"]

# Openers by URL scheme, filled by register_opener.
OPENERS: dict[str, Any] = {}


def register_opener(scheme: str, opener: Any) -> None:
    """Open URLs of ``scheme`` (``"s3"`` for ``s3://...``) with ``opener(url, mode, bufsize)``; ``None`` removes it.

    Used by reading and writing alike; registered per process (register it at
    import time in a module the DataLoader workers import too).
    """
    if opener is None:
        OPENERS.pop(scheme, None)
    elif not callable(opener):
        raise TypeError(f"an opener is a function (url, mode, bufsize) -> stream, got {type(opener).__name__}")
    else:
        OPENERS[scheme] = opener


def registered_scheme(url: str) -> str | None:
    """The scheme whose registered opener opens ``url``: the text before its first ``:`` when an opener is
    registered for it, with ``//`` after it or not (``mystore:/data/x.tar`` is ``mystore``'s, as webdataset's
    ``gopen`` reads it), else ``"__default__"`` for another ``scheme://`` URL when that is registered, else
    ``None``."""
    if not OPENERS or ":" not in url:
        return None
    scheme = url.split(":", 1)[0]
    if scheme in OPENERS:
        return scheme
    if "://" in url and not url.startswith("file://") and "__default__" in OPENERS:
        return "__default__"
    return None


def scheme_opener(url: str) -> Any:
    """The opener registered for ``url`` (see :func:`registered_scheme`), or ``None``."""
    scheme = registered_scheme(url)
    return None if scheme is None else OPENERS[scheme]
