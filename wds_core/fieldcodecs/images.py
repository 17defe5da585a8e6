"""Images: the decode spec table (``"rgb8"``, ``"pil"``...) and the image encoders.

A spec names a Pillow mode and a converter from the decoded (and converted)
PIL image to what the user gets.  The table is open: an adapter registers its
own specs (``wds_torch`` adds ``torchrgb8`` and friends) with
:func:`register_image_spec`; a spec asked for before its package was imported
is found through the ``wds.codecs`` entry points (:mod:`.plugins`), so the
core itself never imports a framework.

Pillow is imported on first use.  Decoding keeps to one copy of the pixels
where it can: no conversion when the file is already in the wanted mode.
JPEGs go through libjpeg-turbo directly when the ``jpeg`` extra is installed
(:mod:`.jpeg`), with the same pixels as Pillow's.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SpecError, install_hint
from .bounded import charge, check_pixels
from .jpeg import decode_jpeg
from .plugins import load_provider

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageHandler",
    "ImageSpec",
    "encode_image",
    "image_spec",
    "imagehandler",
    "register_image_spec",
]

# Extensions of the still-image formats Pillow reads (video containers such as mpg are left out).
IMAGE_EXTENSIONS = frozenset(
    "apng avif blp bmp bw dds dib emf eps gif icb icns ico iim im j2c j2k jfif jp2 jpc jpe jpeg jpf jpg jpx "
    "msp pbm pcd pcx pgm png pnm ppm psd pxr qoi ras rgb rgba sgi tga tif tiff vda vst webp wmf xbm xpm".split()
)


def _pil(img: Any) -> Any:
    return img


def _uint8(array: np.ndarray) -> np.ndarray:
    return array


def _float(array: np.ndarray) -> np.ndarray:
    out = array.astype(np.float32)
    out /= 255.0
    return out


@dataclass(frozen=True)
class ImageSpec:
    """``mode`` is the Pillow mode to convert to; ``convert`` maps the decoded image to the result.

    ``convert`` receives a PIL image, or with ``array=True`` a fresh, writable
    uint8 array (HxW for ``L``, HxWxC otherwise).  ``value_bytes`` is what one
    channel of one pixel takes in the result (4 for float32), which the decode
    limits count before decoding.
    """

    mode: str
    convert: Callable[[Any], Any]
    array: bool = False
    value_bytes: int = 1


# spec name (lower case) -> ImageSpec, added to by register_image_spec.
IMAGE_SPECS: dict[str, ImageSpec] = {
    "pil": ImageSpec("RGB", _pil),
    "pilrgb": ImageSpec("RGB", _pil),
    "pill": ImageSpec("L", _pil),
    "pilrgba": ImageSpec("RGBA", _pil),
    "l8": ImageSpec("L", _uint8, array=True),
    "rgb8": ImageSpec("RGB", _uint8, array=True),
    "rgba8": ImageSpec("RGBA", _uint8, array=True),
    "l": ImageSpec("L", _float, array=True, value_bytes=4),
    "rgb": ImageSpec("RGB", _float, array=True, value_bytes=4),
    "rgba": ImageSpec("RGBA", _float, array=True, value_bytes=4),
}


def register_image_spec(name: str, spec: ImageSpec) -> None:
    """Make ``decode(name)`` available; names are case-insensitive."""
    if spec.mode not in ("L", "RGB", "RGBA"):
        raise SpecError(f"image spec mode must be L, RGB or RGBA, got {spec.mode!r}")
    IMAGE_SPECS[name.lower()] = spec


def image_spec(name: str) -> ImageSpec:
    """The spec registered under ``name`` (case-insensitive), or a clear error."""
    key = name.lower()
    if key in IMAGE_SPECS:
        return IMAGE_SPECS[key]
    claimed, why = load_provider("spec", key)
    hint = ""
    if key.startswith("torch") and (why or not claimed):
        hint = f"; torch* specs come with the PyTorch adapter: {install_hint('torch', 'torch')}"
    if claimed and why and key not in IMAGE_SPECS:
        raise SpecError(f"image spec {name!r} comes with a package that does not load here ({why}){hint}")
    if key not in IMAGE_SPECS:
        raise SpecError(f"unknown image spec {name!r}; known specs: {', '.join(sorted(IMAGE_SPECS))}{hint}")
    return IMAGE_SPECS[key]


def _pillow_pixel_bytes(mode: str) -> int:
    """What Pillow keeps a pixel of ``mode`` in while decoding (multi-band modes in 4 bytes)."""
    if mode in ("1", "L", "P"):
        return 1
    return 2 if mode.startswith("I;16") else 4


def decode_image(data: bytes | bytearray | memoryview, spec: ImageSpec) -> Any:
    channels = len(spec.mode)
    if spec.array:
        # a JPEG, by libjpeg-turbo without the GIL, when installed (it checks the size from the header)
        pixels = decode_jpeg(data, spec.mode, value_bytes=spec.value_bytes)
        if pixels is not None:
            charge(pixels.nbytes * spec.value_bytes, "a JPEG image")
            return spec.convert(pixels)
    import PIL.Image

    with PIL.Image.open(io.BytesIO(data)) as opened:
        native = _pillow_pixel_bytes(opened.mode)
        if native > channels * spec.value_bytes:  # Pillow's own buffer is the larger one
            check_pixels(opened.width, opened.height, native, f"{opened.format} (as Pillow holds it)")
        result = check_pixels(opened.width, opened.height, channels, opened.format, spec.value_bytes)
        charge(result, f"a {opened.format} image")
        if not spec.array and opened.format == "JPEG":
            pixels = decode_jpeg(data, spec.mode)
            if pixels is not None:
                fast = PIL.Image.fromarray(pixels)  # L, RGB or RGBA by the array's shape
                fast.info = dict(opened.info)  # EXIF, ICC profile, dpi... as Pillow's own decode keeps them
                return spec.convert(fast)
        opened.load()
        img: PIL.Image.Image = opened
        if img.mode != spec.mode:
            img = img.convert(spec.mode)
        elif not spec.array:
            img = img.copy()  # detach from the closed file
        return spec.convert(np.array(img) if spec.array else img)


class ImageHandler:
    """A decoder handler for image fields: ``ImageHandler("rgb8")(".jpg", data)``.

    Returns ``None`` for fields whose last extension is not an image extension,
    so other handlers get their turn.
    """

    def __init__(self, imagespec: str, extensions: Any = IMAGE_EXTENSIONS) -> None:
        self.imagespec = imagespec.lower()
        self.spec = image_spec(imagespec)
        if isinstance(extensions, str):
            extensions = extensions.split()
        self.extensions = frozenset(e.lower().lstrip(".") for e in extensions)

    def __call__(self, key: str, data: bytes | bytearray | memoryview) -> Any:
        extension = key.rsplit(".", 1)[-1].lower()
        if extension not in self.extensions:
            return None
        return decode_image(data, self.spec)

    def __repr__(self) -> str:
        return f"ImageHandler({self.imagespec!r})"


def imagehandler(imagespec: str, extensions: Any = IMAGE_EXTENSIONS) -> ImageHandler:
    """webdataset's lowercase name for :class:`ImageHandler`."""
    return ImageHandler(imagespec, extensions)


