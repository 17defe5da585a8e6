"""Secure mode: for services that read URLs or spec files their users supply.

By default wds trusts its caller: ``pipe:`` runs shell commands, local paths
open any file the process can read, any fsspec protocol is used, and
``allow_pickle=True`` loads pickles.  Secure mode turns all of that off with
one switch:

* the environment: ``WDS_SECURE=1`` (and ``WDS_SECURE_ROOTS``, folders
  separated by ``os.pathsep``; ``WDS_SECURE_PROTOCOLS``, comma-separated);
* the configuration file: ``secure: true`` (``secure_roots: [...]``,
  ``secure_protocols: [...]``);
* the code: ``wds_core.io.set_secure(True, roots=[...])``, which sets the
  environment variables, so that worker processes inherit the mode (the
  drop-in's ``webdataset.utils.enforce_security = True`` does the same).

Secure mode is an allowlist, checked for every read and write after URL
rewrites (shards, descriptors, spec files, counts files, indexes, ``gopen``):

* a URL is allowed when its protocol is one of :data:`DEFAULT_PROTOCOLS`
  (``s3``, ``gs``, ``http(s)``...) or of the configured protocols; an fsspec
  chain (``simplecache::s3://...``) only when every link's protocol is;
* a local path or ``file://`` URL only under an allowed root: named under
  one here (:func:`check_allowed`, for a clear refusal before anything is
  opened), and reached from the root's descriptor by the file gate
  (:mod:`.files`, :mod:`.roots`), so no symbolic link, swapped in at any
  moment, leads out;
* everything else is refused: ``pipe:`` commands, ``-`` (standard
  input/output), ``local://``, ``memory://``, ``tar://``, ``zip://``,
  ``dir::``, registered scheme openers for other schemes (``name:/path`` is
  the opener's URL when one is registered for ``name``, as the storage layer
  opens it, not a local path)...;
* every file the package opens, creates, renames, lists or removes goes through
  :mod:`.files`, which applies the roots to it: the shard cache (``cache_dir``),
  the drop-in's caches, indexes, the commands' inputs and outputs, logs;
* every decoder refuses to load pickles (``allow_pickle=True``, ``.pth``
  fields, which ``torch.load`` unpickles even with ``weights_only``,
  ``xdecode``, ``unpickle_loads``).

Every refusal is a :class:`~wds_core.errors.SpecError` naming what was refused
and how to allow it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ..errors import SpecError, redact_url
from .config import configured
from .registry import registered_scheme

__all__ = [
    "DEFAULT_PROTOCOLS",
    "check_allowed",
    "refusal",
    "refuse_pickle",
    "secure_mode",
    "secure_protocols",
    "secure_roots",
    "set_secure",
]

DEFAULT_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "http", "https", "hf"})
_TRUE = ("1", "true", "yes", "on")
_HOW = "secure mode is on (WDS_SECURE, the config file's secure: true, set_secure() or enforce_security)"


def secure_mode() -> bool:
    """Whether secure mode is on (the environment, then the configuration file)."""
    value = os.environ.get("WDS_SECURE")
    if value is not None and value.strip():
        return value.strip().lower() in _TRUE
    return configured("secure") is True


def secure_roots() -> list[str]:
    """The folders local paths may be under in secure mode (resolved)."""
    roots = [r for r in os.environ.get("WDS_SECURE_ROOTS", "").split(os.pathsep) if r]
    roots += [str(r) for r in (configured("secure_roots") or [])]
    return [os.path.realpath(os.path.expanduser(root)) for root in roots]


def secure_protocols() -> frozenset[str]:
    """The URL protocols allowed in secure mode: ``WDS_SECURE_PROTOCOLS``, else the config file's
    ``secure_protocols``, else :data:`DEFAULT_PROTOCOLS`."""
    named = os.environ.get("WDS_SECURE_PROTOCOLS")
    if named is not None and named.strip():
        return frozenset(p.strip().lower() for p in named.replace(" ", ",").split(",") if p.strip())
    listed = configured("secure_protocols")
    if listed:
        return frozenset(str(p).lower() for p in listed)
    return DEFAULT_PROTOCOLS


def set_secure(on: bool = True, roots: Iterable[str | os.PathLike] | None = (), protocols: Iterable[str] = ()) -> None:
    """Turn secure mode on (or off) for this process and the worker processes it starts.

    ``roots`` replace the allowed folders (``None`` keeps them), ``protocols`` the allowed protocols (empty:
    the defaults).
    """
    os.environ["WDS_SECURE"] = "1" if on else "0"
    if roots is not None:
        if roots:
            os.environ["WDS_SECURE_ROOTS"] = os.pathsep.join(os.fspath(root) for root in roots)
        else:
            os.environ.pop("WDS_SECURE_ROOTS", None)
    if protocols:
        os.environ["WDS_SECURE_PROTOCOLS"] = ",".join(protocols)
    else:
        os.environ.pop("WDS_SECURE_PROTOCOLS", None)


def refusal(action: str, what: str, why: str) -> SpecError:
    """The error of secure mode refusing to ``action`` ``what`` because ``why``."""
    return SpecError(f"refusing to {action} {what}: {_HOW}, and {why}")


def _link_protocol(link: str) -> str:
    """The protocol of one link of a URL (``s3`` of ``s3://b/k``, ``simplecache`` of a chain's bare name); a path
    is ``"a local path"``."""
    if "://" in link:
        return link.split("://", 1)[0].lower()
    return link.lower() if link.replace("_", "").replace("-", "").isalnum() else "a local path"


_READ_IT = object()


def check_allowed(url: Any, action: str = "read", opener: Any = _READ_IT) -> None:
    """Refuse ``url`` (after rewrites) in secure mode unless it is on the allowlist (see the module doc).

    A local path is checked by name here; the file gate reaches it from its root when it is opened.  ``opener``: the
    scheme of the registered opener that opens ``url`` as the storage layer read it
    (:func:`wds_core.io.backends.route`), else it is read here.
    """
    if not secure_mode():
        return
    if not isinstance(url, str):
        raise refusal(action, repr(type(url).__name__), "only URLs and paths given as text are checked")
    if url.startswith("pipe:"):
        raise refusal(action, redact_url(url), "it refuses pipe: commands (turn secure mode off to run commands)")
    if url == "-":
        raise refusal(action, "'-' (standard input/output)", "it reads and writes files and allowed URLs only")
    # a registered opener opens `mystore:/x` (no //) as its own, as it opens `mystore://x`: that is its protocol
    if opener is _READ_IT:
        opener = registered_scheme(url)
    if "://" in url and not url.startswith("file://") or "::" in url or opener not in (None, "__default__"):
        allowed = secure_protocols() - {"file", "local"}  # local files are allowed by their roots, never by name
        protocols = {_link_protocol(link) for link in url.split("::")} if opener is None else {opener.lower()}
        refused = sorted(protocols - allowed)
        if refused:
            why = f"it uses {', '.join(refused)}, which it does not allow ({_allowed()})"
            raise refusal(action, redact_url(url), why)
        return
    path = url[len("file://") :] if url.startswith("file://") else url
    _check_local(os.path.realpath(path), path, action)


def _allowed() -> str:
    return (
        f"allowed: {', '.join(sorted(secure_protocols()))} and local paths under WDS_SECURE_ROOTS; "
        "add protocols with WDS_SECURE_PROTOCOLS or the config file's secure_protocols"
    )


def _check_local(real: str, shown: str, action: str) -> None:
    roots = secure_roots()
    if any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
        return
    where = ", ".join(roots) if roots else "none is set"
    raise refusal(
        action,
        f"the local path {shown}",
        f"it is not under an allowed root ({where}); add its folder to WDS_SECURE_ROOTS or the config file's "
        "secure_roots",
    )


def refuse_pickle(what: str = "allow_pickle=True") -> None:
    """Refuse loading pickles when secure mode is on (called where a pickle would be loaded, too)."""
    if secure_mode():
        raise SpecError(
            f"refusing {what}: {_HOW}; loading a pickle runs code of the data's choosing, so it cannot be allowed "
            "in secure mode"
        )
