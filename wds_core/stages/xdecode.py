"""webdataset's ``xdecode`` (:class:`XDecode`): fields decoded by glob patterns on their names, each decoder given a
binary stream; ``*.bin``, ``*.txt`` and (allowed only) ``*.pyd`` by default.
"""

from __future__ import annotations

import io
import pickle
import re
from fnmatch import fnmatch
from typing import Any

from ..errors import DecodingError, SampleShapeError
from ..fieldcodecs import PickleNotAllowed
from ..handlers import Handler, reraise_exception
from ..io.secure import refuse_pickle
from .mapping import PerSample

__all__ = ["XDECODE_DEFAULTS", "XDecode", "decode_bin", "decode_pickle", "decode_text"]

_BYTES = (bytes, bytearray, memoryview)


def decode_bin(stream: Any) -> bytes:
    """xdecode's ``*.bin``: the bytes."""
    return stream.read()


def decode_text(stream: Any) -> str:
    """xdecode's ``*.txt``: UTF-8 text."""
    return stream.read().decode("utf-8")


def decode_pickle(stream: Any) -> Any:
    """xdecode's ``*.pyd`` with ``allow_pickle=True``: unpickling runs code chosen by whoever wrote it."""
    refuse_pickle("unpickling a field")  # secure mode may have been turned on since the stage was made
    return pickle.load(stream)


XDECODE_DEFAULTS = [("*.bin", decode_bin), ("*.txt", decode_text), ("*.pyd", decode_pickle)]


def _pickle_refused(stream: Any) -> Any:
    raise PickleNotAllowed(
        "pickle fields are not decoded unless allowed: xdecode(..., allow_pickle=True), trusted data only"
    )


class XDecode(PerSample):
    """webdataset's ``xdecode``: decoders chosen by glob patterns on field names, given a binary stream.

    ``decoders`` are ``(pattern, fn)`` pairs, ``by_extension`` adds
    ``ext=fn`` as ``("*.ext", fn)``; later ones win, after the defaults
    (``*.bin`` -> bytes, ``*.txt`` -> str; ``*.pyd`` -> unpickled only with
    ``allow_pickle=True``).  A pattern matches the field name or ``"." + name``
    (lower-cased, after the last ``/``).  ``fn=False`` keeps the bytes.  A
    field no pattern matches is an error when ``must_decode``, else kept as is;
    ``__*`` fields are never decoded.
    """

    def __init__(
        self,
        *decoders: tuple[str, Any],
        must_decode: bool = True,
        defaults: list[tuple[str, Any]] | None = None,
        allow_pickle: bool = False,
        handler: Handler = reraise_exception,
        **by_extension: Any,
    ) -> None:
        if defaults is None:
            defaults = XDECODE_DEFAULTS
        table = list(defaults) + list(decoders) + [("*." + ext, fn) for ext, fn in by_extension.items()]
        for entry in table:
            if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str)):
                raise TypeError(f"xdecode takes (pattern, function) pairs, got {entry!r}")
            if entry[1] is not False and not callable(entry[1]):
                raise TypeError(f"xdecode: the decoder for {entry[0]!r} must be callable or False, got {entry[1]!r}")
        if allow_pickle:
            refuse_pickle()
        else:
            table = [(p, _pickle_refused if fn is decode_pickle else fn) for p, fn in table]
        self.table = table[::-1]
        self.must_decode, self.handler = must_decode, handler

    def _find(self, field: str) -> Any:
        name = re.sub(r".*/", "", field).lower()
        for pattern, fn in self.table:
            if fnmatch(name, pattern) or fnmatch("." + name, pattern):
                return fn
        return None

    def process(self, sample: Any) -> dict[str, Any]:
        if not isinstance(sample, dict):
            raise SampleShapeError(f"xdecode expects samples as dicts, got {type(sample).__name__}")
        result = {}
        for field, data in sample.items():
            fn = None if field.startswith("__") else self._find(field)
            if field.startswith("__") or fn is False:
                result[field] = data
            elif fn is None:
                if self.must_decode:
                    raise DecodingError.in_sample(
                        "no xdecode decoder matches this field (pass must_decode=False to keep it)", sample, field
                    )
                result[field] = data
            else:
                try:
                    result[field] = fn(io.BytesIO(data) if isinstance(data, _BYTES) else data)
                except Exception as exn:
                    raise DecodingError.in_sample(f"cannot decode: {type(exn).__name__}: {exn}", sample, field) from exn
        return result
