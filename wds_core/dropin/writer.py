"""``webdataset.writer``: ``TarWriter``/``ShardWriter`` (wds's: atomic, deterministic) and the encoders by name.

Encoding is wds's :class:`~wds_core.fieldcodecs.FieldEncoder`; the functions
here are its pieces under webdataset's names.  Pickle fields are written only
with ``allow_pickle=True``.  ``torch_dumps`` comes with ``wds_torch``.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

from ..fieldcodecs import FieldEncoder, encode_image
from ..fieldcodecs.encoders import ENCODERS
from ..fieldcodecs.tenbin import encode_buffer
from ..io.destinations import compression_of
from ..io.storage import Storage
from ..writer import ShardWriter as _CoreShardWriter
from ..writer import TarWriter as _CoreTarWriter
from . import hooks
from ._refuse import refused_function
from .gopen import as_module as gopen  # 1.0.2's function and 0.2.x's module in one name (gopen.GopenModule)

__all__ = [
    "ShardWriter",
    "TarWriter",
    "add_handlers",
    "bytestr",
    "cbor_dumps",
    "default_handlers",
    "gopen",
    "encode_based_on_extension",
    "encode_based_on_extension1",
    "imageencoder",
    "make_encoder",
    "make_handlers",
    "mp_dumps",
    "numpy_dumps",
    "numpy_npz_dumps",
    "tenbin_dumps",
    "torch_dumps",
]


class ShardWriter(_CoreShardWriter):
    """wds's numbered shards with webdataset's way with what is there already: shards of the same names are
    written over and the others left (``overwrite=None``); ``overwrite=False`` refuses a pattern that holds shards,
    ``True`` replaces the whole set (:class:`wds_core.ShardWriter`)."""

    def __init__(self, pattern: str, *args: Any, overwrite: bool | None = None, **kw: Any) -> None:
        super().__init__(pattern, *args, overwrite=overwrite, **kw)


class TarWriter(_CoreTarWriter):
    """wds's writer with webdataset's signature: ``TarWriter(fileobj, user, group, mode, compress, encoder,
    keep_meta, mtime, format)``, positional as there.

    ``mtime=None`` (webdataset: the time of writing) writes 0, so that the same samples give the same bytes;
    ``allow_pickle`` and ``storage_options`` are wds's, keyword-only.
    """

    def __init__(
        self,
        fileobj: Any,
        user: str = "bigdata",
        group: str = "bigdata",
        mode: int = 0o444,
        compress: bool | str | None = None,
        encoder: Any = True,
        keep_meta: bool = False,
        mtime: float | None = None,
        format: Any = None,
        *,
        allow_pickle: bool = False,
        storage_options: Storage | dict | None = None,
    ) -> None:
        self._opened: Any = None  # a stream gopen opened for a URL, when code replaced writer.gopen
        opener = hooks.replacement("writer", "gopen")
        if opener is not None and isinstance(fileobj, str):
            compress = compression_of(fileobj, compress) or False
            fileobj = self._opened = opener(fileobj, "wb")
        super().__init__(
            fileobj, encoder=encoder, compress=compress, mtime=0 if mtime is None else mtime, mode=mode,
            user=user, group=group, keep_meta=keep_meta, allow_pickle=allow_pickle,
            storage=storage_options, format=format,
        )  # fmt: skip

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._opened is not None:
                self._opened.close()


def imageencoder(image: Any, format: str = "PNG") -> bytes:
    """A PIL image or a uint8 / [0, 1] float array in the image ``format`` (``"PNG"``, ``"JPEG"``...)."""
    return encode_image(image, format.lower())


def bytestr(data: Any) -> bytes:
    """Bytes as they are, anything else as its ASCII text."""
    if isinstance(data, bytes):
        return data
    return (data if isinstance(data, str) else str(data)).encode("ascii")


def numpy_dumps(data: np.ndarray) -> bytes:
    """An array as ``.npy`` bytes (never pickled)."""
    out = io.BytesIO()
    np.save(out, data, allow_pickle=False)
    return out.getvalue()


def numpy_npz_dumps(data: dict[str, np.ndarray]) -> bytes:
    """A dict of arrays as ``.npz`` bytes."""
    return ENCODERS["npz"](data)


def tenbin_dumps(x: Any) -> bytes:
    """An array or a list of arrays in the tenbin format."""
    return encode_buffer(x)


def cbor_dumps(x: Any) -> bytes:
    return ENCODERS["cbor"](x)


def mp_dumps(x: Any) -> bytes:
    return ENCODERS["msgpack"](x)


def add_handlers(d: dict[str, Any], keys: str | list[str], value: Callable[[Any], bytes]) -> None:
    """``d[key] = value`` for each of ``keys`` (a list or a space-separated string)."""
    for key in keys.split() if isinstance(keys, str) else keys:
        d[key] = value


def make_handlers() -> dict[str, Callable[[Any], bytes]]:
    """The built-in encoders by extension (a copy: changing it changes nothing else)."""
    return dict(ENCODERS)


default_handlers = make_handlers()


def encode_based_on_extension1(data: Any, tname: str, handlers: dict[str, Callable[[Any], bytes]]) -> Any:
    """One value encoded for a field named ``tname`` with ``handlers`` (``__*`` fields are left alone)."""
    if tname.startswith("__"):
        return data
    return FieldEncoder(handlers)(tname, data)


def encode_based_on_extension(sample: dict[str, Any], handlers: dict[str, Callable[[Any], bytes]]) -> dict[str, Any]:
    """Every field of ``sample`` encoded by its extension with ``handlers``."""
    encoder = FieldEncoder(handlers)
    return {k: v if k.startswith("__") else encoder(k, v) for k, v in sample.items()}


def make_encoder(spec: bool | str | dict | Callable | None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A sample encoder: ``True`` the built-in one, ``False``/``None`` none, a dict ``{ext: fn}``, or a callable."""
    if spec is False or spec is None:
        return lambda sample: sample
    if callable(spec):
        return spec
    if spec is True:
        spec = default_handlers
    if not isinstance(spec, dict):
        raise ValueError(f"an encoder is True, False, a dict {{extension: function}} or a callable, got {spec!r}")
    table = spec
    return lambda sample: encode_based_on_extension(sample, table)


torch_dumps = refused_function("writer.torch_dumps", "it needs PyTorch: import it from wds_torch")
