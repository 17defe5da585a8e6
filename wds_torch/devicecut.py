"""A batch of planned crops decoded and cut on a device: :func:`decode_planned` and :func:`cut_planned`.

The batch comes from ``crop_images(..., device=...)`` (:class:`wds_core.stages.devicecrop.PlannedCrops`: the JPEGs'
bytes, their boxes and flips).  On CUDA the JPEGs are decoded at once by nvJPEG (``torchvision.io.decode_jpeg`` on
a list) or nvImageCodec (:func:`device_decoder`); anything the GPU decoder does not take is decoded on the host.
An image its plan reduces (a header that claims more than its bytes can hold, or a huge photo:
:mod:`wds_core.stages.devicecrop`) is decoded on the host at that scale and copied over.  The batch is decoded
and cut a part at a time, each part's decoded images, their canvas, the resampling matrices and the products
within :data:`CUT_BYTES`, decoded only when its turn comes and let go before the next: what a batch takes on the
device is bounded whatever its headers say.  With nvImageCodec each JPEG is decoded as its box's region alone
(:func:`_decodes_regions`).  The cut is two batched matrix products a part (:func:`_cut`), in float16 on a GPU
(its tensor cores; no float32 copy of the images), into the output allocated once.  Only
:func:`_decode_cuda` needs a GPU; ``device="cpu"`` runs the rest as the tests' twin.
:func:`wds_torch.device.to_device` calls these on the loader's batches.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from wds_core.errors import DecodingError, SpecError
from wds_core.stages.devicecrop import PlannedCrops

__all__ = ["CUT_BYTES", "cut_planned", "decode_planned", "device_decoder", "pin_planned"]


# ---------------------------------------------------------------- decoding


def decode_planned(
    crops: PlannedCrops, device: str | torch.device | None = None, which: range | None = None
) -> list[torch.Tensor]:
    """Each image of ``crops`` (those of ``which``) decoded on ``device`` as a 3 x H x W uint8 tensor (its stored
    size, or the reduced one its plan gives)."""
    where = torch.device(device or crops.finish.device)
    which = range(len(crops)) if which is None else which
    if where.type == "cuda":
        return _decode_cuda(crops, where, which)
    return [_decode_host(crops, i) for i in which]


def _decode_host(crops: PlannedCrops, i: int) -> torch.Tensor:
    """Image ``i`` decoded here by wds's decoder (libjpeg-turbo through simplejpeg, else Pillow), reduced in the DCT
    domain when its plan says so."""
    from wds_core.fieldcodecs import image_spec
    from wds_core.fieldcodecs.images import decode_image
    from wds_core.stages.crop import decode_at_scale

    least_h, least_w = (int(v) for v in crops.reduced[i])
    try:
        if least_h > 0 or least_w > 0:
            pixels = np.array(decode_at_scale(bytes(crops.image(i)), least_h, least_w))  # writable, small
        else:
            pixels = decode_image(crops.image(i), image_spec("rgb8"))
    except Exception as exn:
        raise DecodingError(f"cannot decode the image of {crops.where(i)}: {type(exn).__name__}: {exn}") from exn
    return torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1)


DECODERS = ("torchvision", "nvimgcodec", "nvimgcodec-hw")


def device_decoder() -> str:
    """The GPU JPEG decoder in use: ``WDS_DEVICE_DECODER`` (``torchvision``: nvJPEG through
    ``torchvision.io.decode_jpeg``, the default; ``nvimgcodec``: NVIDIA's nvImageCodec with its default backends,
    ``pip install nvidia-nvimgcodec-cu12``; ``nvimgcodec-hw``: its hardware backend first, the JPEG engines of
    A100/H100/H200, which leave the SMs to the model, and for what they refuse (or on a GPU without them) the
    default backends, then the host)."""
    choice = os.environ.get("WDS_DEVICE_DECODER", "torchvision")
    if choice not in DECODERS:
        raise SpecError(f"WDS_DEVICE_DECODER must be one of {', '.join(DECODERS)}, got {choice!r}")
    return choice


@functools.cache
def _nvimgcodec(index: int, hardware: bool = False) -> tuple[Any, Any]:
    """nvImageCodec's decoder for GPU ``index`` (its hardware backend alone with ``hardware``: ``None`` where it
    cannot be made, a GPU without JPEG engines), and its parameters: RGB, and no EXIF rotation (the CPU path does
    none, and the crops are planned on the stored size)."""
    from nvidia import nvimgcodec

    params = nvimgcodec.DecodeParams(
        apply_exif_orientation=False, color_spec=nvimgcodec.ColorSpec.SRGB, sample_format=nvimgcodec.SampleFormat.I_RGB
    )
    if not hardware:
        return nvimgcodec.Decoder(device_id=index), params
    try:
        engines = [nvimgcodec.Backend(nvimgcodec.BackendKind.HW_GPU_ONLY)]
        return nvimgcodec.Decoder(device_id=index, backends=engines), params
    except Exception:  # no such backend here: the default backends take every image
        return None, params


def _decode_cuda(
    crops: PlannedCrops, device: torch.device, which: range, regions: _Regions | None = None
) -> list[torch.Tensor]:
    """The GPU's part: the JPEGs of ``which`` decoded at once on the current stream (:func:`device_decoder`); what
    the GPU decoder does not take (PNG, WebP, a CMYK or broken JPEG) and what the plan reduces decoded here and
    copied over, so that an image neither decodes is named by the host decoder's error.  With ``regions``,
    nvImageCodec decodes only each JPEG's region (:class:`_Regions`, which notes those it did)."""
    jpegs: list[int] = (np.flatnonzero(crops.jpeg_rows(which)) + which.start).tolist()
    out: dict[int, Any] = {}
    choice = device_decoder() if jpegs else ""
    if choice.startswith("nvimgcodec"):
        stream = torch.cuda.current_stream(device).cuda_stream
        sources = _Sources(crops, regions)
        if choice == "nvimgcodec-hw":  # the JPEG engines first; what they refuse goes on to the default backends
            jpegs = _decode_nvimgcodec(_nvimgcodec(device.index or 0, True), sources, jpegs, device, stream, out)
        if jpegs:
            _decode_nvimgcodec(_nvimgcodec(device.index or 0), sources, jpegs, device, stream, out)
    elif jpegs:
        from torchvision.io import ImageReadMode, decode_jpeg

        host = torch.from_numpy(crops.data)
        if not host.is_pinned():
            host = host.pin_memory()
        every = torch.tensor_split(host, crops.offsets[1:-1].tolist())  # each image's bytes, viewed in one call
        views = [every[i] for i in jpegs]
        try:
            decoded = decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # one of them is refused: the others one at a time
            decoded = [_decode_one(decode_jpeg, view, ImageReadMode.RGB, device) for view in views]
        for i, image in zip(jpegs, decoded):
            out[i] = image
    return [out[i] if out.get(i) is not None else _decode_host(crops, i).to(device, non_blocking=True) for i in which]


