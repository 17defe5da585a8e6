"""Secure mode: for services that read URLs or spec files their users supply.

By default wds trusts its caller: ``pipe:`` runs shell commands, local paths
open any file the process can read, and ``allow_pickle=True`` loads pickles.
Secure mode turns all of that off with one switch:

* the environment: ``WDS_SECURE=1`` (and ``WDS_SECURE_ROOTS``, folders
  separated by ``os.pathsep``);
* the configuration file: ``secure: true`` (and ``secure_roots: [...]``);
* the code: ``wds_core.io.set_secure(True, roots=[...])``, which sets the
  environment variables, so that worker processes inherit the mode.

In secure mode, reading and writing refuse ``pipe:`` commands and ``-``
(standard input/output), local paths and ``file://`` URLs outside the allowed
roots (symbolic links resolved; no root means no local path at all), whatever
a rewrite turned a URL into, and decoders refuse ``allow_pickle=True`` (which
also covers ``.pth`` fields loaded without ``weights_only``).  Every refusal
names what was refused and how to allow it.  Remote URLs (``s3://``,
``gs://``, ``https://``...) are not restricted: their credentials are the
service's own storage options.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..errors import SpecError, redact_url

__all__ = ["check_allowed", "refuse_pickle", "secure_mode", "secure_roots", "set_secure"]

_TRUE = ("1", "true", "yes", "on")
_HOW = "secure mode is on (WDS_SECURE, the config file's secure: true or set_secure())"


def _configured(name: str) -> Any:
    from .storage_config import configured

    return configured(name)


def secure_mode() -> bool:
    """Whether secure mode is on (the environment, then the configuration file)."""
    value = os.environ.get("WDS_SECURE")
    if value is not None and value.strip():
        return value.strip().lower() in _TRUE
    return _configured("secure") is True


def secure_roots() -> list[str]:
    """The folders local paths may be under in secure mode (resolved)."""
    roots = [r for r in os.environ.get("WDS_SECURE_ROOTS", "").split(os.pathsep) if r]
    roots += [str(r) for r in (_configured("secure_roots") or [])]
    return [os.path.realpath(os.path.expanduser(root)) for root in roots]


def set_secure(on: bool = True, roots: Iterable[str | os.PathLike] = ()) -> None:
    """Turn secure mode on (or off) for this process and the worker processes it starts."""
    os.environ["WDS_SECURE"] = "1" if on else "0"
    if roots:
        os.environ["WDS_SECURE_ROOTS"] = os.pathsep.join(os.fspath(root) for root in roots)
    else:
        os.environ.pop("WDS_SECURE_ROOTS", None)


def check_allowed(url: str, action: str = "read") -> None:
    """Refuse ``url`` (after rewrites) when secure mode is on and it is a command, stdio or a local path outside
    the allowed roots."""
    if not isinstance(url, str) or not secure_mode():
        return
    if url.startswith("pipe:"):
        raise SpecError(
            f"refusing to {action} {redact_url(url)}: {_HOW}, and it refuses pipe: commands "
            "(turn secure mode off to run commands)"
        )
    if url == "-":
        raise SpecError(f"refusing to {action} '-' (standard input/output): {_HOW}")
    if "://" in url and not url.startswith("file://"):
        return
    path = url[len("file://") :] if url.startswith("file://") else url
    real = os.path.realpath(path)
    roots = secure_roots()
    if any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
        return
    allowed = ", ".join(roots) if roots else "none is set"
    raise SpecError(
        f"refusing to {action} the local path {path}: {_HOW}, and it is not under an allowed root ({allowed}); "
        "add its folder to WDS_SECURE_ROOTS or the config file's secure_roots"
    )


def refuse_pickle(what: str = "allow_pickle=True") -> None:
    """Refuse loading pickles when secure mode is on."""
    if secure_mode():
        raise SpecError(
            f"refusing {what}: {_HOW}; loading a pickle runs code of the data's choosing, so it cannot be allowed "
            "in secure mode"
        )
