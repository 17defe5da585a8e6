"""Storage backends: one per kind of URL, behind one protocol (:class:`~.base.Backend`), found by the URL's scheme.

:func:`route` reads a URL once and says whose it is; secure mode checks the URL as that reading has it, and the
storage context (:class:`~wds_core.io.storage.Storage`) hands it to that backend.  In order:

* a scheme given an opener (``register_opener``, webdataset's ``gopen_schemes[scheme] = f``; ``"__default__"``
  stands for every ``scheme://`` URL without one of its own): :mod:`.opener`;
* ``-``: standard input and output, and local paths and ``file://`` URLs: :mod:`.local`;
* ``pipe:COMMAND``: :mod:`.pipe`;
* a scheme given a backend with :func:`register_backend`;
* ``http``/``https``: :mod:`.http`; ``s3``/``s3a``: :mod:`.s3`; ``hf``: :mod:`.hf` (the Hugging Face Hub); all
  three read straight from the I/O pool's threads;
* any other scheme: every filesystem fsspec knows, read by ranges through the remote engine
  (:mod:`.ranged`, :mod:`.fsspec`).

The registrations are kept in one table by scheme (:mod:`wds_core.io.registry`).  The built-in backends come
with the package: imported at a URL's first use instead, they put about 7 ms into the first sample of every
process, each forked DataLoader worker's too (``python benchmarks/bench_store.py --rows objectstore``: 0.061 ->
0.068 s).  What they stand on is imported at first use: fsspec's filesystems (a missing one named with its
install command) and botocore.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..localfiles import local_path
from ..registry import OPENERS, register_opener, registered_backend, registered_scheme, scheme_opener, set_backend
from .base import Backend, Settings
from .hf import HF
from .http import HTTP
from .local import LOCAL, STDIO
from .opener import OpenerBackend
from .pipe import PIPE
from .ranged import FSSPEC
from .s3 import S3

__all__ = [
    "OPENERS",
    "Backend",
    "Route",
    "Settings",
    "backend_for",
    "register_backend",
    "register_opener",
    "route",
    "scheme_of",
    "scheme_opener",
]

# The built-in backends by scheme; any scheme not here is fsspec's.
_BUILT_IN: dict[str, Backend] = {
    "file": LOCAL,
    "-": STDIO,
    "pipe": PIPE,
    "http": HTTP,
    "https": HTTP,
    "s3": S3,
    "s3a": S3,
    "hf": HF,
}


@dataclass(frozen=True)
class Route:
    """Whose a URL is: its ``scheme`` (the registry's key, :func:`scheme_of`), the scheme of the registered opener
    that opens it (``opener``, else ``None``) and its ``backend``."""

    scheme: str
    opener: str | None
    backend: Backend


def scheme_of(url: str) -> str:
    """The registry's key for ``url``: ``"-"``, ``"pipe"``, ``"file"`` (local paths too) or the URL's scheme."""
    if url == "-":
        return "-"
    if url.startswith("pipe:"):
        return "pipe"
    if local_path(url) is not None:
        return "file"
    return url.split("://", 1)[0]


def route(url: str) -> Route:
    """Whose ``url`` is (after rewrites): a registered opener's, a registered backend's, else a built-in one's."""
    opener = registered_scheme(url)
    scheme = scheme_of(url)
    if opener is not None:
        return Route(scheme, opener, OpenerBackend(OPENERS[opener]))
    return Route(scheme, None, registered_backend(scheme) or _BUILT_IN.get(scheme, FSSPEC))


def backend_for(url: str) -> Backend:
    """The backend that reads and writes ``url`` (after rewrites): see :func:`route`."""
    return route(url).backend


def register_backend(scheme: str, backend: Backend | None) -> None:
    """Read and write every URL of ``scheme`` (``"s3"`` for ``s3://...``) with ``backend``; ``None`` removes it.

    Registered per process, like :func:`~wds_core.io.registry.register_opener` (which wins over a backend for its
    scheme).
    """
    if backend is None:
        if scheme in ("file", "-", "pipe"):
            raise ValueError(f"the {scheme!r} backend is built in; register another in its place to replace it")
    elif not isinstance(backend, Backend):
        raise TypeError(f"a backend is a wds_core.io.backends.Backend, got {type(backend).__name__}")
    set_backend(scheme, backend)