def _decode_nvimgcodec(
    made: tuple[Any, Any], sources: _Sources, jpegs: list[int], device: torch.device, stream: int, out: dict[int, Any]
) -> list[int]:
    """The images ``jpegs`` decoded at once by an nvImageCodec decoder into ``out`` (each its region, where
    ``sources`` has one): those it refused (all of them when it is ``None`` or fails as a whole), for the next
    decoder to take, one by one."""
    decoder, params = made
    if decoder is None:
        return jpegs
    try:
        images = decoder.decode([sources.of(i) for i in jpegs], params=params, cuda_stream=stream)
    except Exception:
        return jpegs
    refused = []
    for i, image in zip(jpegs, images):
        if image is None:
            refused.append(i)
        else:  # HWC on the device, viewed without a copy
            out[i] = torch.as_tensor(image, device=device).permute(2, 0, 1)
            sources.decoded(i)
    return refused


class _Regions:
    """The region of each image of a batch its cut reads (``B x 4``: top, left, bottom, right in stored pixels;
    its box and two pixels around, within the image; ``whole`` where that is the whole image), and the images that
    were decoded as their region alone (``origins``: the region's top left; ``-1`` where decoded whole).  Only the
    JPEGs the device decodes are asked for by region (:meth:`PlannedCrops.jpeg_rows`: none their plan reduces)."""

    MARGIN = 2  # bilinear reads one pixel past a box; a region decoder may get its edge's pixel wrong (nvJPEG < 13.2)

    def __init__(self, crops: PlannedCrops) -> None:
        boxes = crops.boxes.reshape(-1, 4)
        sizes = crops.sizes.astype(np.int64).reshape(-1, 2)
        top = np.maximum(np.floor(boxes[:, 0]).astype(np.int64) - self.MARGIN, 0)
        left = np.maximum(np.floor(boxes[:, 1]).astype(np.int64) - self.MARGIN, 0)
        bottom = np.minimum(np.ceil(boxes[:, 0] + boxes[:, 2]).astype(np.int64) + self.MARGIN, sizes[:, 0])
        right = np.minimum(np.ceil(boxes[:, 1] + boxes[:, 3]).astype(np.int64) + self.MARGIN, sizes[:, 1])
        self.bounds = np.stack((top, left, bottom, right), 1)
        self.whole = (top == 0) & (left == 0) & (bottom == sizes[:, 0]) & (right == sizes[:, 1])
        self.origins = np.full((len(boxes), 2), -1, np.int64)


