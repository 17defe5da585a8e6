"""Audio (soundfile) and video (PyAV) fields on clips the tests write, through the decode stage."""

import io
import subprocess
import sys

import numpy as np
import pytest

import wds_core as wds
from tests.conftest import write_shard
from wds_core import AudioHandler, DecodingError, SpecError, VideoHandler

soundfile = pytest.importorskip("soundfile")
av = pytest.importorskip("av")

RATE = 16000


def tone(seconds=0.5):
    t = np.arange(int(RATE * seconds)) / RATE
    return (np.stack([np.sin(2 * np.pi * 440 * t), 0.5 * np.sin(2 * np.pi * 220 * t)], -1) * 0.5).astype(np.float32)


def audio_bytes(samples, fmt):
    out = io.BytesIO()
    soundfile.write(out, samples, RATE, format=fmt)
    return out.getvalue()


def video_bytes(n=20, h=48, w=64, container="mp4", codec="libx264"):
    """Frame i is a flat grey of level 10*i, so the frames picked can be told apart after lossy coding."""
    out = io.BytesIO()
    with av.open(out, "w", format=container) as box:
        stream = box.add_stream(codec, rate=10)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for i in range(n):
            frame = av.VideoFrame.from_ndarray(np.full((h, w, 3), 10 * i, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                box.mux(packet)
        for packet in stream.encode():
            box.mux(packet)
    return out.getvalue()


def levels(frames):
    return [int(round(f.mean() / 10)) for f in frames]


@pytest.mark.parametrize("fmt, lossless", [("WAV", True), ("FLAC", True), ("MP3", False), ("OGG", False)])
def test_audio_fields_decode_to_frames_by_channels(tmp_path, fmt, lossless):
    samples = tone()
    ext = fmt.lower()
    path = write_shard(tmp_path / "a.tar", [{"__key__": "a", ext: audio_bytes(samples, fmt), "txt": b"hi"}])
    sample = next(iter(wds.WebDataset(path).decode(AudioHandler())))
    decoded, rate = sample[ext]
    assert rate == RATE and decoded.dtype == np.float32 and decoded.shape[1] == 2 and sample["txt"] == "hi"
    if lossless:
        assert decoded.shape == samples.shape and np.abs(decoded - samples).max() < 1e-4
    else:
        assert abs(len(decoded) - len(samples)) < RATE // 10  # codec padding


def test_audio_options():
    data = audio_bytes(tone(), "WAV")
    mono, _ = AudioHandler(mono=True)("x.wav", data)
    assert mono.shape == (len(tone()),) and np.allclose(mono, tone().mean(axis=1), atol=1e-4)
    ints, _ = AudioHandler(dtype="int16")("x.wav", data)
    assert ints.dtype == np.int16
    assert AudioHandler()("x.jpg", data) is None and AudioHandler("snd")("x.snd", data)[1] == RATE
    with pytest.raises(SpecError, match="dtype"):
        AudioHandler(dtype="uint8")


def test_video_frames_at_a_stride_resized(tmp_path):
    data = video_bytes()
    path = write_shard(tmp_path / "v.tar", [{"__key__": "v", "mp4": data}])
    clip = next(iter(wds.WebDataset(path).decode(VideoHandler(frames=4, stride=3, start=2, size=(24, 32)))))["mp4"]
    assert clip.shape == (4, 24, 32, 3) and clip.dtype == np.uint8
    assert levels(clip) == [2, 5, 8, 11]
    everything = VideoHandler()("x.mp4", data)
    assert everything.shape == (20, 48, 64, 3) and levels(everything) == list(range(20))
    assert VideoHandler(size=24)("x.mp4", data).shape[1:] == (24, 32, 3)  # shorter side


def test_short_clips_pad_or_give_what_they_have():
    data = video_bytes(n=5)
    assert len(VideoHandler(frames=8)("x.mp4", data)) == 5
    padded = VideoHandler(frames=8, pad=True)("x.mp4", data)
    assert len(padded) == 8 and levels(padded) == [0, 1, 2, 3, 4, 4, 4, 4]
    with pytest.raises(SpecError):
        VideoHandler(stride=0)


def test_webm_too():
    if "libvpx" not in av.codecs_available:
        pytest.skip("this PyAV has no VP8 encoder to write the test clip")
    clip = VideoHandler(frames=3)("x.webm", video_bytes(container="webm", codec="libvpx"))
    assert clip.shape == (3, 48, 64, 3) and levels(clip) == [0, 1, 2]


def test_a_broken_clip_is_a_decoding_error_naming_the_sample(tmp_path):
    path = write_shard(tmp_path / "b.tar", [{"__key__": "bad", "mp4": b"not a video", "wav": b"nor audio"}])
    with pytest.raises(DecodingError) as info:
        list(wds.WebDataset(path).decode(VideoHandler(frames=2), AudioHandler()))
    assert info.value.key == "bad" and "b.tar" in str(info.value)


@pytest.mark.slow
def test_missing_libraries_name_the_extra():
    code = (
        "import sys\n"
        "sys.modules['av'] = sys.modules['soundfile'] = None\n"
        "from wds_core import AudioHandler, VideoHandler, SpecError\n"
        "for make in (VideoHandler, AudioHandler):\n"
        "    try:\n        make()\n    except SpecError as exn:\n        print(str(exn).split(': ')[-1])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        'pip install av (or pip install -e ".[video]" in your clone of wds)',
        'pip install soundfile (or pip install -e ".[audio]" in your clone of wds)',
    ]
