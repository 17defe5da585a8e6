"""A batch of planned crops decoded and cut on a device: :func:`decode_planned` and :func:`cut_planned`.

The batch comes from ``crop_images(..., device=...)`` (:class:`wds_core.stages.devicecrop.PlannedCrops`: the JPEGs'
bytes, their boxes and flips).  On CUDA the JPEGs are decoded at once by nvJPEG (``torchvision.io.decode_jpeg`` on
a list) or nvImageCodec (:func:`device_decoder`); anything the GPU decoder does not take is decoded on the host.
An image its plan reduces (a header that claims more than its bytes can hold, or a huge photo:
:mod:`wds_core.stages.devicecrop`) is decoded on the host at that scale and copied over.  The batch is decoded
and cut a part at a time, each part's decoded images, canvas, grid and output within :data:`CUT_BYTES`, decoded
only when its turn comes and let go before the next: what a batch takes on the device is bounded whatever its
headers say.  Only :func:`_decode_cuda` needs a GPU; ``device="cpu"`` runs the rest as the tests' twin.
:func:`wds_torch.device.to_device` calls these on the loader's batches.
"""

from __future__ import annotations

import copy
import functools
import math
import os
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from wds_core.errors import DecodingError, SpecError
from wds_core.stages.devicecrop import PlannedCrops, is_jpeg_data

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


def _decode_cuda(crops: PlannedCrops, device: torch.device, which: range) -> list[torch.Tensor]:
    """The GPU's part: the JPEGs of ``which`` decoded at once on the current stream (:func:`device_decoder`); what
    the GPU decoder does not take (PNG, WebP, a CMYK or broken JPEG) and what the plan reduces decoded here and
    copied over, so that an image neither decodes is named by the host decoder's error."""
    reduced: list[bool] = np.any(crops.reduced, axis=1).tolist()
    jpegs = [i for i in which if not reduced[i] and is_jpeg_data(crops.image(i))]
    out: dict[int, Any] = {}
    choice = device_decoder() if jpegs else ""
    if choice.startswith("nvimgcodec"):
        stream = torch.cuda.current_stream(device).cuda_stream
        if choice == "nvimgcodec-hw":  # the JPEG engines first; what they refuse goes on to the default backends
            jpegs = _decode_nvimgcodec(_nvimgcodec(device.index or 0, True), crops, jpegs, device, stream, out)
        if jpegs:
            _decode_nvimgcodec(_nvimgcodec(device.index or 0), crops, jpegs, device, stream, out)
    elif jpegs:
        from torchvision.io import ImageReadMode, decode_jpeg

        host = torch.from_numpy(crops.data)
        if not host.is_pinned():
            host = host.pin_memory()
        views = [host[int(crops.offsets[i]) : int(crops.offsets[i + 1])] for i in jpegs]
        try:
            decoded = decode_jpeg(views, mode=ImageReadMode.RGB, device=device)
        except RuntimeError:  # one of them is refused: the others one at a time
            decoded = [_decode_one(decode_jpeg, view, ImageReadMode.RGB, device) for view in views]
        for i, image in zip(jpegs, decoded):
            out[i] = image
    return [out[i] if out.get(i) is not None else _decode_host(crops, i).to(device, non_blocking=True) for i in which]