class _Sources:
    """What nvImageCodec decodes for each image: its bytes, or a code stream of its region (:class:`_Regions`,
    where this nvImageCodec has code streams and regions: 0.6 and later)."""

    def __init__(self, crops: PlannedCrops, regions: _Regions | None) -> None:
        self.crops, self.regions = crops, regions
        if regions is not None:
            from nvidia import nvimgcodec

            self.codec = nvimgcodec
            if not hasattr(nvimgcodec, "CodeStream") or not hasattr(nvimgcodec, "Region"):
                self.regions = None

    def of(self, i: int) -> Any:
        encoded = _encoded(self.crops, i)
        regions = self.regions
        if regions is None or regions.whole[i]:
            return encoded
        top, left, bottom, right = (int(v) for v in regions.bounds[i])
        region = self.codec.Region(top, left, bottom, right)
        return self.codec.CodeStream(encoded).get_sub_code_stream(region=region)

    def decoded(self, i: int) -> None:
        """Image ``i`` came back from nvImageCodec: as its region, where it was asked for one."""
        regions = self.regions
        if regions is not None and not regions.whole[i]:
            regions.origins[i] = regions.bounds[i, :2]


def pin_planned(crops: PlannedCrops) -> PlannedCrops:
    """``crops`` with its JPEG bytes and host-cut pixels copied to page-locked memory (numpy views of pinned
    tensors, which they keep alive): what DataLoader's pin-memory thread calls (``PlannedCrops.pin_memory``), so
    that the thread preparing batches for the device copies them over without pinning them itself."""
    pinned = copy.copy(crops)
    pinned.data, pinned.cut = _pinned(crops.data), _pinned(crops.cut)
    return pinned


def _pinned(array: Any) -> Any:
    tensor = torch.as_tensor(array)
    if tensor.numel() == 0 or tensor.is_pinned():
        return array
    return tensor.pin_memory().numpy()


def _encoded(crops: PlannedCrops, i: int) -> np.ndarray:
    return crops.data[int(crops.offsets[i]) : int(crops.offsets[i + 1])]


def _decode_one(decode_jpeg: Any, view: torch.Tensor, mode: Any, device: torch.device) -> torch.Tensor | None:
    try:
        return decode_jpeg(view, mode=mode, device=device)
    except RuntimeError:
        return None


# ---------------------------------------------------------------- cutting


