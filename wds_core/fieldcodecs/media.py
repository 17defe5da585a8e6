"""Audio and video fields to numpy arrays: soundfile for audio (the ``audio`` extra), PyAV for video (``video``).

Decoder handlers, used like an image spec::

    ds = wds.WebDataset(urls).decode(wds.AudioHandler(), wds.VideoHandler(frames=8, stride=2, size=(112, 112)))

* :class:`AudioHandler`: ``wav flac mp3 ogg oga aiff aif au`` fields become
  ``(samples, rate)``: a float32 (or int16/int32) array of frames x channels
  (frames only with ``mono=True``, the channels averaged) and the sample rate;
* :class:`VideoHandler`: ``mp4 webm mkv mov avi ogv m4v`` fields become a
  uint8 array of frames x height x width x 3 (RGB): ``frames`` frames taken
  every ``stride`` from ``start``, scaled by the decoder (swscale) to ``size``
  (``(h, w)``, or an int for the shorter side) without a full-size copy.  A
  clip shorter than asked gives the frames it has, unless ``pad=True`` repeats
  the last one.

The libraries were chosen by measuring (``benchmarks/README.md``): soundfile
reads wav 11x and mp3 1.8x faster than PyAV and is a 1.3 MB wheel; PyAV brings
its own FFmpeg for video.  A handler built without its library says which
extra to install.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import SpecError, install_hint
from .bounded import charge, check_pixels, current_limits

__all__ = ["AUDIO_EXTENSIONS", "VIDEO_EXTENSIONS", "AudioHandler", "VideoHandler", "decode_audio", "decode_video"]

AUDIO_EXTENSIONS = frozenset("wav flac mp3 ogg oga aiff aif au".split())
VIDEO_EXTENSIONS = frozenset("mp4 webm mkv mov avi ogv m4v".split())


_PACKAGES = {"av": "av", "soundfile": "soundfile"}  # the PyPI name of each module


def _require(module: str, extra: str, what: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise SpecError(f"{what} fields need {module}: {install_hint(_PACKAGES.get(module, module), extra)}") from None


def _extensions(given: str | Iterable[str] | None, default: frozenset[str]) -> frozenset[str]:
    if given is None:
        return default
    names = given.split() if isinstance(given, str) else list(given)
    return frozenset(n.lower().lstrip(".") for n in names)


def decode_audio(data: bytes, *, dtype: str = "float32", mono: bool = False) -> tuple[np.ndarray, int]:
    """``(samples, rate)`` of an audio file's bytes; samples are frames x channels (frames with ``mono``)."""
    soundfile = _require("soundfile", "audio", "audio")
    info = soundfile.info(io.BytesIO(data))  # the header: what reading it all would take, checked first
    nbytes = max(info.frames, 0) * max(info.channels, 1) * np.dtype(dtype).itemsize
    limits = current_limits()
    if nbytes > limits.field_bytes:
        what = f"the audio header says {info.frames:,} frames x {info.channels} channels of {dtype}:"
        raise limits.refuse(what, nbytes, "field_bytes")
    charge(nbytes, "an audio field")
    samples, rate = soundfile.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    if mono:
        samples = samples.mean(axis=1).astype(dtype) if samples.shape[1] > 1 else samples[:, 0]
    return samples, int(rate)


def _check_frames(frames: int | None, stride: int, start: int) -> None:
    if stride < 1 or start < 0 or (frames is not None and frames < 1):
        raise SpecError(f"need frames >= 1, stride >= 1, start >= 0; got {frames}, {stride}, {start}")


def _scaled_size(height: int, width: int, size: int | tuple[int, int] | None) -> tuple[int, int]:
    if size is None:
        return height, width
    if isinstance(size, int):
        if height <= width:
            return size, max(1, int(round(width * size / height)))
        return max(1, int(round(height * size / width))), size
    return int(size[0]), int(size[1])


def decode_video(
    data: bytes,
    *,
    frames: int | None = None,
    stride: int = 1,
    start: int = 0,
    size: int | tuple[int, int] | None = None,
    pad: bool = False,
) -> np.ndarray:
    """Frames of a video file's bytes as uint8 ``(n, h, w, 3)`` RGB; see :class:`VideoHandler`."""
    av = _require("av", "video", "video")
    _check_frames(frames, stride, start)
    picked: list[np.ndarray] = []
    limits = current_limits()
    taken = 0  # bytes of the frames picked so far, held to field_bytes frame by frame
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        # a decoded frame is the stream's size whatever is kept of it: checked from the header before decoding
        check_pixels(stream.codec_context.width or 0, stream.codec_context.height or 0, 4, "video")
        for index, frame in enumerate(container.decode(stream)):
            if index < start or (index - start) % stride:
                continue
            height, width = _scaled_size(frame.height, frame.width, size)
            taken += height * width * 3
            if taken > limits.field_bytes:
                raise limits.refuse(f"the video's frames picked so far ({len(picked) + 1}) take", taken, "field_bytes")
            picked.append(frame.to_ndarray(format="rgb24", width=width, height=height))
            if frames is not None and len(picked) == frames:
                break
    if not picked:
        raise ValueError(f"the video has no frame at index {start}")
    if pad and frames is not None and len(picked) < frames:
        picked.extend([picked[-1]] * (frames - len(picked)))
    stacked = np.stack(picked)
    charge(taken + stacked.nbytes, "a video field")  # the frames and their stack (padded ones are the last again)
    return stacked


class AudioHandler:
    """A decoder handler for audio fields (see the module doc); other fields get ``None``."""

    def __init__(
        self, extensions: str | Iterable[str] | None = None, *, dtype: str = "float32", mono: bool = False
    ) -> None:
        _require("soundfile", "audio", "audio")
        if dtype not in ("float32", "float64", "int16", "int32"):
            raise SpecError(f"audio dtype must be float32, float64, int16 or int32, got {dtype!r}")
        self.extensions = _extensions(extensions, AUDIO_EXTENSIONS)
        self.dtype, self.mono = dtype, mono

    def __call__(self, key: str, data: bytes) -> Any:
        if key.rsplit(".", 1)[-1].lower() not in self.extensions:
            return None
        return decode_audio(data, dtype=self.dtype, mono=self.mono)

    def __repr__(self) -> str:
        return f"AudioHandler(dtype={self.dtype!r}, mono={self.mono})"


class VideoHandler:
    """A decoder handler for video fields (see the module doc); other fields get ``None``."""

    def __init__(
        self,
        frames: int | None = None,
        stride: int = 1,
        *,
        start: int = 0,
        size: int | tuple[int, int] | None = None,
        pad: bool = False,
        extensions: str | Iterable[str] | None = None,
    ) -> None:
        _require("av", "video", "video")
        _check_frames(frames, stride, start)
        self.frames, self.stride, self.start, self.size, self.pad = frames, stride, start, size, pad
        self.extensions = _extensions(extensions, VIDEO_EXTENSIONS)

    def __call__(self, key: str, data: bytes) -> Any:
        if key.rsplit(".", 1)[-1].lower() not in self.extensions:
            return None
        return decode_video(
            data, frames=self.frames, stride=self.stride, start=self.start, size=self.size, pad=self.pad
        )

    def __repr__(self) -> str:
        return f"VideoHandler(frames={self.frames}, stride={self.stride}, start={self.start}, size={self.size})"