def _decode_nvimgcodec(
    made: tuple[Any, Any], crops: PlannedCrops, jpegs: list[int], device: torch.device, stream: int, out: dict[int, Any]
) -> list[int]:
    """The images ``jpegs`` decoded at once by an nvImageCodec decoder into ``out``: those it refused (all of them
    when it is ``None`` or fails as a whole), for the next decoder to take, one by one."""
    decoder, params = made
    if decoder is None:
        return jpegs
    try:
        images = decoder.decode([_encoded(crops, i) for i in jpegs], params=params, cuda_stream=stream)
    except Exception:
        return jpegs
    refused = []
    for i, image in zip(jpegs, images):
        if image is None:
            refused.append(i)
        else:  # HWC on the device, viewed without a copy
            out[i] = torch.as_tensor(image, device=device).permute(2, 0, 1)
    return refused


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
    when its turn comes and let go before the next.  The images the workers cut already (``crops.host``) are
    copied over and finished with the others."""
    where = torch.device(device or crops.finish.device)
    host = np.asarray(crops.host, bool)
    if not host.any():
        return _finish(_cut(crops, where, images), crops, dtype, channels_last)
    out = torch.empty((len(crops), 3, *crops.out), dtype=torch.float32, device=where)
    on_device = np.flatnonzero(~host)
    if len(on_device):
        chosen = None if images is None else [images[i] for i in on_device.tolist()]
        out[torch.as_tensor(on_device, device=where)] = _cut(crops.select(on_device), where, chosen)
    cut = torch.as_tensor(crops.cut).to(where, non_blocking=True)  # K x H x W x 3 uint8
    out[torch.as_tensor(np.flatnonzero(host), device=where)] = cut.permute(0, 3, 1, 2).to(torch.float32)
    return _finish(out, crops, dtype, channels_last)


def _cut(crops: PlannedCrops, where: torch.device, images: list[torch.Tensor] | None) -> torch.Tensor:
    """The images of ``crops`` decoded (or ``images``) and cut on ``where``: ``B x 3 x H x W`` float32, 0-255."""
    count = len(crops)
    out_h, out_w = crops.out
    planned = torch.tensor([crops.decoded_size(i) for i in range(count)], dtype=torch.float64).reshape(-1, 2)
    stored = torch.from_numpy(crops.sizes.astype(np.float64)).reshape(-1, 2)
    boxes = torch.from_numpy(crops.boxes).reshape(-1, 4)
    flips = torch.from_numpy(crops.flips)
    scale = planned / stored
    shrinks = torch.maximum(boxes[:, 2] * scale[:, 0] / out_h, boxes[:, 3] * scale[:, 1] / out_w)
    shrink = float(shrinks.max()) if count else 1.0
    k = 1 if shrink <= 2 else min(4, math.ceil(shrink / 2))  # sample finer, then average: no aliasing
    rows, cols = out_h * k, out_w * k
    outs = []
    for part in _parts(planned, rows, cols):
        decoded = images[part] if images is not None else decode_planned(crops, where, range(part.start, part.stop))
        shapes = torch.tensor([image.shape[1:] for image in decoded], dtype=torch.float64).reshape(-1, 2)
        scale = shapes / stored[part]  # 1 unless the plan reduced it, or a decoder gave another size than said
        top, left = boxes[part, 0] * scale[:, 0], boxes[part, 1] * scale[:, 1]
        height, width = boxes[part, 2] * scale[:, 0], boxes[part, 3] * scale[:, 1]
        # where each output pixel's centre falls in its image (pixel centres at +0.5), clamped to the image
        ys = top[:, None] + (torch.arange(rows, dtype=torch.float64) + 0.5)[None, :] * (height / rows)[:, None] - 0.5
        xs = left[:, None] + (torch.arange(cols, dtype=torch.float64) + 0.5)[None, :] * (width / cols)[:, None] - 0.5
        xs = torch.where(flips[part, None], xs.flip(1), xs)
        ys = torch.minimum(ys.clamp(min=0), (shapes[:, 0] - 1)[:, None])
        xs = torch.minimum(xs.clamp(min=0), (shapes[:, 1] - 1)[:, None])
        tall, wide = int(shapes[:, 0].max()), int(shapes[:, 1].max())
        canvas = _canvas(decoded, tall, wide, where)
        del decoded
        # the sampling positions are B x (rows + cols) numbers: made here, the B x rows x cols grid on the device
        gx = ((2 * xs + 1) / wide - 1).to(where, torch.float32, non_blocking=True)
        gy = ((2 * ys + 1) / tall - 1).to(where, torch.float32, non_blocking=True)
        n = len(gx)
        grid = torch.stack((gx[:, None, :].expand(n, rows, cols), gy[:, :, None].expand(n, rows, cols)), dim=-1)
        out = F.grid_sample(canvas, grid, mode="bilinear", padding_mode="border", align_corners=False)
        del canvas, grid
        outs.append(F.avg_pool2d(out, k) if k > 1 else out)
    return outs[0] if len(outs) == 1 else torch.cat(outs)


CUT_BYTES = 1 << 30
"""What one part of :func:`cut_planned` may take (its decoded uint8 images, their float32 canvas, the grid and the
output): a batch of large photos (256 of 4000x3000 would take 37 GB) is decoded and cut a part at a time.  One
image alone always fits (:data:`~wds_core.stages.devicecrop.DEVICE_IMAGE_BYTES`: five times it is under this)."""


def _parts(shapes: torch.Tensor, rows: int, cols: int) -> list[slice]:
    """Consecutive images of the batch decoded and cut together, each part within :data:`CUT_BYTES` (one image at
    least), ``shapes`` the sizes they decode at."""
    parts, start, tall, wide, pixels = [], 0, 0, 0, 0
    for i, (height, width) in enumerate(shapes.tolist()):
        taller, wider, more = max(tall, int(height)), max(wide, int(width)), pixels + 3 * int(height) * int(width)
        if i > start and (i - start + 1) * (3 * taller * wider + 5 * rows * cols) * 4 + more > CUT_BYTES:
            parts.append(slice(start, i))
            start, taller, wider, more = i, int(height), int(width), 3 * int(height) * int(width)
        tall, wide, pixels = taller, wider, more
    parts.append(slice(start, len(shapes)))
    return parts


def _canvas(images: list[torch.Tensor], tall: int, wide: int, where: torch.device) -> torch.Tensor:
    """The images as one float32 ``B x 3 x tall x wide`` tensor, each at the top left of its place: a copy per
    size, not per image (a batch of photos from one camera is one stack)."""
    sizes: dict[tuple[int, int], list[int]] = {}
    for i, image in enumerate(images):
        sizes.setdefault((int(image.shape[1]), int(image.shape[2])), []).append(i)
    if len(sizes) == 1:
        return torch.stack(images).to(torch.float32)
    canvas = torch.zeros((len(images), 3, tall, wide), dtype=torch.float32, device=where)
    for (height, width), members in sizes.items():
        if len(members) == 1:
            canvas[members[0], :, :height, :width] = images[members[0]]
        else:
            rows = torch.tensor(members, device=where)
            canvas[rows, :, :height, :width] = torch.stack([images[i] for i in members]).to(torch.float32)
    return canvas


def _finish(out: torch.Tensor, crops: PlannedCrops, dtype: torch.dtype | None, channels_last: bool) -> torch.Tensor:
    finish = crops.finish
    if finish.mean is not None and finish.std is not None:
        mean = torch.tensor(finish.mean, dtype=torch.float32, device=out.device).view(1, -1, 1, 1)
        std = torch.tensor(finish.std, dtype=torch.float32, device=out.device).view(1, -1, 1, 1)
        out = (out * (1.0 / 255.0) - mean) / std
        if dtype is not None:
            out = out.to(dtype)
    elif dtype is None or dtype == torch.uint8:
        out = out.round_().clamp_(0, 255).to(torch.uint8)
    else:
        out = out.to(dtype)
    if finish.layout == "hwc":
        return out.permute(0, 2, 3, 1).contiguous()
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out.contiguous()