def cut_planned(
    crops: PlannedCrops,
    device: str | torch.device | None = None,
    *,
    dtype: torch.dtype | None = None,
    channels_last: bool = False,
    images: list[torch.Tensor] | None = None,
) -> torch.Tensor:
    """The batch ``crops`` decoded (or ``images``, already decoded) and cut on ``device``: ``B x 3 x H x W``
    (``B x H x W x 3`` with ``layout="hwc"``), uint8, or float32 ``(x / 255 - mean) / std`` with ``mean``/``std``
    (``dtype`` overrides either).  A part of the batch at a time (:func:`_parts`): each part's images are decoded
    when its turn comes, cut (:func:`_cut`) into the output, allocated once, and let go before the next.  The
    images the workers cut already (``crops.host``) are copied over and finished with the others."""
    where = torch.device(device or crops.finish.device)
    given, out = _output(crops, where, dtype, channels_last)
    host = np.asarray(crops.host, bool)
    on_device = np.flatnonzero(~host)
    if len(on_device) == len(crops):
        for part, pixels in _cut(crops, where, images):
            out[part] = _finished(pixels, crops, out.dtype)
    elif len(on_device):
        chosen = None if images is None else [images[i] for i in on_device.tolist()]
        rows = torch.as_tensor(on_device, device=where)
        for part, pixels in _cut(crops.select(on_device), where, chosen):
            out[rows[part]] = _finished(pixels, crops, out.dtype)
    if host.any():
        cut = torch.as_tensor(crops.cut).to(where, non_blocking=True)  # K x H x W x 3 uint8, cut by the workers
        rows = torch.as_tensor(np.flatnonzero(host), device=where)
        out[rows] = _finished(cut.permute(0, 3, 1, 2).to(_compute_type(where)), crops, out.dtype)
    return given


