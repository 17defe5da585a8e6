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

import math
import multiprocessing
import uuid
import weakref
from dataclasses import dataclass, field
from multiprocessing.context import get_spawning_popen
from typing import Any

import numpy as np

from ..errors import SampleError, SpecError
from ..fieldcodecs.bounded import current_limits
from ..fieldcodecs.jpeg import reduced_size
from ..rng import derive_seed

__all__ = [
    "DEVICE_IMAGE_BYTES",
    "HostShare",
    "PlannedCrop",
    "PlannedCrops",
    "is_jpeg_data",
    "reduced_on_host",
    "register_pinner",
]

DEVICE_IMAGE_BYTES = 200 << 20
"""The most one image's whole decode (its uint8 pixels) may take on the device; a larger one is decoded on the host,
reduced (about 70 megapixels: with its canvas, float32 on the CPU twin, five times this, it fits one part of the
device's cut)."""


_JPEG_START = b"\xff\xd8\xff"  # SOI and the first marker's 0xFF: how a JPEG's bytes begin


def is_jpeg_data(data: Any) -> bool:
    """Whether ``data`` starts as a JPEG does (SOI and a marker)."""
    return bytes(data[:3]) == _JPEG_START


class HostShare:
    """The share of each batch the workers cut on the host (0: the device cuts every image), one number shared by
    the process that made it and the loader's workers (forked, or started with the pipeline): ``to_device(split=)``
    sets it while they run.  Which images are cut on the host is a function of each sample's shard and key
    (:meth:`takes`), so a fixed share cuts the same images in the same place in any run, worker or resume.  The
    process that made it finds it again by its ``token`` (:meth:`find`), which the batches carry."""

    def __init__(self, share: float = 0.0, token: str | None = None, shared: Any = None) -> None:
        self.token = token or uuid.uuid4().hex
        self.value = shared if shared is not None else multiprocessing.RawValue("d", 0.0)
        self.tuned_by: Any = None  # what turns it while batches run (``split="auto"``'s tuner): it says so
        if shared is None:
            self.set(share)
            _MADE[self.token] = self

    def get(self) -> float:
        return float(self.value.value)

    def set(self, share: float) -> None:
        if not 0.0 <= float(share) <= 1.0:
            raise SpecError(f"the share of a batch cut on the host is between 0 and 1, got {share!r}")
        self.value.value = float(share)

    def takes(self, url: Any, key: Any) -> bool:
        """Whether the sample ``(url, key)`` is cut on the host at the share in force now."""
        share = self.value.value
        return share > 0.0 and (share >= 1.0 or derive_seed("host share", url, key) < share * 2.0**64)

    def report(self) -> dict[str, Any]:
        """What :class:`~wds_core.observe.profiling.Profile` and the starvation report show: ``{"mode": "fixed",
        "share": ...}``, or the tuner's report when one turns it (``"auto"``, with its last choices)."""
        tuner = self.tuned_by
        if tuner is not None:
            return tuner.report()  # type: ignore[no-any-return]
        return {"mode": "fixed", "share": self.get()}

    @staticmethod
    def find(token: str | None) -> HostShare | None:
        """The share this process made with ``token`` (``None`` in a worker, or for a share made elsewhere)."""
        return None if token is None else _MADE.get(token)

    def __reduce__(self) -> Any:
        if get_spawning_popen() is not None:  # a worker being started: the shared number itself
            return (HostShare, (0.0, self.token, self.value))
        return (_copied, (self.get(), self.token))  # anywhere else: the share in force, no longer shared

    def __repr__(self) -> str:
        return f"HostShare({self.get():.3f})"


_MADE: weakref.WeakValueDictionary[str, HostShare] = weakref.WeakValueDictionary()


_PINNERS: list[Any] = []  # what PlannedCrops.pin_memory calls: wds_torch's


def register_pinner(pin: Any) -> None:
    """``pin(crops) -> crops`` copies a batch's arrays to page-locked memory (``wds_torch`` registers its own)."""
    _PINNERS.append(pin)


def _copied(share: float, token: str) -> HostShare:
    return HostShare(share, token, multiprocessing.RawValue("d", share))


@dataclass(frozen=True)
class Finish:
    """What every image of a batch becomes after the cut: where (``device``), ``layout``, ``mean``/``std``;
    ``share``: the token of the stage's :class:`HostShare`."""

    device: str
    layout: str = "chw"
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    share: str | None = None


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
    pixels: np.ndarray | None = field(default=None, compare=False)  # cut on the host already (:class:`HostShare`)

    def __repr__(self) -> str:
        where = "cut on the host" if self.pixels is not None else f"{len(self.data)} bytes"
        return f"PlannedCrop({self.key!r}, {where}, size={self.size}, box={self.box}, out={self.out})"


