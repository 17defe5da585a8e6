"""JPEG decoding by libjpeg-turbo directly (the ``jpeg`` extra: simplejpeg) when installed, else by Pillow.

Pillow decodes JPEGs with libjpeg-turbo too, but holds the GIL for part of
each decode and goes through its own image object; simplejpeg calls
libjpeg-turbo straight into a numpy array with the GIL released, which makes
one thread faster and two threads nearly twice as fast
(``benchmarks/bench_local.py --rows decode``).  The pixels are Pillow's: the same
libjpeg-turbo settings (accurate DCT, smooth upsampling) give identical RGB
and greyscale-JPEG results, and ``L`` from a colour JPEG is converted with
Pillow's own integer formula (tests/core/fieldcodecs/test_jpeg.py compares
both paths).

The fast path is taken for baseline and progressive JPEGs in YCbCr or
greyscale; anything else (CMYK, a recoverable libjpeg warning such as a
truncated file, more pixels than Pillow's decompression-bomb limit, no
simplejpeg installed) goes to Pillow, which decodes it or
raises its own error, exactly as without the extra.  ``WDS_JPEG=pillow`` in
the environment, or :func:`set_jpeg_decoder`, turns the fast path off.

:func:`decode_jpeg_region` decodes only a region: the rows above it are
entropy-decoded and skipped, those below never read, and the columns outside
it not transformed (libjpeg-turbo's ``jpeg_skip_scanlines`` and
``jpeg_crop_scanline``, which neither Pillow nor simplejpeg expose).  It is a
small C module, ``jpegregion``, which ``pip install`` builds when it finds a C
compiler and libjpeg-turbo's headers (Debian: ``libjpeg62-turbo-dev``) and
leaves out otherwise; :func:`region_decoding` says whether it is there.  Its
pixels are those of the whole image decoded the same way (the region is
widened past the decoder's block edges and cut back, so smoothing at its
borders sees the same neighbours).  ``WDS_JPEG=pillow`` turns it off too.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from .._native import load
from ..errors import SpecError, install_hint
from .bounded import check_pixels

__all__ = [
    "beyond_pillow_limit",
    "decode_jpeg",
    "decode_jpeg_region",
    "is_jpeg",
    "jpeg_decoder",
    "jpeg_size",
    "reduced_size",
    "reduction",
    "region_decoding",
    "scaled_size",
    "set_jpeg_decoder",
]

_CHOICES = ("auto", "pillow", "simplejpeg")
_choice: list[str] = []  # the decoder asked for, once read from the environment


def is_jpeg(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` starts like a JPEG file (SOI marker and the next marker's 0xFF)."""
    return bytes(data[:3]) == b"\xff\xd8\xff"


@functools.cache
def _simplejpeg() -> Any:
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


def set_jpeg_decoder(name: str) -> None:
    """``"auto"`` (simplejpeg when installed), ``"pillow"`` or ``"simplejpeg"`` (an error if missing).

    Applies to this process; DataLoader and Loader workers started with
    ``fork`` inherit it, others read ``WDS_JPEG`` from the environment.
    """
    if name not in _CHOICES:
        raise SpecError(f"JPEG decoder must be one of {', '.join(_CHOICES)}, got {name!r}")
    if name == "simplejpeg" and _simplejpeg() is None:
        raise SpecError(f"the simplejpeg decoder is not installed: {install_hint('simplejpeg', 'jpeg')}")
    _choice[:] = [name]


def _chosen() -> str:
    if not _choice:
        set_jpeg_decoder(os.environ.get("WDS_JPEG", "auto").strip().lower() or "auto")
    return _choice[0]


def jpeg_decoder() -> str:
    """The decoder JPEG fields get: ``"simplejpeg"`` or ``"pillow"``."""
    if _chosen() == "pillow" or _simplejpeg() is None:
        return "pillow"
    return "simplejpeg"


@functools.cache
def _region_module() -> Any:
    return load("jpegregion")  # compiled by setup.py when it can be (_native/jpegregion.pyi: its signatures)


def region_decoding() -> bool:
    """Whether :func:`decode_jpeg_region` decodes here: the compiled helper is built and the decoder is not
    set to ``pillow``."""
    return _region_module() is not None and _chosen() != "pillow"