def _output(
    crops: PlannedCrops, where: torch.device, dtype: torch.dtype | None, channels_last: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's output, allocated once in its final type, layout and memory format, and a ``B x 3 x H x W``
    view of it that the parts are written into."""
    finish = crops.finish
    if finish.mean is not None and finish.std is not None:
        dtype = dtype or torch.float32
    else:
        dtype = dtype or torch.uint8
    count, (rows, cols) = len(crops), crops.out
    if finish.layout == "hwc":
        given = torch.empty((count, rows, cols, 3), dtype=dtype, device=where)
        return given, given.permute(0, 3, 1, 2)
    form = torch.channels_last if channels_last else torch.contiguous_format
    given = torch.empty((count, 3, rows, cols), dtype=dtype, device=where, memory_format=form)
    return given, given


def _finished(pixels: torch.Tensor, crops: PlannedCrops, dtype: torch.dtype) -> torch.Tensor:
    """``pixels`` (``b x 3 x H x W``, 0-255) as the output wants them: ``(x / 255 - mean) / std`` (one
    multiply-add a channel), else rounded to uint8, in ``dtype``."""
    finish = crops.finish
    if dtype.is_floating_point and torch.finfo(dtype).bits > torch.finfo(pixels.dtype).bits:
        pixels = pixels.to(dtype)
    if finish.mean is not None and finish.std is not None:
        std = torch.tensor(finish.std, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
        mean = torch.tensor(finish.mean, dtype=pixels.dtype, device=pixels.device).view(1, 3, 1, 1)
        pixels = torch.addcmul(-mean / std, pixels, 1.0 / (255.0 * std))
    elif dtype == torch.uint8:
        pixels = pixels.round().clamp_(0, 255)
    return pixels.to(dtype)


def _decodes_regions(where: torch.device) -> bool:
    """Whether the cut has nvImageCodec decode each JPEG's region alone (its box and two pixels around: less to
    decode and to hold; the JPEG engines take regions): on a GPU with ``WDS_DEVICE_DECODER=nvimgcodec`` or
    ``nvimgcodec-hw``, unless ``WDS_DEVICE_REGIONS=0``."""
    return (
        where.type == "cuda"
        and device_decoder().startswith("nvimgcodec")
        and os.environ.get("WDS_DEVICE_REGIONS", "1") != "0"
    )


def _compute_type(where: torch.device) -> torch.dtype:
    """What the cut computes in: float16 on a GPU (0-255 and their fractions to 1/8 exactly, the tensor cores'
    type, half float32's traffic), float32 elsewhere (the CPU twin: exact, and what CPUs multiply fastest)."""
    return torch.float16 if where.type == "cuda" else torch.float32


def _cut(
    crops: PlannedCrops, where: torch.device, images: list[torch.Tensor] | None
) -> Iterator[tuple[slice, torch.Tensor]]:
    """The images of ``crops`` decoded (or ``images``) and cut on ``where``, a part at a time: each part's
    ``b x 3 x H x W`` pixels (0-255, in :func:`_compute_type`).  Each output pixel is the bilinear sample at its
    centre (pixel centres at +0.5, edges clamped: OpenCV's and torchvision's ``antialias=False``); a batch whose
    boxes shrink by more than 2x is sampled at k x k points a pixel (k up to 4) and averaged, so that it does not
    alias.  Resampling is separable: each image's rows are a weighted sum of a few of its rows (``down``, an
    ``H x tall`` matrix with ``2k`` weights a row: a box, its flip and its scale in one) and its columns likewise
    (``across``), so that the cut of a part is two batched matrix products, whatever k, the boxes and the sizes."""
    out_h, out_w = crops.out
    planned = crops.decoded_sizes().astype(np.float64)
    stored = crops.sizes.astype(np.float64).reshape(-1, 2)
    boxes, flips = crops.boxes.reshape(-1, 4), np.asarray(crops.flips, bool)
    scale = planned / stored
    shrink = float(np.max(np.maximum(boxes[:, 2] * scale[:, 0] / out_h, boxes[:, 3] * scale[:, 1] / out_w)))
    k = 1 if shrink <= 2 else min(4, math.ceil(shrink / 2))
    kind = _compute_type(where)
    regions = _Regions(crops) if images is None and _decodes_regions(where) else None
    for part in _parts(planned, out_h, out_w, kind.itemsize):
        if images is not None:
            decoded = images[part]
        elif regions is not None:
            decoded = _decode_cuda(crops, where, range(part.start, part.stop), regions)
        else:
            decoded = decode_planned(crops, where, range(part.start, part.stop))
        shapes = np.array([tuple(image.shape[1:]) for image in decoded], np.int64).reshape(-1, 2)
        tall, wide = (int(v) for v in shapes.max(0))
        canvas = _canvas(decoded, tall, wide, where, kind)
        del decoded
        scale = shapes / stored[part]  # 1 unless the plan reduced it, or a decoder gave another size than said
        origin = np.zeros_like(shapes)
        if regions is not None:  # an image decoded as its region: at the stored scale, its box shifted into it
            origins = regions.origins[part]
            scale = np.where(origins >= 0, 1.0, scale)
            origin = np.maximum(origins, 0)
        top, left = boxes[part, 0] * scale[:, 0] - origin[:, 0], boxes[part, 1] * scale[:, 1] - origin[:, 1]
        ys = _positions(top, boxes[part, 2] * scale[:, 0], out_h * k, shapes[:, 0])
        xs = _positions(left, boxes[part, 3] * scale[:, 1], out_w * k, shapes[:, 1])
        xs = np.where(flips[part, None], xs[:, ::-1], xs)
        down = _matrix(ys, shapes[:, 0], k, tall, where, kind)  # b x H x tall
        across = _matrix(xs, shapes[:, 1], k, wide, where, kind).transpose(1, 2)  # b x wide x W
        n = len(shapes)
        if tall * out_w * (wide + out_h) < out_h * wide * (tall + out_w):  # the order with fewer products
            narrow = torch.bmm(canvas.view(n, 3 * tall, wide), across).view(n, 3, tall, out_w)
            del canvas
            yield part, torch.matmul(down[:, None], narrow)  # down's b x H x tall repeated for the 3 channels
        else:
            short = torch.matmul(down[:, None], canvas).view(n, 3 * out_h, wide)
            del canvas
            yield part, torch.bmm(short, across).view(n, 3, out_h, out_w)


def _positions(start: np.ndarray, length: np.ndarray, samples: int, limit: np.ndarray) -> np.ndarray:
    """Where each of ``samples`` points along a box (``start``, ``length``: one a row) falls in its image: the
    centre of each sample's cell, clamped to the image's first and last pixel (``limit`` pixels)."""
    centres = (np.arange(samples, dtype=np.float64) + 0.5)[None, :] * (length / samples)[:, None]
    return np.minimum(np.maximum(start[:, None] + centres - 0.5, 0.0), (limit - 1)[:, None].astype(np.float64))


def _matrix(
    positions: np.ndarray, limit: np.ndarray, k: int, size: int, where: torch.device, kind: torch.dtype
) -> torch.Tensor:
    """The resampling matrix along one axis: ``b x n x size``, row ``j`` the weights of the pixels output pixel
    ``j`` reads (``positions``: ``b x n*k``, k points an output pixel, two pixels a point, weighted by how near
    they are, averaged).  Made on ``where`` from the ``b x n x 2k`` taps (a scatter), not copied over whole."""
    count, samples = positions.shape
    low = np.floor(positions)
    near = positions - low
    low = low.astype(np.int64)
    high = np.minimum(low + 1, (limit - 1)[:, None])
    index = torch.from_numpy(np.stack((low, high), -1).reshape(count, samples // k, 2 * k))
    weight = torch.from_numpy((np.stack((1.0 - near, near), -1) / k).reshape(count, samples // k, 2 * k))
    matrix = torch.zeros((count, samples // k, size), dtype=kind, device=where)
    return matrix.scatter_add_(2, index.to(where, non_blocking=True), weight.to(where, kind, non_blocking=True))


def _canvas(images: list[torch.Tensor], tall: int, wide: int, where: torch.device, kind: torch.dtype) -> torch.Tensor:
    """The decoded ``images`` (3 x H x W uint8, in whatever memory order their decoder gave) in one buffer
    allocated once: ``B x 3 x tall x wide`` in ``kind``, each at the top left of its place (zeros around, which
    the resampling weights never read).  A copy a size, not an image: a batch of photos from one camera is one
    stack."""
    sizes: dict[tuple[int, int], list[int]] = {}
    for i, image in enumerate(images):
        sizes.setdefault((int(image.shape[1]), int(image.shape[2])), []).append(i)
    if len(sizes) == 1:
        return torch.stack(images).to(kind)
    canvas = torch.zeros((len(images), 3, tall, wide), dtype=kind, device=where)
    for (height, width), members in sizes.items():
        if len(members) == 1:
            canvas[members[0], :, :height, :width] = images[members[0]]
        else:
            rows = torch.tensor(members, device=where)
            canvas[rows, :, :height, :width] = torch.stack([images[i] for i in members]).to(kind)
    return canvas


CUT_BYTES = 1 << 30
"""What one part of :func:`cut_planned` may take on the device (its decoded images, their canvas, the
resampling matrices and the products): a batch of large photos (256 of 4000x3000 would take 9 GB decoded and 18 GB
as a float16 canvas) is decoded and cut a part at a time.  One image alone always fits
(:data:`~wds_core.stages.devicecrop.DEVICE_IMAGE_BYTES`: with its canvas in float32, five times it is under this)."""


def _parts(shapes: np.ndarray, rows: int, cols: int, itemsize: int) -> list[slice]:
    """Consecutive images of the batch decoded and cut together, each part within :data:`CUT_BYTES` (one image at
    least), ``shapes`` the sizes they decode at and ``itemsize`` the bytes of the type the cut computes in: each
    image's decode, its place on the canvas (as large as the part's largest), its matrices and products."""
    parts, start, tall, wide, pixels = [], 0, 0, 0, 0
    for i, (height, width) in enumerate(shapes.tolist()):
        taller, wider, more = max(tall, int(height)), max(wide, int(width)), pixels + 3 * int(height) * int(width)
        each = 3 * taller * wider + (rows + cols) * (taller + wider) + 3 * (rows + cols) * max(taller, wider)
        if i > start and (i - start + 1) * each * itemsize + more > CUT_BYTES:
            parts.append(slice(start, i))
            start, taller, wider, more = i, int(height), int(width), 3 * int(height) * int(width)
        tall, wide, pixels = taller, wider, more
    parts.append(slice(start, len(shapes)))
    return parts
