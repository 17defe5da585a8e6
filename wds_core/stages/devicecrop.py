"""Crops planned where the samples are read and cut where the model runs: ``crop_images(..., device="cuda")``.

With ``device=`` the :func:`~wds_core.stages.decode.crop_images` stage decodes nothing: it reads each image's size
from its header, draws the crop box and the flip exactly as it would for the CPU path (same random numbers: the
same sample gets the same crop, in any worker, in a resumed run), and hands on a :class:`PlannedCrop` (the
encoded bytes and that plan).  Batching collates them into one :class:`PlannedCrops`: the bytes of the batch in
one buffer, the boxes, sizes and flips as arrays (a few kilobytes besides the JPEGs, cheap to hand from a worker to
the main process).  ``wds_torch.to_device`` then decodes the batch on the device and cuts, resizes, flips and
normalises it there, one batched operation for all of it.

What an image may cost on the device is bounded by its plan, made before anything decodes it: an image whose
whole decode would take more than its bytes may inflate to (the decode limits' ``expansion``: a 3 KB JPEG whose
header claims 8000x8000), or more than :data:`DEVICE_IMAGE_BYTES`, is planned to be decoded on the host at the
smallest scale that still gives its crop the output's pixels (``reduced``), as the CPU path decodes it, and only
that goes to the device; one that would pass the limits even so is refused there, naming its sample.  The device
side then decodes and cuts a batch a part at a time within a byte budget (``wds_torch.devicecut``).

Nothing here needs a framework: the plans are numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SampleError
from ..fieldcodecs.jpeg import reduced_size

__all__ = ["DEVICE_IMAGE_BYTES", "PlannedCrop", "PlannedCrops", "is_jpeg_data"]

DEVICE_IMAGE_BYTES = 200 << 20
"""The most one image's whole decode (its uint8 pixels) may take on the device; a larger one is decoded on the host,
reduced (about 70 megapixels: with its float32 canvas, five times this, it fits one part of the device's cut)."""


def is_jpeg_data(data: Any) -> bool:
    """Whether ``data`` starts as a JPEG does (SOI and a marker)."""
    return bytes(data[:3]) == b"\xff\xd8\xff"


@dataclass(frozen=True)
class Finish:
    """What every image of a batch becomes after the cut: where (``device``), ``layout``, ``mean``/``std``."""

    device: str
    layout: str = "chw"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None


@dataclass(frozen=True)
class PlannedCrop:
    """One image not yet decoded: its bytes, its stored size, the box to cut (top, left, height, width in stored
    pixels, fractional for the centre policy), the output size, whether to flip, and where it came from;
    ``reduced``: the least size it is decoded at, on the host (``(0, 0)``: whole, on the device)."""

    data: bytes
    size: tuple[int, int]
    box: tuple[float, float, float, float]
    out: tuple[int, int]
    flip: bool
    finish: Finish
    key: str | None = None
    url: str | None = None
    reduced: tuple[int, int] = (0, 0)

    def __repr__(self) -> str:
        return f"PlannedCrop({self.key!r}, {len(self.data)} bytes, size={self.size}, box={self.box}, out={self.out})"


class PlannedCrops:
    """A batch of :class:`PlannedCrop`: ``data`` (uint8, every image's bytes one after the other) cut at
    ``offsets`` (int64, B + 1), ``sizes`` (int32, B x 2), ``boxes`` (float64, B x 4), ``flips`` (bool, B),
    ``reduced`` (int32, B x 2: :attr:`PlannedCrop.reduced`), and what they share: ``out`` and ``finish``; ``keys``
    and ``urls`` name the samples in messages."""

    __slots__ = ("boxes", "data", "finish", "flips", "keys", "offsets", "out", "reduced", "sizes", "urls")

    def __init__(
        self,
        data: np.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
        boxes: np.ndarray,
        flips: np.ndarray,
        out: tuple[int, int],
        finish: Finish,
        keys: list[str | None],
        urls: list[str | None],
        reduced: np.ndarray | None = None,
    ) -> None:
        self.data, self.offsets, self.sizes, self.boxes, self.flips = data, offsets, sizes, boxes, flips
        self.out, self.finish, self.keys, self.urls = out, finish, keys, urls
        self.reduced = np.zeros((len(sizes), 2), np.int32) if reduced is None else reduced

    @classmethod
    def collate(cls, crops: list[PlannedCrop]) -> PlannedCrops:
        """One batch of ``crops``; they must share their output size and finish (one ``crop_images`` stage)."""
        first = crops[0]
        for crop in crops:
            if not isinstance(crop, PlannedCrop):
                raise SampleError(f"cannot batch a planned crop with {type(crop).__name__}")
            if crop.out != first.out or crop.finish != first.finish:
                raise SampleError(
                    "cannot batch crops planned for different outputs "
                    f"({first.out}, {first.finish}) and ({crop.out}, {crop.finish})",
                    member=crop.key,
                )
        lengths = np.fromiter((len(crop.data) for crop in crops), np.int64, len(crops))
        offsets = np.zeros(len(crops) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.empty(int(offsets[-1]), np.uint8)
        for crop, start in zip(crops, offsets[:-1].tolist()):
            data[start : start + len(crop.data)] = np.frombuffer(crop.data, np.uint8)
        return cls(
            data,
            offsets,
            np.array([crop.size for crop in crops], np.int32).reshape(-1, 2),
            np.array([crop.box for crop in crops], np.float64).reshape(-1, 4),
            np.array([crop.flip for crop in crops], bool),
            first.out,
            first.finish,
            [crop.key for crop in crops],
            [crop.url for crop in crops],
            np.array([crop.reduced for crop in crops], np.int32).reshape(-1, 2),
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """What its arrays take: a DataLoader worker of ``wds_torch`` hands a large batch over through shared
        memory (``wds_torch.transfer``), which counts it by this."""
        arrays = (self.data, self.offsets, self.sizes, self.boxes, self.flips, self.reduced)
        return sum(int(array.nbytes) for array in arrays) + 64 * len(arrays)

    def decoded_size(self, i: int) -> tuple[int, int]:
        """The size image ``i`` is decoded at: its stored size, or the reduced one its plan gives."""
        height, width = (int(v) for v in self.sizes[i])
        least_h, least_w = (int(v) for v in self.reduced[i])
        if least_h <= 0 and least_w <= 0:
            return height, width
        return reduced_size(height, width, least_h, least_w)

    def image(self, i: int) -> memoryview:
        """The encoded bytes of image ``i`` (a view of the batch's buffer)."""
        return memoryview(self.data.data)[int(self.offsets[i]) : int(self.offsets[i + 1])]

    def where(self, i: int) -> str:
        """Image ``i``'s sample, for messages."""
        return f"sample {self.keys[i]!r}" + (f" of {self.urls[i]}" if self.urls[i] else "")

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"PlannedCrops({len(self)} images, {len(self.data):,} bytes, out={self.out}, {self.finish.device})"