def jpeg_size(data: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """``(height, width)`` from the header of a JPEG that :func:`decode_jpeg_region` takes, else None: not a
    JPEG, a corrupt header, CMYK or RGB-coded, past Pillow's decompression-bomb limit (Pillow's policy applies
    then), or no region decoding here."""
    if not region_decoding() or not is_jpeg(data):
        return None
    try:
        height, width, colorspace = _region_module().header(data)
    except ValueError:
        return None
    if colorspace == "other" or beyond_pillow_limit(height, width):
        return None
    return height, width


_MARGIN = 16  # pixels decoded past the region's right edge: wider than a block column at any scale


def decode_jpeg_region(
    data: bytes | bytearray | memoryview, size: tuple[int, int], divisor: int, bounds: tuple[int, int, int, int]
) -> np.ndarray | None:
    """Rows ``top:bottom`` and columns ``left:right`` (``bounds``) of a JPEG of ``size`` (from
    :func:`jpeg_size`) reduced by ``1/divisor`` while decoding, as an RGB uint8 array (a view of a fresh buffer).

    None when the decoder refuses the data (corrupt or truncated, a libjpeg warning included): decode it whole
    then, which says what is wrong.  The region's pixels are held to the decode limits first.
    """
    top, bottom, left, right = bounds
    height, width = scaled_size(size[0], size[1], divisor)
    if not (0 <= top < bottom <= height and 0 <= left < right <= width):
        raise ValueError(f"region {bounds} is not inside a {height}x{width} image")
    check_pixels(width, bottom - top, 3, "JPEG")  # the buffer holds whole rows
    buffer = np.empty((bottom - top) * width * 3, np.uint8)
    try:
        got, offset = _region_module().decode_region(
            data, divisor, top, bottom, max(0, left - 1), min(width, right + _MARGIN), buffer
        )
    except ValueError:
        return None
    rows = buffer[: (bottom - top) * got * 3].reshape(bottom - top, got, 3)
    return rows[:, left - offset : right - offset]


def decode_jpeg(
    data: bytes | bytearray | memoryview,
    mode: str,
    *,
    min_height: int = 0,
    min_width: int = 0,
    value_bytes: int = 1,
) -> np.ndarray | None:
    """The pixels of a JPEG as a fresh uint8 array in ``mode`` (``L``: HxW, ``RGB``/``RGBA``: HxWxC).

    With ``min_height``/``min_width`` the image is reduced while decoding (by
    1/2, 1/4 or 1/8 in the DCT domain) as far as keeps it at least that size.
    ``None`` when the fast path does not apply (see the module doc): the caller
    decodes with Pillow then.  The size the header gives is held to the decode
    limits first (:func:`~.limits.check_pixels`), counting ``value_bytes`` a
    channel for what the caller turns the pixels into.
    """
    turbo = _simplejpeg() if jpeg_decoder() == "simplejpeg" else None
    if turbo is None or not is_jpeg(data):
        return None
    try:
        height, width, colorspace, _ = turbo.decode_jpeg_header(data)
    except ValueError:
        return None  # corrupt or truncated: Pillow says what is wrong
    out_h, out_w = reduced_size(height, width, min_height, min_width)
    check_pixels(out_w, out_h, len(mode), "JPEG", value_bytes)
    try:
        if colorspace not in ("YCbCr", "Gray") or beyond_pillow_limit(height, width):
            return None  # CMYK, YCCK and RGB-coded JPEGs: Pillow's conversions differ; huge ones: Pillow's policy
        # only the scales Pillow's draft() takes (1/2, 1/4, 1/8): libjpeg-turbo's others (7/8, 3/4...) give other
        # pixels and are slower than the full size
        scale = {"min_height": out_h, "min_width": out_w} if (out_h, out_w) != (height, width) else {}
        if mode == "L":
            if colorspace == "Gray":
                return turbo.decode_jpeg(data, colorspace="GRAY", **scale)[:, :, 0]
            return _pillow_luma(turbo.decode_jpeg(data, colorspace="RGB", **scale))
        if mode in ("RGB", "RGBA"):
            return turbo.decode_jpeg(data, colorspace=mode, **scale)
    except ValueError:
        return None  # corrupt or truncated: Pillow says what is wrong
    return None


def reduction(height: int, width: int, min_height: int, min_width: int) -> int:
    """The divisor (8, 4, 2 or 1) that reduces a JPEG while decoding as far as keeps it at least
    ``min_height x min_width``; 1 when neither is given."""
    if min_height <= 0 and min_width <= 0:
        return 1
    for divisor in (8, 4, 2):
        h, w = scaled_size(height, width, divisor)
        if h >= min_height and w >= min_width:
            return divisor
    return 1


def scaled_size(height: int, width: int, divisor: int) -> tuple[int, int]:
    """The size of a ``height x width`` JPEG decoded reduced by ``1/divisor`` (libjpeg rounds up)."""
    return -(-height // divisor), -(-width // divisor)


def reduced_size(height: int, width: int, min_height: int, min_width: int) -> tuple[int, int]:
    """The size of a JPEG decoded reduced as far as keeps it at least ``min_height x min_width`` (at most: the
    decoder may pick a finer scale, never a larger result); full size when neither is given."""
    return scaled_size(height, width, reduction(height, width, min_height, min_width))


def beyond_pillow_limit(height: int, width: int) -> bool:
    """Whether Pillow would warn about (or refuse) an image this large as a possible decompression bomb.

    Such images go to Pillow, so its ``MAX_IMAGE_PIXELS`` policy applies on
    both paths: a warning above the limit, a ``DecompressionBombError`` above
    twice the limit.
    """
    limit = _pil_image().MAX_IMAGE_PIXELS
    return limit is not None and height * width > limit


@functools.cache
def _pil_image() -> Any:
    import PIL.Image  # once: an import statement per image takes the import machinery's locks in every thread

    return PIL.Image


def _pillow_luma(rgb: np.ndarray) -> np.ndarray:
    """Pillow's RGB -> L: ``(R*19595 + G*38470 + B*7471 + 0x8000) >> 16`` (ITU-R 601-2 in 16-bit fixed point)."""
    weights = np.array([19595, 38470, 7471], dtype=np.uint32)
    luma = rgb.astype(np.uint32) @ weights
    luma += 0x8000
    luma >>= 16
    return luma.astype(np.uint8)
