"""Field encoders chosen by extension: the writer's side of the decoders.

Every extension the decoders read can be written, and decoding what was
written gives the value back (images up to their format's own loss: JPEG is
lossy).  ``bytes`` are written as they are and ``str`` as UTF-8 whatever the
extension (a ``json`` str is taken to be JSON text already), except in the binary
MessagePack and CBOR formats, where a str is a value to encode.  A trailing
``.gz`` gzips the encoded bytes.  Pickle is written only when the writer was
built with ``allow_pickle=True``.
"""

from __future__ import annotations

import gzip
import io
import json
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .images import IMAGE_ENCODE_EXTENSIONS, encode_image

__all__ = ["FieldEncoder", "register_encoder"]

_BYTES = (bytes, bytearray, memoryview)


def _integer(value: Any) -> bytes:
    return str(operator.index(value)).encode("ascii")


def _text(value: Any) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"text fields take str, got {type(value).__name__}")
    return value.encode("utf-8")


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


_JSON = json.JSONEncoder(default=_plain)  # one encoder: json.dumps(default=...) builds a new one per call


def _json(value: Any) -> bytes:
    return _JSON.encode(value).encode("utf-8")


def _npy(value: Any) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, np.asarray(value), allow_pickle=False)
    return out.getvalue()


def _npz(value: Any) -> bytes:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"npz fields take a dict of arrays with str keys, got {type(value).__name__}")
    out = io.BytesIO()
    arrays: dict[str, Any] = {k: np.asarray(v) for k, v in value.items()}
    np.savez_compressed(out, **arrays)
    return out.getvalue()


def _msgpack(value: Any) -> bytes:
    import msgpack

    return msgpack.packb(value, use_bin_type=True, default=_plain)


def _cbor(value: Any) -> bytes:
    import cbor2

    return cbor2.dumps(value, default=lambda encoder, v: encoder.encode(_plain(v)))


def _tenbin(value: Any) -> bytes:
    from .tenbin import encode_buffer

    return encode_buffer(value)


# extension -> encoder, filled by register_encoder.
ENCODERS: dict[str, Callable[[Any], bytes]] = {}


def register_encoder(extensions: str, fn: Callable[[Any], bytes]) -> None:
    """Encode values of fields whose last extension is one of ``extensions`` with ``fn(value)``."""
    for extension in extensions.lower().split():
        ENCODERS[extension.lstrip(".")] = fn


register_encoder("cls cls2 class count index inx id", _integer)
register_encoder("txt text transcript html htm", _text)
register_encoder("json jsn", _json)
register_encoder("npy", _npy)
register_encoder("npz", _npz)
register_encoder("mp msg msgpack", _msgpack)
register_encoder("cbor", _cbor)
register_encoder("ten tb tenbin", _tenbin)


def _image_encoder(extension: str) -> Callable[[Any], bytes]:
    return lambda value: encode_image(value, extension)


for _extension in IMAGE_ENCODE_EXTENSIONS:
    register_encoder(_extension, _image_encoder(_extension))

_PICKLE = frozenset({"pyd", "pickle", "pkl"})
# A str is written as UTF-8 text, whatever the extension (so ``"json": json.dumps(x)`` works), except
# where text cannot be the encoded form: in these binary formats a str is a value to encode.
_BINARY_STRUCTURED = frozenset({"mp", "msg", "msgpack", "cbor"})


class FieldEncoder:
    """``encoder(field, value) -> bytes``, by the field's last extension.

    ``table`` replaces the built-in encoders (webdataset's ``encoder={ext: fn}``);
    ``bytes`` and ``str`` values never need one.
    """

    def __init__(self, table: Mapping[str, Callable[[Any], bytes]] | None = None, allow_pickle: bool = False) -> None:
        self.table = dict(ENCODERS) if table is None else {k.lower().lstrip("."): f for k, f in table.items()}
        self.allow_pickle = allow_pickle
        self._plans: dict[str, tuple[str, bool, bool, Any]] = {}  # field -> what to do, worked out once

    def _plan(self, field: str) -> tuple[str, bool, bool, Any]:
        compress = field[-3:].lower() == ".gz"
        extension = (field[:-3] if compress else field).rsplit(".", 1)[-1].lower()
        if len(self._plans) > 1024:  # fields are few in practice; never let odd data grow this
            self._plans.clear()
        plan = (extension, compress, extension not in _BINARY_STRUCTURED, self.table.get(extension))
        self._plans[field] = plan
        return plan

    def __call__(self, field: str, value: Any) -> bytes | bytearray | memoryview:
        extension, compress, str_is_text, fn = self._plans.get(field) or self._plan(field)
        if isinstance(value, _BYTES):
            encoded: Any = value
        elif str_is_text and type(value) is str:
            encoded = value.encode("utf-8")
        elif fn is not None:
            encoded = fn(value)
            if not isinstance(encoded, _BYTES):
                raise TypeError(f"the encoder for {extension!r} returned {type(encoded).__name__}, not bytes")
        else:
            encoded = self._fallback(extension, value)
        return gzip.compress(encoded, mtime=0) if compress else encoded

    def _fallback(self, extension: str, value: Any) -> bytes:
        if extension in _PICKLE:
            if not self.allow_pickle:
                raise ValueError(
                    f"refusing to pickle a .{extension} field: pickles run code when loaded; "
                    "pass allow_pickle=True to the writer to write them anyway, or use a safe format (npy, json...)"
                )
            import pickle

            return pickle.dumps(value)
        if isinstance(value, str):
            return value.encode("utf-8")
        raise TypeError(
            f"no encoder for extension {extension!r} and a {type(value).__name__} value; "
            "give bytes or str, or pass encoder={extension: function}"
        )
