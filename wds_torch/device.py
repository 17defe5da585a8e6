"""Batches decoded and cut on the device the model runs on: ``crop_images(..., device="cuda")`` + :func:`to_device`.

The workers only read: ``crop_images(224, flip=0.5, layout="chw", device="cuda")`` in the dataset draws each
sample's crop from its JPEG header (the same box and flip as the CPU path, so the random stream, the order and
checkpoints are unchanged) and batches the bytes with their plans (:mod:`wds_core.stages.devicecrop`).  In the main
process :func:`to_device` decodes each batch on the GPU (``torchvision.io.decode_jpeg`` on a list: nvJPEG, batched),
and cuts, resizes, flips and normalises the whole batch in one ``grid_sample`` (bilinear, pixel centres as
OpenCV's and torchvision's ``antialias=False``; a batch whose boxes shrink by more than 2x is sampled at 2-4x the
output and averaged, so that it does not alias); with CUDA a thread prepares the next two batches on a side stream
while the model runs on this one.  Every other tensor and numeric array of the batch moves to the device too::

    dataset = (wds_torch.WebDataset(urls, shardshuffle=True, seed=0).shuffle(1000)
               .crop_images(224, flip=0.5, layout="chw", mean=MEAN, std=STD, device="cuda")
               .to_tuple("jpg", "cls").batched(256))
    loader = wds_torch.WebLoader(dataset, batch_size=None, num_workers=4, pin_memory=True)
    batches = loader.to_device()                      # or wds_torch.to_device(loader): images [256, 3, 224, 224]
                                                      # on the GPU, labels too
    for images, labels in batches:
        ...
    state = batches.state_dict()                      # the loader's state after the last batch given out

``device="cpu"`` runs the same code on the CPU (wds's JPEG decoder, the same ``grid_sample``): the twin that tests
run without a GPU.  Only :func:`_decode_cuda` needs one.
"""

from __future__ import annotations

import functools
import math
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from wds_core.errors import DecodingError, SpecError
from wds_core.stages.devicecrop import PlannedCrops, is_jpeg_data

__all__ = ["DeviceBatches", "cut_planned", "decode_planned", "device_decoder", "to_device"]


def to_device(batches: Iterable[Any], device: str | torch.device | None = None, **options: Any) -> DeviceBatches:
    """``batches`` (a loader) with each batch on ``device`` (default: the one its planned crops name, else CUDA
    when there is one): planned crops decoded and cut there (:func:`cut_planned`), tensors and numeric arrays
    moved.  Options (:class:`DeviceBatches`): ``dtype`` the images' (uint8 by default, float32 with
    ``mean``/``std``); ``channels_last`` their memory format; ``prefetch`` how many batches a thread prepares
    ahead (``True``: 2; by default 2 on CUDA, none elsewhere); ``non_blocking`` copies."""
    return DeviceBatches(batches, device, **options)


