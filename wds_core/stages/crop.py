"""Training-size images: decode, crop, resize and flip in one step, at the smallest JPEG scale that suffices.

``.crop_images(224, flip=0.5)`` (or :func:`crop_images`) replaces a sample's image field by a ``224x224`` uint8
array cut as torchvision's ``RandomResizedCrop`` cuts, with no full-size image in between: the box is drawn from
the header's size, a JPEG is decoded at the smallest DCT scale that covers it (only the box's rows and columns
with the compiled region decoder), and the box is cut and resized in one call (OpenCV's bilinear with the ``cv``
extra, else Pillow's antialiased one; ``interpolation="pillow"`` for torchvision's PIL pixels).
``policy="center"`` is the evaluation transform, ``"shorter"`` resizes the shorter side only; ``layout``,
``mean``/``std`` and ``spec`` shape the result.  Random choices are a function of (seed, epoch, stage, shard,
key), so a resumed run makes the same crops; the stage keeps no state.  ``device="cuda"`` hands the bytes on with
the plan (:mod:`.devicecrop`) for ``wds_torch.to_device`` to decode on the device.  docs/guides/decoding.md says
how the two resizes' pixels differ.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import multiprocessing
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DecodingError, SpecError, install_hint
from ..fieldcodecs.bounded import check_pixels
from ..fieldcodecs.images import image_spec
from ..fieldcodecs.jpeg import (
    decode_jpeg,
    decode_jpeg_region,
    jpeg_decoder,
    jpeg_size,
    reduction,
    scaled_size,
)
from ..rng import Rng, derive_seed
from ..state import RunContext
from .devicecrop import Finish, HostShare, PlannedCrop, reduced_on_host

__all__ = ["ImageCrop", "SlowPathWarning", "center_crop_box", "decode_at_scale", "random_resized_crop_box", "slow_path"]

Box = tuple[int, int, int, int]  # top, left, height, width in the stored image's pixels
_POLICIES = ("random-resized", "center", "shorter")
_INTERPOLATIONS = ("auto", "pillow", "opencv")


@functools.cache
def _opencv() -> Any:
    """OpenCV (the ``cv`` extra), one thread per call (the loader's threads and workers are the parallelism), or
    None when it is not installed."""
    try:
        import cv2
    except ImportError:
        return None
    cv2.setNumThreads(1)
    return cv2


class SlowPathWarning(UserWarning):
    """``crop_images`` runs without the packages that make it fast."""


def slow_path() -> list[str]:
    """What ``crop_images`` lacks here to run at full speed: the packages not installed (none: the fast path)."""
    missing = []
    if _simplejpeg_missing():
        missing.append("simplejpeg (JPEG decoding: Pillow's is slower)")
    if _opencv() is None:
        missing.append("opencv-python-headless (resizing: Pillow's antialiased resize is ~7x slower)")
    return missing


def _simplejpeg_missing() -> bool:
    return jpeg_decoder() == "pillow" and os.environ.get("WDS_JPEG", "auto").strip().lower() in ("", "auto")


_warned: list[bool] = []  # the slow path said once a process


def _warn_once_if_slow() -> None:
    missing = slow_path()
    if missing and not _warned and multiprocessing.parent_process() is None:
        _warned.append(True)
        warnings.warn(
            f"crop_images runs on the slow path here, without {' and '.join(missing)}: "
            f"{install_hint('simplejpeg opencv-python-headless', 'jpeg,cv')}; `wds doctor` says what is installed",
            SlowPathWarning,
            stacklevel=4,
        )


class Uniform:
    """Random numbers for one sample: ``uniform(a, b)`` and ``integer(n)`` in ``[0, n)``."""

    def __init__(self, seed: int) -> None:
        self.rng = Rng(seed)

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * (self.rng.next64() >> 11) * (1.0 / (1 << 53))

    def integer(self, n: int) -> int:
        return self.rng.below(n)


def random_resized_crop_box(height: int, width: int, scale: Sequence[float], ratio: Sequence[float], rand: Any) -> Box:
    """The box torchvision's ``RandomResizedCrop.get_params`` picks, given the same random numbers.

    Up to ten tries: an area fraction uniform in ``scale`` and an aspect ratio
    log-uniform in ``ratio``; the first box that fits is placed uniformly.
    Otherwise the largest centred box whose ratio is clamped into ``ratio``.
    ``rand`` gives ``uniform(a, b)`` and ``integer(n)``.
    """
    area = height * width
    low, high = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rand.uniform(scale[0], scale[1])
        aspect = math.exp(rand.uniform(low, high))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rand.integer(height - h + 1), rand.integer(width - w + 1), h, w
    shape = width / height
    if shape < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif shape > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def center_crop_box(height: int, width: int, out_h: int, out_w: int, resize: int) -> tuple[float, ...]:
    """The stored-image box that resizing the shorter side to ``resize`` and cutting the centre keeps.

    Returned as floats ``(top, left, height, width)``: torchvision rounds the
    resized size and the crop offset; the box carries those roundings back.
    """
    if height <= width:
        rh, rw = resize, int(resize * width / height)
    else:
        rh, rw = int(resize * height / width), resize
    top, left = int(round((rh - out_h) / 2.0)), int(round((rw - out_w) / 2.0))
    sy, sx = height / rh, width / rw
    return top * sy, left * sx, out_h * sy, out_w * sx


def decode_at_scale(data: bytes, min_height: int, min_width: int, opened: Any = None) -> Any:
    """A PIL image of ``data``, reduced in the DCT domain as far as keeps it at least ``min_height x min_width``.

    JPEGs only (libjpeg-turbo scales by 1/2, 1/4 or 1/8 while decoding); other
    formats decode at full size.  Colour is RGB.  ``opened`` is ``data`` already
    opened by ``PIL.Image.open`` (headers read, pixels not), to read it once.
    """
    import PIL.Image

    pixels = decode_jpeg(data, "RGB", min_height=min_height, min_width=min_width)
    if pixels is not None:
        height, width = pixels.shape[:2]
        # a view of the array, not a copy: the resize that follows reads it once
        return PIL.Image.frombuffer("RGB", (width, height), pixels, "raw", "RGB", 0, 1)
    img = PIL.Image.open(io.BytesIO(data)) if opened is None else opened
    if img.format == "JPEG":
        img.draft("RGB", (min_width, min_height))  # picks a scale keeping the image at least this size
    check_pixels(img.width, img.height, 4, img.format)  # Pillow's buffer, before it is made
    img.load()
    return img if img.mode == "RGB" else img.convert("RGB")


def _stored_size(data: bytes, compiled: bool) -> tuple[tuple[int, int], Any]:
    """``(height, width)`` of an encoded image from its header, and the image Pillow opened to read it (``None``
    when the compiled header reader, tried when ``compiled``, gave it): Pillow reads the header only, and makes its
    decompression-bomb check."""
    size = jpeg_size(data) if compiled else None
    if size is not None:
        return size, None
    import PIL.Image

    opened = PIL.Image.open(io.BytesIO(data))
    return opened.size[::-1], opened


def _bounds(box: tuple[float, ...], shape: Sequence[int], size: Sequence[int]) -> tuple[int, int, int, int]:
    """``box`` (top, left, height, width in the stored image of ``size``) in whole pixels of the image decoded at
    ``shape``: ``(top, bottom, left, right)``, at least one pixel."""
    sy, sx = shape[0] / size[0], shape[1] / size[1]
    top, left, h, w = box
    y0, x0 = min(int(round(top * sy)), shape[0] - 1), min(int(round(left * sx)), shape[1] - 1)
    y1, x1 = max(int(round((top + h) * sy)), y0 + 1), max(int(round((left + w) * sx)), x0 + 1)
    return y0, min(y1, shape[0]), x0, min(x1, shape[1])


def _cut_out(pixels: np.ndarray, box: tuple[float, ...], size: Sequence[int]) -> np.ndarray:
    """The box of an image stored at ``size`` and decoded as ``pixels``, as a view."""
    top, bottom, left, right = _bounds(box, pixels.shape[:2], size)
    return pixels[top:bottom, left:right]


def _resized(opencv: Any, crop: np.ndarray, out_size: tuple[int, int], flip: bool) -> np.ndarray:
    """OpenCV's bilinear resize of the cut, averaging instead when it shrinks by more than 2x (no DCT scale
    left, or not a JPEG: linear would alias); flipped as a view."""
    out_h, out_w = out_size
    far = crop.shape[0] > 2 * out_h or crop.shape[1] > 2 * out_w
    out = opencv.resize(crop, (out_w, out_h), interpolation=opencv.INTER_AREA if far else opencv.INTER_LINEAR)
    return out[:, ::-1] if flip else out


def _pillow_resized(
    img: Any, box: tuple[float, ...], sy: float, sx: float, out_size: tuple[int, int], flip: bool
) -> Any:
    """Pillow's resize of the box (fractional, in the stored image's pixels) of ``img`` decoded at ``sy x sx``."""
    import PIL.Image

    top, left, h, w = box
    region = (left * sx, top * sy, (left + w) * sx, (top + h) * sy)
    out = img.resize(out_size[::-1], PIL.Image.Resampling.BILINEAR, box=region)
    return out.transpose(PIL.Image.Transpose.FLIP_LEFT_RIGHT) if flip else out


@dataclass(frozen=True)
class ImageCrop:
    """How :func:`crop_images` cuts each image (see the module doc); picklable, no state."""

    size: tuple[int, int]
    policy: str = "random-resized"
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    resize: int | None = None
    flip: float = 0.0
    fields: tuple[str, ...] = ("jpg", "jpeg", "png", "webp")
    layout: str = "hwc"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    spec: str = "rgb8"
    interpolation: str = "auto"
    device: str | None = None
    split: float = 0.0
    host_share: HostShare | None = dataclasses.field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.interpolation == "auto":
            _warn_once_if_slow()
        if self.interpolation not in _INTERPOLATIONS:
            raise SpecError(f"interpolation must be one of {', '.join(_INTERPOLATIONS)}, got {self.interpolation!r}")
        if self.interpolation != "pillow":
            opencv = _opencv()  # imported now, not on the first image (a DataLoader worker forked later has it)
            if opencv is None and self.interpolation == "opencv":
                raise SpecError(f"interpolation='opencv' needs OpenCV: {install_hint('opencv-python-headless', 'cv')}")
        if self.policy not in _POLICIES:
            raise SpecError(f"crop policy must be one of {', '.join(_POLICIES)}, got {self.policy!r}")
        if self.layout not in ("hwc", "chw"):
            raise SpecError(f"layout must be 'hwc' or 'chw', got {self.layout!r}")
        if not 0.0 <= self.flip <= 1.0:
            raise SpecError(f"flip is a probability, got {self.flip!r}")
        if (self.mean is None) != (self.std is None):
            raise SpecError("give mean and std together")
        image_spec(self.spec)  # known (or its package loads), else a SpecError now
        if self.spec.lower() != "rgb8" and (self.layout != "hwc" or self.mean is not None):
            raise SpecError(f"layout and mean/std apply to the default spec 'rgb8', not to {self.spec!r}")
        if self.device is not None:
            if not isinstance(self.device, str) or not self.device:
                raise SpecError(f"device is a name such as 'cuda', 'cuda:1' or 'cpu', got {self.device!r}")
            if self.spec.lower() != "rgb8":
                raise SpecError(f"crop_images(device=...) gives RGB arrays: spec={self.spec!r} is not available there")
            if self.policy == "shorter":
                raise SpecError("crop_images(device=...) batches images of one size: use policy 'random-resized' "
                                "or 'center'")  # fmt: skip
            object.__setattr__(self, "host_share", HostShare(self.split))  # what to_device(split=) turns
        elif self.split:
            raise SpecError("split= is the share of each batch cut on the host, beside the device: give device= too")

    def bind(self, ctx: RunContext) -> BoundCrop:
        """The cropper for one run: its random choices come from ``ctx``'s seed and epoch."""
        return BoundCrop(self, derive_seed("crop_images", ctx.seed, ctx.epoch, ctx.stage))

    def plan(self, height: int, width: int, rand: Uniform) -> tuple[tuple[float, ...], tuple[int, int], bool]:
        """``(box, output (h, w), flip)`` for a stored image of ``height x width``."""
        out_h, out_w = self.size
        box: tuple[float, ...]
        if self.policy == "random-resized":
            box = random_resized_crop_box(height, width, self.scale, self.ratio, rand)
        elif self.policy == "center":
            box = center_crop_box(height, width, out_h, out_w, self.resize or int(round(min(out_h, out_w) / 0.875)))
        else:
            short = min(out_h, out_w)
            out_h, out_w = (
                (short, int(short * width / height)) if height <= width else (int(short * height / width), short)
            )
            box = (0.0, 0.0, float(height), float(width))
        flip = self.flip > 0 and rand.uniform(0.0, 1.0) < self.flip
        return box, (out_h, out_w), flip

    def cut(self, data: Any, rand: Uniform) -> np.ndarray:
        """One image (encoded bytes, or an already decoded PIL image or HxWxC uint8 array) cut as planned."""
        return self._finish(self._cut(data, rand))  # type: ignore[no-any-return]

    def _cut(self, data: Any, rand: Uniform) -> Any:
        """The cut before :meth:`_finish`: an RGB PIL image or HxWx3 uint8 array of the output's size."""
        import PIL.Image

        opencv = _opencv() if self.interpolation != "pillow" else None
        if not isinstance(data, (bytes, bytearray, memoryview)):
            img = data if isinstance(data, PIL.Image.Image) else PIL.Image.fromarray(np.asarray(data))
            img = img if img.mode == "RGB" else img.convert("RGB")
            box, out_size, flip = self.plan(img.height, img.width, rand)
            if opencv is not None:
                crop = _cut_out(np.asarray(img), box, (img.height, img.width))
                return _resized(opencv, crop, out_size, flip)
            return _pillow_resized(img, box, 1.0, 1.0, out_size, flip)
        data = bytes(data)
        size, opened = _stored_size(data, compiled=opencv is not None)  # the region decoder takes jpeg_size's
        height, width = size
        box, (out_h, out_w), flip = self.plan(height, width, rand)
        need_h = min(math.ceil(out_h * height / box[2]), height)
        need_w = min(math.ceil(out_w * width / box[3]), width)
        if opencv is not None:
            region = None
            if opened is None:  # only the box's rows and columns, reduced as far as the output allows
                divisor = reduction(height, width, need_h, need_w)
                scaled = scaled_size(height, width, divisor)
                region = decode_jpeg_region(data, size, divisor, _bounds(box, scaled, size))
            if region is None:
                pixels = decode_jpeg(data, "RGB", min_height=need_h, min_width=need_w)
                if pixels is None:
                    pixels = np.asarray(decode_at_scale(data, need_h, need_w, opened))
                region = _cut_out(pixels, box, size)
            return _resized(opencv, region, (out_h, out_w), flip)
        img = decode_at_scale(data, need_h, need_w, opened)
        return _pillow_resized(img, box, img.height / height, img.width / width, (out_h, out_w), flip)

    def planned(
        self, data: Any, rand: Uniform, key: str | None = None, url: str | None = None, host: bool = False
    ) -> PlannedCrop:
        """The plan for one encoded image, cut later on :attr:`device`: its size from its header (nothing decoded;
        a header that claims more pixels than a field may hold is refused here), the box and flip :meth:`plan`
        draws, the bytes; with ``host``, the image cut here instead (the same box and flip), its pixels handed on
        for the device to finish with the rest of its batch."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise DecodingError(f"crop_images(device=...) takes encoded images, got {type(data).__name__}")
        token = None if self.host_share is None else self.host_share.token
        finish = Finish(str(self.device), self.layout, self.mean, self.std, token)
        if host:
            pixels = np.ascontiguousarray(np.asarray(self._cut(data, rand)))
            h, w = pixels.shape[:2]
            whole = (0.0, 0.0, float(h), float(w))
            return PlannedCrop(b"", (h, w), whole, (h, w), False, finish, key, url, pixels=pixels)
        data = bytes(data)
        size, opened = _stored_size(data, compiled=True)
        if opened is not None:
            opened.close()
        height, width = size
        check_pixels(width, height, 3, "image")
        box, out, flip = self.plan(height, width, rand)
        top, left, h, w = (float(v) for v in box)
        reduced = reduced_on_host(data, height, width, box, out)
        return PlannedCrop(data, (height, width), (top, left, h, w), out, flip, finish, key, url, reduced)

    def _finish(self, out: Any) -> Any:
        """The cut image (PIL or HxWx3 uint8 array) as ``spec``, ``layout`` and ``mean``/``std`` say."""
        import PIL.Image

        if self.spec.lower() != "rgb8" and isinstance(out, np.ndarray):
            out = PIL.Image.fromarray(np.ascontiguousarray(out))
        spec = image_spec(self.spec)
        if spec.mode != "RGB":
            out = out.convert(spec.mode)
        if self.spec.lower() != "rgb8":
            return spec.convert(np.array(out) if spec.array else out)  # "pil", "l8", "torchrgb8"...
        array = np.asarray(out)
        if self.mean is not None and self.std is not None:
            scaled = array.astype(np.float32)
            scaled *= 1.0 / 255.0
            scaled -= np.asarray(self.mean, np.float32)
            scaled /= np.asarray(self.std, np.float32)
            array = scaled
        if self.layout == "chw":
            return np.ascontiguousarray(array.transpose(2, 0, 1))
        return array if array.flags.writeable and array.flags.c_contiguous else array.copy()


class BoundCrop:
    """An :class:`ImageCrop` for one run: ``decode(sample)`` cuts the sample's first image field."""

    def __init__(self, crop: ImageCrop, seed: int) -> None:
        self.crop, self.seed = crop, seed

    def decode(self, sample: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(sample, dict):
            raise DecodingError(f"crop_images expects dict samples, got {type(sample).__name__}")
        field = next((f for f in self.crop.fields if f in sample), None)
        if field is None:
            return sample
        rand = Uniform(derive_seed(self.seed, sample.get("__url__"), sample.get("__key__")))
        try:
            if self.crop.device is not None:
                key, url = sample.get("__key__"), sample.get("__url__")
                share = self.crop.host_share
                host = share is not None and share.takes(url, key)
                value: Any = self.crop.planned(sample[field], rand, key, url, host)
            else:
                value = self.crop.cut(sample[field], rand)
        except Exception as exn:
            message = f"cannot crop image field {field!r}: {type(exn).__name__}: {exn}"
            raise DecodingError.in_sample(message, sample, field) from exn
        result = dict(sample)
        result[field] = value
        return result


def image_crop(
    size: int | Sequence[int],
    policy: str = "random-resized",
    *,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    resize: int | None = None,
    flip: float = 0.0,
    fields: str | Sequence[str] = "jpg;jpeg;png;webp",
    layout: str = "hwc",
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    spec: str = "rgb8",
    interpolation: str = "auto",
    device: str | None = None,
    split: float = 0.0,
) -> ImageCrop:
    """An :class:`ImageCrop` from friendly arguments (``size`` an int or ``(h, w)``; ``fields`` a ``;`` list)."""
    pair = (int(size), int(size)) if isinstance(size, (int, np.integer)) else (int(size[0]), int(size[1]))
    names = fields.split(";") if isinstance(fields, str) else list(fields)
    return ImageCrop(
        size=pair,
        policy=policy,
        scale=(float(scale[0]), float(scale[1])),
        ratio=(float(ratio[0]), float(ratio[1])),
        resize=resize,
        flip=float(flip),
        fields=tuple(n.strip().lower().lstrip(".") for n in names if n.strip()),
        layout=layout,
        mean=None if mean is None else tuple(float(m) for m in mean),
        std=None if std is None else tuple(float(s) for s in std),
        spec=spec,
        interpolation=interpolation,
        device=device,
        split=float(split),
    )
