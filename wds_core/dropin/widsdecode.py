"""wids's sample decoding (``wids.wids_decode``) over wds's field decoders: fields keyed by their extension with
the leading dot (``".jpg"``), as ``io.BytesIO`` or bytes; see :mod:`wds_core.dropin.wids`."""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ..fieldcodecs.bounded import bounded_gunzip
from ..fieldcodecs.decoders import NULL, PICKLE_EXTENSIONS, basic_decoders

__all__ = [
    "check_keys",
    "decode_all_gz",
    "decode_basic",
    "decode_images_to_numpy",
    "decode_images_to_pil",
    "default_decoder",
]


def check_keys(sample: dict[str, Any]) -> None:
    """Every field's key starts with a dot (``__key__`` and the like aside), as wids's decoders need."""
    for key in sample:
        if not key.startswith("__") and not key.startswith("."):
            raise ValueError(f"Key {key} must start with a dot")


def _readable(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if hasattr(value, "seek"):
        value.seek(0)
    return value.read()  # type: ignore[no-any-return]


def decode_all_gz(sample: dict[str, Any], format: Any = True, update_key: bool = True) -> dict[str, Any]:
    """Gunzip (bounded by the decode limits) every ``.<ext>.gz`` field; ``update_key`` drops the ``.gz``."""
    check_keys(sample)
    for key, value in list(sample.items()):
        parts = key.split(".")
        if len(parts) == 1 or parts[-1].lower() != "gz":
            continue
        if len(parts) == 2:
            warnings.warn("Plain .gz extension in sample; not decompressed.", stacklevel=2)
            continue
        stream = io.BytesIO(bounded_gunzip(_readable(value)))
        if update_key:
            del sample[key]
            sample[".".join(parts[:-1])] = stream
        else:
            sample[key] = stream
    return sample


_BASIC = {"txt", "text", "cls", "cls2", "json", "npy", "mp", "pt", "pth", "safetensors", *PICKLE_EXTENSIONS}
_IMAGES = {"jpg", "png", "ppm", "pgm", "pbm", "pnm"}


def _decode_basic_field(extension: str, data: bytes, allow_pickle: bool) -> Any:
    if extension == "safetensors":
        import safetensors.torch

        return safetensors.torch.load(data)
    value = basic_decoders(allow_pickle)("." + extension, data)  # pickles refused unless allowed
    return None if value is NULL else value


def decode_basic(sample: dict[str, Any], format: Any = True, allow_pickle: bool = False) -> dict[str, Any]:
    """Decode wids's basic fields in place: ``.txt``/``.text`` (str), ``.cls``/``.cls2`` (int), ``.json``,
    ``.npy``, ``.mp`` (msgpack), ``.pt``/``.pth`` (torch), ``.safetensors``; a ``.gz`` field by the extension
    before it.  Other fields are left as they are."""
    check_keys(sample)
    for key, value in sample.items():
        if key.startswith("__"):
            continue
        parts = key.split(".")
        if len(parts) == 1:
            continue
        extension = parts[-1].lower()
        if extension == "gz" and len(parts) >= 2:
            extension = parts[-2].lower()
        if extension not in _BASIC:
            continue
        data = _readable(value)
        decoded = _decode_basic_field(extension, data, allow_pickle)
        if decoded is not None or extension == "json":
            sample[key] = decoded
        elif extension in ("pt", "pth"):  # no PyTorch here to load it: the bytes stay as they came
            sample[key] = io.BytesIO(data)
    return sample


def _images(sample: dict[str, Any], convert: Callable[[Any], Any]) -> dict[str, Any]:
    import PIL.Image

    check_keys(sample)
    for key, value in sample.items():
        if key.startswith("__"):
            continue
        parts = key.split(".")
        if len(parts) > 1 and parts[-1].lower() in _IMAGES:
            stream = io.BytesIO(value) if isinstance(value, (bytes, bytearray, memoryview)) else value
            sample[key] = convert(PIL.Image.open(stream))
    return sample


def decode_images_to_pil(sample: dict[str, Any], format: Any = True) -> dict[str, Any]:
    """``.jpg``, ``.png`` and the PNM fields as PIL images (opened lazily, as ``PIL.Image.open`` does)."""
    return _images(sample, lambda image: image)


def decode_images_to_numpy(sample: dict[str, Any], format: Any = True) -> dict[str, Any]:
    """``.jpg``, ``.png`` and the PNM fields as numpy arrays."""
    return _images(sample, np.asarray)


def default_decoder(sample: dict[str, Any], format: Any = "PIL", gz_update_key: bool = False) -> dict[str, Any]:
    """wids's decoding of a sample (a copy): ``.gz`` fields gunzipped (the key kept unless ``gz_update_key``),
    the basic fields decoded, images as PIL images (``format="PIL"``) or numpy arrays (``"numpy"``)."""
    result = dict(sample)
    check_keys(result)
    decode_all_gz(result, update_key=gz_update_key)
    decode_basic(result)
    kind = "pil" if format is True else str(format).lower()
    if kind == "pil":
        decode_images_to_pil(result)
    elif kind == "numpy":
        decode_images_to_numpy(result)
    else:
        raise ValueError(f"Unknown format: {format}")
    return result