class DeviceBatches:
    """What :func:`to_device` gives: iterate it for the batches on the device; ``state_dict()`` is the wrapped
    loader's state after the last batch given out (batches prepared ahead are not counted), ``load_state_dict``
    restores the loader.

    With ``prefetch`` (``True``: 2 batches; by default 2 on CUDA, none elsewhere) a thread takes the batches from
    the loader and prepares them (decode, cut, copies) on a side CUDA stream while the caller trains on the one
    given out; the caller's stream waits for each batch's work before using it.  A thread, not just a stream:
    nvJPEG's batched decode blocks its caller until the batch is decoded, and training loops wait for their step
    (``loss.item()``), so work prepared on the caller's thread would not overlap the model's.  An error in the
    thread is raised where the batch would have been; breaking out of the loop stops the thread."""

    def __init__(
        self,
        batches: Iterable[Any],
        device: str | torch.device | None = None,
        *,
        dtype: torch.dtype | None = None,
        channels_last: bool = False,
        prefetch: bool | int | None = None,
        non_blocking: bool = True,
    ) -> None:
        self.batches = batches
        self.device = None if device is None else torch.device(device)
        self.dtype, self.channels_last, self.prefetch, self.non_blocking = dtype, channels_last, prefetch, non_blocking
        self._state: Any = None  # the loader's state after the last batch given out, while batches are held ahead

    def __len__(self) -> int:
        return len(self.batches)  # type: ignore[arg-type]

    def _where(self, batch: Any) -> torch.device:
        planned = _first_planned(batch)
        if self.device is not None:
            where = self.device
        elif planned is not None:
            where = torch.device(planned.finish.device)
        else:
            where = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if where.type == "cuda" and where.index is None:  # the caller's current GPU, named for the thread
            where = torch.device("cuda", torch.cuda.current_device())
        return where

    def _depth(self, device: torch.device) -> int:
        if self.prefetch is None:
            return 2 if device.type == "cuda" else 0
        if self.prefetch is True:
            return 2
        return max(0, int(self.prefetch))

    def __iter__(self) -> Iterator[Any]:
        source = iter(self.batches)
        state_of = getattr(self.batches, "state_dict", None)
        self._state = None
        try:
            first = next(source)
        except StopIteration:
            return
        device = self._where(first)
        depth = self._depth(device)
        if depth == 0:
            yield self._move(first, device)
            for batch in source:
                yield self._move(batch, device)
            return
        state_of = state_of if callable(state_of) else None
        ahead = _Ahead(self._move, source, first, state_of() if state_of else None, state_of, device, depth)
        try:
            for moved, state in ahead:
                self._state = state
                yield moved
            self._state = None
        finally:
            ahead.close()

    def _move(self, batch: Any, device: torch.device) -> Any:
        if isinstance(batch, PlannedCrops):
            return cut_planned(batch, device, dtype=self.dtype, channels_last=self.channels_last)
        if isinstance(batch, torch.Tensor):
            return batch.to(device, non_blocking=self.non_blocking)
        if isinstance(batch, np.ndarray) and batch.dtype.kind in "biuf":
            return torch.from_numpy(batch).to(device, non_blocking=self.non_blocking)
        if isinstance(batch, dict):
            return {key: self._move(value, device) for key, value in batch.items()}
        if isinstance(batch, (list, tuple)):
            moved = [self._move(value, device) for value in batch]
            return tuple(moved) if isinstance(batch, tuple) else moved
        return batch

    def state_dict(self) -> Any:
        if self._state is not None:
            return self._state
        return self.batches.state_dict()  # type: ignore[attr-defined]

    def load_state_dict(self, state: Any) -> None:
        self._state = None
        self.batches.load_state_dict(state)  # type: ignore[attr-defined]


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


class _Ahead:
    """Up to ``depth`` batches taken from ``source`` and prepared by ``move`` in a thread, each with the loader's
    state after it was taken (``state_of``) and, on CUDA, the event its side-stream work ends with."""

    def __init__(
        self, move: Any, source: Iterator[Any], first: Any, state: Any, state_of: Any, device: torch.device, depth: int
    ) -> None:
        self.device = device
        self.ready: queue.Queue[Any] = queue.Queue(depth)
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(move, source, first, state, state_of), name="wds-to-device", daemon=True
        )
        self.thread.start()

    def _run(self, move: Any, source: Iterator[Any], batch: Any, state: Any, state_of: Any) -> None:
        try:
            side = None
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)  # this thread's current device
                side = torch.cuda.Stream(self.device)
            while not self.stopping.is_set():
                item: tuple[Any, Any, torch.cuda.Event | None]
                if side is None:
                    item = (move(batch, self.device), state, None)
                else:
                    with torch.cuda.stream(side):
                        moved = move(batch, self.device)
                        done = torch.cuda.Event()
                        done.record(side)
                    item = (moved, state, done)
                    del moved
                del batch
                if not self._put(item):
                    return
                del item
                try:
                    batch = next(source)
                except StopIteration:
                    self._put(_END)
                    return
                state = state_of() if state_of is not None else None
        except BaseException as exn:  # raised in the caller's thread, where the batch would have been
            self._put(_Failed(exn))

    def _put(self, item: Any) -> bool:
        while not self.stopping.is_set():
            try:
                self.ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        while True:
            item = self._get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            moved, state, done = item
            if done is not None:  # the caller's stream waits for the batch's work, and owns its tensors now
                current = torch.cuda.current_stream(self.device)
                current.wait_event(done)
                for tensor in _tensors(moved):
                    tensor.record_stream(current)
            yield moved, state

    def _get(self) -> Any:
        while True:
            try:
                return self.ready.get(timeout=1.0)
            except queue.Empty:
                if not self.thread.is_alive() and self.ready.empty():
                    raise RuntimeError("the thread preparing batches for the device ended without a word") from None

    def close(self) -> None:
        """Stops the thread: it ends after the batch it is taking or preparing (waited for, so that the loader is
        not asked for two batches at once when a new epoch starts)."""
        self.stopping.set()
        if threading.current_thread() is self.thread:  # the generator collected by the thread itself
            return
        while self.thread.is_alive():
            try:
                self.ready.get(timeout=0.1)
            except queue.Empty:
                pass
        while not self.ready.empty():
            self.ready.get_nowait()