class PlannedCrops:
    """A batch of :class:`PlannedCrop`: ``data`` (uint8, every image's bytes one after the other) cut at
    ``offsets`` (int64, B + 1), ``sizes`` (int32, B x 2), ``boxes`` (float64, B x 4), ``flips`` (bool, B),
    ``reduced`` (int32, B x 2: :attr:`PlannedCrop.reduced`), and what they share: ``out`` and ``finish``; ``keys``
    and ``urls`` name the samples in messages.  ``host`` (bool, B) marks the images the workers cut already, whose
    pixels are ``cut`` (uint8, K x H x W x 3, in batch order; no bytes in ``data``)."""

    __slots__ = (
        "boxes",
        "cut",
        "data",
        "finish",
        "flips",
        "host",
        "keys",
        "offsets",
        "out",
        "reduced",
        "sizes",
        "urls",
    )

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
        host: np.ndarray | None = None,
        cut: np.ndarray | None = None,
    ) -> None:
        self.data, self.offsets, self.sizes, self.boxes, self.flips = data, offsets, sizes, boxes, flips
        self.out, self.finish, self.keys, self.urls = out, finish, keys, urls
        self.reduced = np.zeros((len(sizes), 2), np.int32) if reduced is None else reduced
        self.host = np.zeros(len(sizes), bool) if host is None else host
        self.cut = np.zeros((0, *out, 3), np.uint8) if cut is None else cut

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
        cut = [crop.pixels for crop in crops if crop.pixels is not None]
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
            np.array([crop.pixels is not None for crop in crops], bool),
            np.stack(cut) if cut else None,
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """What its arrays take: a DataLoader worker of ``wds_torch`` hands a large batch over through shared
        memory (``wds_torch.transfer``), which counts it by this."""
        arrays = (self.data, self.offsets, self.sizes, self.boxes, self.flips, self.reduced, self.host, self.cut)
        return sum(int(array.nbytes) for array in arrays) + 64 * len(arrays)

    def select(self, rows: Any) -> PlannedCrops:
        """The batch of the images ``rows`` (indexes, in order): a view of the bytes when they lie one after the
        other (the images cut on the host hold none, so those the device cuts do)."""
        rows = np.asarray(rows, np.int64)
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        if len(rows) == 0:
            data, offsets = self.data[:0], np.zeros(1, np.int64)
        elif np.array_equal(starts[1:], ends[:-1]):
            data, offsets = self.data[int(starts[0]) : int(ends[-1])], np.append(starts, ends[-1]) - starts[0]
        else:
            data = np.concatenate([self.data[int(a) : int(z)] for a, z in zip(starts, ends)])
            offsets = np.concatenate(([0], np.cumsum(ends - starts)))
        taken = rows.tolist()
        host = self.host[rows]
        cut = self.cut[np.cumsum(self.host)[rows[host]] - 1] if host.any() else None
        return PlannedCrops(data, offsets, self.sizes[rows], self.boxes[rows], self.flips[rows], self.out, self.finish,
                            [self.keys[i] for i in taken], [self.urls[i] for i in taken], self.reduced[rows], host,
                            cut)  # fmt: skip

    def pin_memory(self) -> PlannedCrops:
        """The batch with its bytes and pixels in page-locked memory, by the pinner a framework registered
        (:func:`register_pinner`; itself when there is none): PyTorch's DataLoader calls this in its pin-memory
        thread (``pin_memory=True``), so that the copy to the device starts from there."""
        return self if not _PINNERS else _PINNERS[-1](self)  # type: ignore[no-any-return]

    def decoded_size(self, i: int) -> tuple[int, int]:
        """The size image ``i`` is decoded at: its stored size, or the reduced one its plan gives."""
        height, width = (int(v) for v in self.sizes[i])
        least_h, least_w = (int(v) for v in self.reduced[i])
        if least_h <= 0 and least_w <= 0:
            return height, width
        return reduced_size(height, width, least_h, least_w)

    def decoded_sizes(self) -> np.ndarray:
        """:meth:`decoded_size` of every image: ``B x 2`` int64, from the arrays (a call per reduced image only)."""
        sizes = self.sizes.astype(np.int64).reshape(-1, 2)
        for i in np.flatnonzero(self._reduced_rows(range(len(self)))).tolist():
            sizes[i] = self.decoded_size(i)
        return sizes

    def _reduced_rows(self, rows: range) -> np.ndarray:
        """Which of the images ``rows`` their plan reduces (decoded on the host at a DCT scale)."""
        return np.any(self.reduced[rows.start : rows.stop] > 0, axis=1)  # type: ignore[no-any-return]

    def jpeg_rows(self, rows: range) -> np.ndarray:
        """Which of the images ``rows`` are JPEGs the device may take (:func:`is_jpeg_data`, and not reduced by
        their plan): a bool array, from the bytes' first three at once."""
        at = np.arange(rows.start, rows.stop, dtype=np.int64)
        starts, lengths = self.offsets[at], self.offsets[at + 1] - self.offsets[at]
        whole = lengths >= 3
        last = max(len(self.data) - 1, 0)
        data = self.data if len(self.data) else np.zeros(1, np.uint8)
        jpeg = whole & ~self._reduced_rows(rows)
        for k, mark in enumerate(_JPEG_START):  # what is past a short image's end is read, and masked by ``whole``
            jpeg &= data[np.minimum(starts + k, last)] == mark
        return jpeg

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


def reduced_on_host(data: bytes, height: int, width: int, box: Any, out: tuple[int, int]) -> tuple[int, int]:
    """``(0, 0)`` for an image the device decodes whole; for one whose whole decode would take more than its bytes
    may inflate to (the decode limits' ``expansion``), or than :data:`DEVICE_IMAGE_BYTES`, the least size its crop
    needs, at which the host decodes it (see :mod:`.devicecrop`); refused when even that is over the limits."""
    limits = current_limits()
    allowed = limits.allowed(len(data))
    if 3 * height * width <= min(allowed, DEVICE_IMAGE_BYTES):
        return (0, 0)
    need = (min(math.ceil(out[0] * height / box[2]), height), min(math.ceil(out[1] * width / box[3]), width))
    small_h, small_w = reduced_size(height, width, *need)
    if 3 * small_h * small_w > allowed:
        raise limits.refuse(
            f"the image header says {width}x{height}, and its crop needs at least {small_w}x{small_h} of it from "
            f"{len(data):,} bytes:",
            3 * small_h * small_w,
            f"allowed:{len(data)}",
        )
    return need