# ---------------------------------------------------------------- encoding

_FORMATS = {
    "jpg": "JPEG",
    "jpeg": "JPEG",
    "jpe": "JPEG",
    "jfif": "JPEG",
    "img": "PPM",
    "image": "PPM",
    "png": "PNG",
    "ppm": "PPM",
    "pgm": "PPM",
    "pbm": "PPM",
    "pnm": "PPM",
    "tif": "TIFF",
    "tiff": "TIFF",
    "webp": "WEBP",
    "bmp": "BMP",
    "gif": "GIF",
}
IMAGE_ENCODE_EXTENSIONS = frozenset(_FORMATS)
JPEG_QUALITY = 95


def _to_pil(image: Any) -> Any:
    import PIL.Image

    if isinstance(image, PIL.Image.Image):
        return image
    array = np.asarray(image)
    if array.dtype.kind == "f":
        low, high = float(array.min(initial=0.0)), float(array.max(initial=0.0))
        if low < -0.001 or high > 1.001:
            raise ValueError(f"float images must hold values in [0, 1], got [{low:.4g}, {high:.4g}]")
        array = (np.clip(array, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    elif array.dtype != np.uint8:
        raise ValueError(f"images must be uint8 or float arrays in [0, 1], got dtype {array.dtype}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ValueError(f"images must be HxW, HxWx1, HxWx3 or HxWx4 arrays, got shape {array.shape}")
    return PIL.Image.fromarray(np.ascontiguousarray(array))


def encode_image(image: Any, extension: str) -> bytes:
    """``image`` (a PIL image, or a uint8 / [0, 1] float array) in the format ``extension`` names."""
    fmt = _FORMATS.get(extension.lower())
    if fmt is None:
        raise ValueError(f"cannot encode images as {extension!r}; known: {', '.join(sorted(_FORMATS))}")
    img = _to_pil(image)
    options: dict[str, Any] = {}
    if fmt == "JPEG":
        options["quality"] = JPEG_QUALITY
        if "A" in img.mode:
            raise ValueError(f"JPEG cannot store the alpha channel of a {img.mode} image; use png or drop the alpha")
        if img.mode not in ("L", "RGB", "CMYK"):
            img = img.convert("RGB")
    out = io.BytesIO()
    img.save(out, format=fmt, **options)
    return out.getvalue()