def _first_planned(batch: Any) -> PlannedCrops | None:
    if isinstance(batch, PlannedCrops):
        return batch
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for value in values:
        found = _first_planned(value)
        if found is not None:
            return found
    return None


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


# ---------------------------------------------------------------- decoding


def decode_planned(crops: PlannedCrops, device: str | torch.device | None = None) -> list[torch.Tensor]:
    """Each image of ``crops`` decoded on ``device`` as a 3 x H x W uint8 tensor (its stored size)."""
    where = torch.device(device or crops.finish.device)
    if where.type == "cuda":
        return _decode_cuda(crops, where)
    return [_decode_host(crops, i) for i in range(len(crops))]


def _decode_host(crops: PlannedCrops, i: int) -> torch.Tensor:
    """Image ``i`` decoded here by wds's decoder (libjpeg-turbo through simplejpeg, else Pillow)."""
    from wds_core.fieldcodecs import image_spec
    from wds_core.fieldcodecs.images import decode_image

    try:
        pixels = decode_image(crops.image(i), image_spec("rgb8"))
    except Exception as exn:
        raise DecodingError(f"cannot decode the image of {crops.where(i)}: {type(exn).__name__}: {exn}") from exn
    return torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1)


DECODERS = ("torchvision", "nvimgcodec")


def device_decoder() -> str:
    """The GPU JPEG decoder in use: ``WDS_DEVICE_DECODER`` (``torchvision``: nvJPEG through
    ``torchvision.io.decode_jpeg``, the default; ``nvimgcodec``: NVIDIA's nvImageCodec, which uses the hardware
    JPEG decoders of A100/H100 as well, ``pip install nvidia-nvimgcodec-cu12``)."""
    choice = os.environ.get("WDS_DEVICE_DECODER", "torchvision")
    if choice not in DECODERS:
        raise SpecError(f"WDS_DEVICE_DECODER must be one of {', '.join(DECODERS)}, got {choice!r}")
    return choice


@functools.cache
def _nvimgcodec(index: int) -> tuple[Any, Any]:
    """nvImageCodec's decoder for GPU ``index``, and its parameters: RGB, and no EXIF rotation (the CPU path does
    none, and the crops are planned on the stored size)."""
    from nvidia import nvimgcodec

    params = nvimgcodec.DecodeParams(
        apply_exif_orientation=False, color_spec=nvimgcodec.ColorSpec.SRGB, sample_format=nvimgcodec.SampleFormat.I_RGB
    )
    return nvimgcodec.Decoder(device_id=index), params


