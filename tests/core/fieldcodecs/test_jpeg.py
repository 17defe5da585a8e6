"""JPEG decoding: the libjpeg-turbo path (the jpeg extra) gives Pillow's pixels, and falls back to Pillow."""

import io
import os
import subprocess
import sys

import numpy as np
import PIL.Image
import PIL.ImageFile
import pytest

from wds_core import SpecError
from wds_core.fieldcodecs import ImageHandler
from wds_core.fieldcodecs.jpeg import decode_jpeg, is_jpeg, jpeg_decoder, set_jpeg_decoder

pytest.importorskip("simplejpeg")  # in the test extra: both paths run here


@pytest.fixture
def decoder_choice():
    yield
    set_jpeg_decoder("auto")


def jpeg(array, **options):
    out = io.BytesIO()
    PIL.ImageFile.MAXBLOCK = max(PIL.ImageFile.MAXBLOCK, 1 << 22)  # progressive saves need room
    PIL.Image.fromarray(array).save(out, format="JPEG", **options)
    return out.getvalue()


def photo(rng, h, w):
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([np.sin(9 * x + rng.uniform(0, 6)), np.cos(7 * y), np.sin(5 * (x + y))], -1)
    return (np.clip(0.5 + 0.4 * base + rng.normal(0, 0.1, (h, w, 3)), 0, 1) * 255).astype(np.uint8)


def cases():
    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate([(1, 1), (7, 13), (64, 64), (375, 500), (241, 17)]):
        for subsampling in (0, 1, 2):
            for progressive in (False, True):
                yield jpeg(photo(rng, h, w), quality=60 + 8 * i, subsampling=subsampling, progressive=progressive)
    yield jpeg(rng.integers(0, 256, (33, 45), dtype=np.uint8))  # a greyscale JPEG
    yield jpeg(rng.integers(0, 256, (33, 45, 3), dtype=np.uint8), quality=100)


SPECS = ["l8", "rgb8", "rgba8", "l", "rgb", "rgba", "pil", "pill", "pilrgba"]


@pytest.mark.parametrize("spec", SPECS)
def test_both_decoders_give_the_same_pixels(spec, decoder_choice):
    for data in cases():
        set_jpeg_decoder("pillow")
        theirs = ImageHandler(spec)(".jpg", data)
        set_jpeg_decoder("simplejpeg")
        ours = ImageHandler(spec)(".jpg", data)
        if spec.startswith("pil"):
            assert ours.mode == theirs.mode and ours.size == theirs.size
            ours, theirs = np.asarray(ours), np.asarray(theirs)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        assert np.array_equal(ours, theirs)  # identical, not merely close
        assert ours.flags.writeable or spec.startswith("pil")


def test_the_fast_path_is_taken_and_pil_results_keep_their_metadata(decoder_choice):
    exif = PIL.Image.Exif()
    exif[0x0112] = 6  # orientation, left as it is (Pillow's decode does not rotate either)
    data = jpeg(photo(np.random.default_rng(1), 30, 40), exif=exif, dpi=(300, 300))
    assert jpeg_decoder() == "simplejpeg" and decode_jpeg(data, "RGB") is not None
    img = ImageHandler("pil")(".jpg", data)
    assert img.info["dpi"] == pytest.approx((300, 300)) and img.getexif()[0x0112] == 6


def test_what_the_fast_path_does_not_take_goes_to_pillow(decoder_choice):
    rgb = photo(np.random.default_rng(2), 20, 30)
    cmyk = io.BytesIO()
    PIL.Image.fromarray(rgb).convert("CMYK").save(cmyk, format="JPEG")
    assert decode_jpeg(cmyk.getvalue(), "RGB") is None
    set_jpeg_decoder("pillow")
    expected = ImageHandler("rgb8")(".jpg", cmyk.getvalue())
    set_jpeg_decoder("auto")
    assert np.array_equal(ImageHandler("rgb8")(".jpg", cmyk.getvalue()), expected)

    png = io.BytesIO()
    PIL.Image.fromarray(rgb).save(png, format="PNG")
    assert not is_jpeg(png.getvalue()) and decode_jpeg(png.getvalue(), "RGB") is None
    # a JPEG saved under a .png name is decoded all the same
    assert np.array_equal(
        ImageHandler("rgb8")(".png", jpeg(rgb, quality=95)), ImageHandler("rgb8")(".jpg", jpeg(rgb, quality=95))
    )


def test_a_truncated_jpeg_fails_as_it_does_with_pillow(decoder_choice):
    data = jpeg(photo(np.random.default_rng(3), 64, 64))[:-200]
    assert decode_jpeg(data, "RGB") is None  # libjpeg's "premature end" warning: Pillow decides
    errors = []
    for choice in ("pillow", "simplejpeg"):
        set_jpeg_decoder(choice)
        with pytest.raises(OSError, match="truncated") as info:
            ImageHandler("rgb8")(".jpg", data)
        errors.append(str(info.value))
    assert errors[0] == errors[1]


def test_choosing_the_decoder(decoder_choice):
    with pytest.raises(SpecError, match="must be one of"):
        set_jpeg_decoder("opencv")
    set_jpeg_decoder("pillow")
    assert jpeg_decoder() == "pillow"
    set_jpeg_decoder("auto")
    assert jpeg_decoder() == "simplejpeg"


@pytest.mark.slow
def test_without_simplejpeg_or_with_wds_jpeg_pillow_decoding_uses_pillow():
    code = (
        "import sys\n"
        "sys.modules['simplejpeg'] = None  # as if the extra were not installed\n"
        "from wds_core.fieldcodecs.jpeg import jpeg_decoder, set_jpeg_decoder\n"
        "from wds_core import SpecError\n"
        "print(jpeg_decoder())\n"
        "try:\n    set_jpeg_decoder('simplejpeg')\nexcept SpecError as exn:\n    print('jpeg' in str(exn))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["pillow", "True"]
    env_code = "from wds_core.fieldcodecs.jpeg import jpeg_decoder; print(jpeg_decoder())"
    env = {**os.environ, "WDS_JPEG": "pillow"}
    out = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["pillow"]


def test_pillows_decompression_bomb_limit_holds_on_the_fast_path(decoder_choice, monkeypatch):
    data = jpeg(photo(np.random.default_rng(4), 60, 80))  # 4,800 pixels
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 2000)  # so this image is "more than twice the limit"
    for choice in ("pillow", "simplejpeg"):
        set_jpeg_decoder(choice)
        assert decode_jpeg(data, "RGB") is None  # the fast path leaves it to Pillow's policy
        with pytest.raises(PIL.Image.DecompressionBombError):
            ImageHandler("rgb8")(".jpg", data)
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 4000)  # above the limit, below twice: a warning
    with pytest.warns(PIL.Image.DecompressionBombWarning):
        ImageHandler("rgb8")(".jpg", data)
