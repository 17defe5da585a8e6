"""The one table of what the process registered for a URL scheme, and the one reading of a URL that says whose
it is.

A scheme may be given an opener (``register_opener``; the drop-in's ``gopen_schemes`` is a view of them, and
:data:`OPENERS` is one too) or a backend (:func:`wds_core.io.backends.register_backend`); both are kept here, by
scheme, and an opener wins over a backend of its scheme.  The storage layer picks a URL's backend from this table
(:func:`wds_core.io.backends.route`) and secure mode checks the URL as the same table reads it
(:func:`registered_scheme`), so that the check and the opening cannot take a URL for two things.  This module
imports nothing of wds: the layers that check and open URLs both sit above it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["OPENERS", "register_opener", "registered_backend", "registered_scheme", "scheme_opener", "set_backend"]

# What is registered, by URL scheme: {"opener": f, "backend": b}, either or both.
_TABLE: dict[str, dict[str, Any]] = {}


class _Openers(Mapping[str, Any]):
    """The registered openers by scheme, read-only (register with :func:`register_opener`)."""

    def __getitem__(self, scheme: str) -> Any:
        opener = _TABLE.get(scheme, {}).get("opener")
        if opener is None:
            raise KeyError(scheme)
        return opener

    def __iter__(self) -> Iterator[str]:
        return iter([scheme for scheme, entry in _TABLE.items() if "opener" in entry])

    def __len__(self) -> int:
        return sum("opener" in entry for entry in _TABLE.values())


OPENERS = _Openers()


def _set(scheme: str, kind: str, value: Any) -> None:
    entry = _TABLE.setdefault(scheme, {})
    if value is None:
        entry.pop(kind, None)
    else:
        entry[kind] = value
    if not entry:
        del _TABLE[scheme]


def register_opener(scheme: str, opener: Any) -> None:
    """Open URLs of ``scheme`` (``"s3"`` for ``s3://...``) with ``opener(url, mode, bufsize)``; ``None`` removes it.

    Used by reading and writing alike; registered per process (register it at
    import time in a module the DataLoader workers import too).
    """
    if opener is not None and not callable(opener):
        raise TypeError(f"an opener is a function (url, mode, bufsize) -> stream, got {type(opener).__name__}")
    _set(scheme, "opener", opener)


def set_backend(scheme: str, backend: Any) -> None:
    """Keep ``backend`` for ``scheme`` (``None`` removes it); :func:`wds_core.io.backends.register_backend` checks
    it first."""
    _set(scheme, "backend", backend)


def registered_backend(scheme: str) -> Any:
    """The backend registered for ``scheme``, or ``None``."""
    return _TABLE.get(scheme, {}).get("backend")


def registered_scheme(url: str) -> str | None:
    """The scheme whose registered opener opens ``url``: the text before its first ``:`` when an opener is
    registered for it, with ``//`` after it or not (``mystore:/data/x.tar`` is ``mystore``'s, as webdataset's
    ``gopen`` reads it), else ``"__default__"`` for another ``scheme://`` URL when that is registered, else
    ``None``."""
    if not _TABLE or ":" not in url:
        return None
    scheme = url.split(":", 1)[0]
    if "opener" in _TABLE.get(scheme, {}):
        return scheme
    if "://" in url and not url.startswith("file://") and "opener" in _TABLE.get("__default__", {}):
        return "__default__"
    return None


def scheme_opener(url: str) -> Any:
    """The opener registered for ``url`` (see :func:`registered_scheme`), or ``None``."""
    scheme = registered_scheme(url)
    return None if scheme is None else _TABLE[scheme]["opener"]
