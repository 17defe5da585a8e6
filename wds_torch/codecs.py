"""Torch decoding and encoding: ``torchrgb8``-style image specs, ``.pth`` fields, video and audio.

``import wds_torch`` registers (:func:`register`), in the core's tables,

* image specs ``torchrgb8 torchrgba8 torchl8`` (uint8) and ``torchrgb torch
  torchrgba torchl`` (float32 in [0, 1]): CHW tensors for colour images, HxW
  for ``l`` ones, as webdataset returns them;
* a ``.pth`` decoder (``torch.load`` with ``weights_only=True`` unless the
  decoder was built with ``allow_pickle=True``; refused in secure mode) and a
  ``.pth`` encoder (``torch.save``).

``torch_video`` and ``torch_audio`` are decoder handlers for the seeds'
``wds.Decoder(my_png_decoder, wds.torch_video, wds.torch_audio)``; they need
torchvision / torchaudio, and say so when those are missing.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from wds_core.errors import SpecError
from wds_core.fieldcodecs import ImageSpec, register_decoder, register_encoder, register_image_spec
from wds_core.io import files
from wds_core.io.secure import refuse_pickle, secure_mode

__all__ = ["torch_audio", "torch_dumps", "torch_loads", "torch_video"]

VIDEO_EXTENSIONS = frozenset("mp4 ogv mjpeg avi mov h264 mpg webm wmv".split())
AUDIO_EXTENSIONS = frozenset("flac mp3 sox wav m4a ogg wma".split())


def _to_tensor(array: np.ndarray) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return tensor.permute(2, 0, 1).contiguous() if tensor.ndim == 3 else tensor


def _uint8_tensor(array: np.ndarray) -> torch.Tensor:
    return _to_tensor(array)


def _float_tensor(array: np.ndarray) -> torch.Tensor:
    return _to_tensor(array).to(torch.float32).div_(255.0)


_IMAGE_SPECS = [
    ("torchrgb8", "RGB", _uint8_tensor),
    ("torchrgba8", "RGBA", _uint8_tensor),
    ("torchl8", "L", _uint8_tensor),
    ("torchrgb", "RGB", _float_tensor),
    ("torch", "RGB", _float_tensor),
    ("torchrgba", "RGBA", _float_tensor),
    ("torchl", "L", _float_tensor),
]


def torch_loads(data: bytes, allow_pickle: bool = False) -> Any:
    """A ``.pth`` field: tensors and plain containers; arbitrary pickled objects only with ``allow_pickle``.

    Never in secure mode: ``torch.load`` unpickles even with ``weights_only=True`` (a restricted unpickler, which has
    had its own holes), so secure mode refuses ``.pth`` fields as webdataset's ``enforce_security`` does.
    """
    if secure_mode():
        raise SpecError(
            "torch.loads is not allowed for security reasons when enforce_security is set: secure mode refuses "
            ".pth fields (torch.load unpickles, even with weights_only=True); store tensors as .npy or .ten"
        )
    if allow_pickle:
        refuse_pickle("a .pth field loaded with allow_pickle=True (full unpickling)")
    return torch.load(io.BytesIO(data), weights_only=not allow_pickle, map_location="cpu")


def torch_dumps(value: Any) -> bytes:
    """``torch.save`` into bytes (the ``.pth`` encoder)."""
    stream = io.BytesIO()
    torch.save(value, stream)
    return stream.getvalue()


def register() -> None:
    """Put this module's specs and ``.pth`` codecs in the core's tables (``wds_torch``'s ``__init__`` does;
    idempotent).

    It is also the target of this package's ``wds.codecs`` entry points, so a
    pipeline asking for ``torchrgb8`` or meeting a ``.pth`` field loads it
    without ``import wds_torch``.
    """
    for name, mode, convert in _IMAGE_SPECS:
        value_bytes = 4 if convert is _float_tensor else 1
        register_image_spec(name, ImageSpec(mode, convert, array=True, value_bytes=value_bytes))
    register_decoder("pth", torch_loads, takes_allow_pickle=True)
    register_encoder("pth", torch_dumps)


def _extension(key: str) -> str:
    return key.rsplit(".", 1)[-1].lower()


def _via_file(key: str, data: bytes, read: Any) -> Any:
    """Run ``read(path)`` on ``data`` written to a temporary file (the readers want a path)."""
    with files.temporary_copy(data, f"file.{_extension(key)}") as path:
        return read(path)


def torch_video(key: str, data: bytes) -> Any:
    """Decode video fields with ``torchvision.io.read_video``: ``(video, audio, info)``."""
    if _extension(key) not in VIDEO_EXTENSIONS:
        return None
    try:
        import torchvision.io
    except ImportError as exn:
        raise SpecError(
            f"decoding .{_extension(key)} video needs torchvision: pip install torchvision ({exn})"
        ) from None
    return _via_file(key, data, lambda path: torchvision.io.read_video(path, pts_unit="sec"))


def torch_audio(key: str, data: bytes) -> Any:
    """Decode audio fields with ``torchaudio.load``: ``(waveform, sample_rate)``."""
    if _extension(key) not in AUDIO_EXTENSIONS:
        return None
    try:
        import torchaudio
    except ImportError as exn:
        message = f"decoding .{_extension(key)} audio needs torchaudio: pip install torchaudio ({exn})"
        raise SpecError(message) from None
    return _via_file(key, data, torchaudio.load)