def _decode_cuda(crops: PlannedCrops, device: torch.device) -> list[torch.Tensor]:
    """The GPU's part: the batch's JPEGs decoded at once on the current stream (:func:`device_decoder`); what the
    GPU decoder does not take (PNG, WebP, a CMYK or broken JPEG) decoded here and copied over, so that an image
    neither decodes is named by the host decoder's error."""
    jpegs = [i for i in range(len(crops)) if is_jpeg_data(crops.image(i))]
    out: list[Any] = [None] * len(crops)
    if jpegs and device_decoder() == "nvimgcodec":
        stream = torch.cuda.current_stream(device).cuda_stream
        decoder, params = _nvimgcodec(device.index or 0)
        images = decoder.decode([_encoded(crops, i) for i in jpegs], params=params, cuda_stream=stream)
        for i, image in zip(jpegs, images):
            if image is not None:  # HWC on the device, viewed without a copy
                out[i] = torch.as_tensor(image, device=device).permute(2, 0, 1)
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
    for i in range(len(crops)):
        if out[i] is None:
            out[i] = _decode_host(crops, i).to(device, non_blocking=True)
    return out


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
    (``dtype`` overrides either)."""
    where = torch.device(device or crops.finish.device)
    if images is None:
        images = decode_planned(crops, where)
    count = len(images)
    out_h, out_w = crops.out
    shapes = torch.tensor([image.shape[1:] for image in images], dtype=torch.float64)  # decoded (h, w)
    stored = torch.from_numpy(crops.sizes.astype(np.float64))
    scale = shapes / stored  # 1 unless a decoder gave another size than the header said
    boxes = torch.from_numpy(crops.boxes)
    top, left = boxes[:, 0] * scale[:, 0], boxes[:, 1] * scale[:, 1]
    height, width = boxes[:, 2] * scale[:, 0], boxes[:, 3] * scale[:, 1]
    shrink = float(torch.maximum(height / out_h, width / out_w).max()) if count else 1.0
    k = 1 if shrink <= 2 else min(4, math.ceil(shrink / 2))  # sample finer, then average: no aliasing
    rows, cols = out_h * k, out_w * k
    # where each output pixel's centre falls in its image (pixel centres at +0.5), clamped to the image
    ys = top[:, None] + (torch.arange(rows, dtype=torch.float64) + 0.5)[None, :] * (height / rows)[:, None] - 0.5
    xs = left[:, None] + (torch.arange(cols, dtype=torch.float64) + 0.5)[None, :] * (width / cols)[:, None] - 0.5
    flips = torch.from_numpy(crops.flips)
    xs = torch.where(flips[:, None], xs.flip(1), xs)
    ys = torch.minimum(ys.clamp(min=0), (shapes[:, 0] - 1)[:, None])
    xs = torch.minimum(xs.clamp(min=0), (shapes[:, 1] - 1)[:, None])
    outs = []
    for part in _parts(shapes, rows, cols):
        tall, wide = int(shapes[part, 0].max()), int(shapes[part, 1].max())
        canvas = _canvas(images[part], tall, wide, where)
        # the sampling positions are B x (rows + cols) numbers: made here, the B x rows x cols grid on the device
        gx = ((2 * xs[part] + 1) / wide - 1).to(where, torch.float32, non_blocking=True)
        gy = ((2 * ys[part] + 1) / tall - 1).to(where, torch.float32, non_blocking=True)
        n = len(gx)
        grid = torch.stack((gx[:, None, :].expand(n, rows, cols), gy[:, :, None].expand(n, rows, cols)), dim=-1)
        out = F.grid_sample(canvas, grid, mode="bilinear", padding_mode="border", align_corners=False)
        del canvas, grid
        outs.append(F.avg_pool2d(out, k) if k > 1 else out)
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return _finish(out, crops, dtype, channels_last)


CUT_BYTES = 1 << 30
"""What one ``grid_sample`` of :func:`cut_planned` may take (the float32 canvas of decoded images, the grid and the
output): a batch of large photos (256 of 4000x3000 would take 37 GB) is cut a part at a time."""


def _parts(shapes: torch.Tensor, rows: int, cols: int) -> list[slice]:
    """Consecutive images of the batch cut together, each part within :data:`CUT_BYTES` (one image at least)."""
    parts, start, tall, wide = [], 0, 0, 0
    for i, (height, width) in enumerate(shapes.tolist()):
        taller, wider = max(tall, int(height)), max(wide, int(width))
        if i > start and (i - start + 1) * (3 * taller * wider + 5 * rows * cols) * 4 > CUT_BYTES:
            parts.append(slice(start, i))
            start, taller, wider = i, int(height), int(width)
        tall, wide = taller, wider
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
