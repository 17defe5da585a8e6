"""``webdataset.autodecode``: wds's decoders under webdataset's names.

``decoders`` is the table of built-in extensions: reading it gives wds's
decoder of an extension, and ``decoders["ext"] = fn`` registers ``fn(data)``
for every decoder of the process (:func:`wds_core.register_decoder`).  Pickle
stays off: ``unpickle_loads`` exists for code that calls it on purpose, but
``.pyd``/``.pickle`` fields decode only with ``Decoder(..., allow_pickle=True)``.
The torch decoders (``torch_loads``, ``torch_video``, ``torch_audio``) come with
``wds_torch``.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import numpy as np

from ..errors import DecodingError, SpecError
from ..fieldcodecs import IMAGE_EXTENSIONS as _IMAGE_EXTENSIONS
from ..fieldcodecs import Continue, ImageHandler, basichandlers, gzfilter, handle_extension, imagehandler
from ..fieldcodecs.decoders import DECODERS, register_decoder
from ..fieldcodecs.images import IMAGE_SPECS
from ..fieldcodecs.tenbin import decode_buffer
from ..io.secure import secure_mode
from ..stages import decode as _decode
from . import hooks, utils  # noqa: F401 - utils: webdataset's module imports it, and code reaches it here
from ._refuse import refused_function

__all__ = [
    "IMAGE_EXTENSIONS",
    "Continue",
    "Decoder",
    "DecodingError",
    "ImageHandler",
    "basichandlers",
    "call_extension_handler",
    "cbor_loads",
    "decoders",
    "default_decoder",
    "default_post_handlers",
    "default_pre_handlers",
    "gzfilter",
    "handle_extension",
    "imagehandler",
    "imagespecs",
    "msgpack_loads",
    "npy_loads",
    "npz_loads",
    "pytorch_weights_only",
    "tenbin_loads",
    "torch_audio",
    "torch_loads",
    "torch_video",
    "unpickle_loads",
]

IMAGE_EXTENSIONS = sorted(_IMAGE_EXTENSIONS)
pytorch_weights_only = True  # wds loads .pth fields with weights_only=True unless allow_pickle=True


def tenbin_loads(data: bytes) -> list[np.ndarray]:
    return decode_buffer(data)


def msgpack_loads(data: bytes) -> Any:
    import msgpack

    return msgpack.unpackb(data, raw=False)


def npy_loads(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def npz_loads(data: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return dict(archive)


def cbor_loads(data: bytes) -> Any:
    import cbor2

    return cbor2.loads(data)


def unpickle_loads(data: bytes) -> Any:
    """Unpickle bytes: this runs code chosen by whoever wrote them; call it on trusted data only (never in
    secure mode: ``enforce_security``)."""
    if secure_mode():
        raise SpecError("Unpickling is not allowed for security reasons when enforce_security is set (secure mode)")
    return pickle.loads(data)


def call_extension_handler(key: str, data: bytes, f: Callable[[bytes], Any], extensions: list[str]) -> Any:
    """``f(data)`` when ``key`` ends in one of ``extensions`` (dotted ones match several components), else ``None``."""
    return handle_extension(" ".join(extensions), f)(key, data)


class _DecoderTable(MutableMapping[str, Callable[[bytes], Any]]):
    """webdataset's ``decoders`` dict over wds's registry: setting an entry registers a decoder."""

    def __getitem__(self, extension: str) -> Callable[[bytes], Any]:
        if extension in _PICKLES and extension not in DECODERS:
            # webdataset's table maps them to unpickle_loads; wds's decoders leave them as bytes unless allowed,
            # but code that looks the function up and calls it asks to unpickle (refused in secure mode)
            return unpickle_loads
        fn, takes_allow_pickle = DECODERS[extension]
        return (lambda data: fn(data, False)) if takes_allow_pickle else fn

    def __setitem__(self, extension: str, fn: Callable[[bytes], Any]) -> None:
        register_decoder(extension, fn)

    def __delitem__(self, extension: str) -> None:
        del DECODERS[extension]

    def __iter__(self) -> Iterator[str]:
        return iter(list(DECODERS) + [name for name in _PICKLES if name not in DECODERS])

    def __len__(self) -> int:
        return len(DECODERS) + sum(1 for name in _PICKLES if name not in DECODERS)


_PICKLES = ("pkl", "pickle", "pyd")
decoders = _DecoderTable()
imagespecs = IMAGE_SPECS  # spec name -> wds ImageSpec (Pillow mode and converter)
default_pre_handlers = [gzfilter]
default_post_handlers = [basichandlers]


class Decoder(_decode.Decoder):
    """wds's decoder (:class:`wds_core.stages.decode.Decoder`) whose default ``pre`` and ``post`` handlers are
    ``default_pre_handlers`` and ``default_post_handlers`` when code changed or replaced those lists, as webdataset's
    reads them when a decoder is made."""

    def default_pre(self) -> list[Callable]:
        handlers = hooks.replacement("autodecode", "default_pre_handlers")
        return super().default_pre() if handlers is None else list(handlers)

    def default_post(self, allow_pickle: bool) -> list[Callable]:
        handlers = hooks.replacement("autodecode", "default_post_handlers")
        return super().default_post(allow_pickle) if handlers is None else list(handlers)


default_decoder = Decoder()

_TORCH = "it needs PyTorch: import it from wds_torch (or install_as_webdataset() from wds_torch)"
torch_loads = refused_function("autodecode.torch_loads", _TORCH)
torch_video = refused_function("autodecode.torch_video", _TORCH)
torch_audio = refused_function("autodecode.torch_audio", _TORCH)
