"""Field decoders chosen by extension, and the handler helpers built on them.

A *handler* is ``f(key, data)`` where ``key`` is ``"." + field`` (``".jpg"``,
``".seg.png"``): it returns the decoded value, ``None`` to pass, or
:class:`Continue` to hand new bytes under a new key to the following handlers
(this is how ``.gz`` fields are gunzipped and then decoded by their inner
extension).  These are webdataset's conventions, so handlers written for it
work unchanged.  A handler whose field decodes to ``None`` (a JSON ``null``)
returns :data:`NULL`, since ``None`` means "not mine".

Pickle is never loaded unless the decoder was built with ``allow_pickle=True``.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..io.secure import refuse_pickle
from .bounded import bounded_gunzip, charge, check_npy, check_npz
from .plugins import load_provider
from .structured import decode_cbor, decode_json, decode_msgpack

__all__ = [
    "NULL",
    "Continue",
    "PickleNotAllowed",
    "basic_decoders",
    "basichandlers",
    "gzfilter",
    "handle_extension",
    "register_decoder",
]

PICKLE_EXTENSIONS = frozenset({"pyd", "pickle", "pkl"})


class PickleNotAllowed(ValueError):
    """Raised for a pickle field when the decoder was not told to trust pickles."""


class _Null:
    """What a handler returns for a field that decodes to ``None`` (a JSON ``null``): ``None`` means "pass"."""

    def __repr__(self) -> str:
        return "NULL"

    def __reduce__(self) -> str:
        return "NULL"


NULL = _Null()


class Continue:
    """Returned by a handler to continue decoding ``data`` as if it were field ``key``."""

    def __init__(self, key: str, data: bytes) -> None:
        self.key, self.data = key, data


def _text(data: bytes) -> str:
    text = bytes(data).decode("utf-8")
    charge(sys.getsizeof(text), "a text field")
    return text


def _integer(data: bytes) -> int:
    return int(bytes(data))


def _npy(data: bytes) -> np.ndarray:
    charge(check_npy(data), "an .npy field")  # before numpy allocates what the header claims
    return np.load(io.BytesIO(data), allow_pickle=False)


def _npz(data: bytes) -> dict[str, np.ndarray]:
    charge(check_npz(data), "an .npz field")
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _tenbin(data: bytes) -> list[np.ndarray]:
    from .tenbin import decode_buffer

    charge(len(data), "a tenbin field")  # arrays over the field's own bytes
    return decode_buffer(data)


def _unpickle(data: bytes) -> Any:
    import pickle

    refuse_pickle("unpickling a field")  # secure mode may have been turned on since the decoder was made
    return pickle.loads(data)


# extension -> (decoder, takes_allow_pickle), filled by register_decoder (the drop-in's decoders view it).
DECODERS: dict[str, tuple[Callable[..., Any], bool]] = {}


def register_decoder(extensions: str, fn: Callable[..., Any], *, takes_allow_pickle: bool = False) -> None:
    """Decode fields whose last extension is one of ``extensions`` (space-separated) with ``fn(data)``.

    With ``takes_allow_pickle`` the call is ``fn(data, allow_pickle)``, so a
    format that may contain pickles (torch's ``.pth``) loads them only when the
    decoder was told to trust them.
    """
    for extension in extensions.lower().split():
        DECODERS[extension.lstrip(".")] = (fn, takes_allow_pickle)


register_decoder("txt text transcript", _text)
register_decoder("cls cls2 class count index inx id", _integer)
register_decoder("json jsn", decode_json)
register_decoder("npy", _npy)
register_decoder("npz", _npz)
register_decoder("mp msg msgpack", decode_msgpack)
register_decoder("cbor", decode_cbor)
register_decoder("ten tb tenbin", _tenbin)


def _provided_decoder(extension: str) -> Any:
    """The decoder a package registers for ``extension`` once loaded (:mod:`.plugins`), else None.

    An extension claimed by a package that does not load here (e.g. ``.pth``
    without PyTorch) stays bytes, as any extension without a decoder does.
    """
    load_provider("ext", extension)  # registers the decoder when a package claims the extension and loads
    return DECODERS.get(extension)


def basic_decoders(allow_pickle: bool = False) -> Callable[[str, bytes], Any]:
    """The handler for the built-in extensions; pickle ones load only with ``allow_pickle``."""
    return _BasicHandler(allow_pickle)


class _BasicHandler:
    def __init__(self, allow_pickle: bool) -> None:
        if allow_pickle:
            refuse_pickle()
        self.allow_pickle = allow_pickle

    def __call__(self, key: str, data: bytes) -> Any:
        extension = key.rsplit(".", 1)[-1].lower()
        entry = DECODERS.get(extension) or _provided_decoder(extension)
        if entry is not None:
            fn, takes_allow_pickle = entry
            value = fn(data, self.allow_pickle) if takes_allow_pickle else fn(data)
            return NULL if value is None else value
        if extension in PICKLE_EXTENSIONS:
            if not self.allow_pickle:
                raise PickleNotAllowed(
                    f"refusing to unpickle a .{extension} field: unpickling runs arbitrary code; "
                    "if you trust this dataset, pass allow_pickle=True to decode() or Decoder()"
                )
            return _unpickle(data)
        return None

    def __repr__(self) -> str:
        return f"basic_decoders(allow_pickle={self.allow_pickle})"


basichandlers = basic_decoders(allow_pickle=False)


def gzfilter(key: str, data: bytes) -> Continue | None:
    """Gunzip ``*.gz`` fields (within the decode limits, :mod:`.bounded`) and continue by their inner extension."""
    if not key.lower().endswith(".gz"):
        return None
    inflated = bounded_gunzip(data)
    charge(len(inflated), "a .gz field")
    return Continue(key[:-3], inflated)


class _ExtensionHandler:
    def __init__(self, extensions: list[list[str]], fn: Callable[[bytes], Any]) -> None:
        self.extensions, self.fn = extensions, fn

    def __call__(self, key: str, data: bytes) -> Any:
        parts = key.lower().split(".")
        for target in self.extensions:
            if len(target) < len(parts) and parts[-len(target) :] == target:
                return self.fn(data)
        return None


def handle_extension(extensions: str, fn: Callable[[bytes], Any]) -> Callable[[str, bytes], Any]:
    """A handler calling ``fn(data)`` for fields ending in one of ``extensions``.

    ``extensions`` is space-separated and case-insensitive; a dotted entry such
    as ``"seg.png"`` matches only fields ending in those components, and a
    leading dot is ignored (``".png"`` is ``"png"``).

    >>> h = handle_extension("seg.png", len)
    >>> h(".seg.png", b"abc"), h(".png", b"abc")
    (3, None)
    """
    targets = [e.strip(".").split(".") for e in extensions.lower().split()]
    return _ExtensionHandler(targets, fn)
