"""Image specs and image encoding, checked against Pillow and webdataset 1.0.2's ImageHandler."""

import io

import numpy as np
import PIL.Image
import pytest
import webdataset.autodecode as wd_auto

from wds_core import ImageSpec, SpecError, register_image_spec
from wds_core.fieldcodecs import ImageHandler, encode_image, image_spec, imagehandler


def png_bytes(array, mode=None):
    out = io.BytesIO()
    PIL.Image.fromarray(array, mode).save(out, format="PNG")
    return out.getvalue()


RGB = (np.arange(5 * 7 * 3) * 7 % 256).astype(np.uint8).reshape(5, 7, 3)
GREY = (np.arange(5 * 7) * 5 % 256).astype(np.uint8).reshape(5, 7)
RGBA = np.dstack([RGB, np.full((5, 7), 200, np.uint8)])


@pytest.mark.parametrize("spec", ["l8", "rgb8", "rgba8", "l", "rgb", "rgba"])
@pytest.mark.parametrize("source", [RGB, GREY, RGBA], ids=["rgb", "grey", "rgba"])
def test_numpy_specs_match_webdataset(spec, source):
    data = png_bytes(source)
    ours = ImageHandler(spec)(".png", data)
    theirs = wd_auto.ImageHandler(spec)(".png", data)
    assert ours.shape == theirs.shape
    assert ours.dtype == (np.uint8 if spec.endswith("8") else np.float32)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6 if ours.dtype == np.float32 else 0)
    assert ours.flags.writeable


@pytest.mark.parametrize(
    "spec,mode", [("pil", "RGB"), ("PIL", "RGB"), ("pilrgb", "RGB"), ("pill", "L"), ("pilrgba", "RGBA")]
)
def test_pil_specs_give_images_in_the_mode(spec, mode):
    img = ImageHandler(spec)(".png", png_bytes(RGB))
    assert isinstance(img, PIL.Image.Image) and img.mode == mode and img.size == (7, 5)


def test_handler_passes_on_non_images_and_matches_extensions_case_insensitively():
    handler = imagehandler("rgb8")
    assert handler(".txt", b"hello") is None
    assert handler(".mpg", b"video") is None  # a video container, not an image
    assert handler(".seg.PNG", png_bytes(RGB)).shape == (5, 7, 3)
    only_png = ImageHandler("rgb8", extensions="png")
    assert only_png(".jpg", b"x") is None


@pytest.mark.parametrize("ext", ["png", "ppm", "bmp", "tiff", "gif", "webp"])
def test_every_written_format_decodes(ext):
    data = encode_image(RGB, ext)
    out = ImageHandler("rgb8")("." + ext, data)
    if ext in ("gif", "webp"):  # palette / lossy by default
        assert out.shape == RGB.shape
    else:
        np.testing.assert_array_equal(out, RGB)


def test_encoding_floats_round_trips_through_rgb():
    floats = RGB.astype(np.float32) / 255.0
    back = ImageHandler("rgb")(".png", encode_image(floats, "png"))
    np.testing.assert_array_equal(np.round(back * 255).astype(np.uint8), RGB)


def test_jpeg_is_close_and_grey_and_single_channel_work():
    back = ImageHandler("rgb8")(".jpg", encode_image(RGB, "jpg"))
    assert back.shape == RGB.shape and np.abs(back.astype(int) - RGB).mean() < 12
    assert ImageHandler("l8")(".png", encode_image(GREY[:, :, None], "png")).shape == GREY.shape


@pytest.mark.parametrize(
    "image,message",
    [
        (np.full((4, 4, 3), 2.0, np.float32), r"\[0, 1\]"),
        (np.zeros((4, 4, 3), np.int32), "dtype"),
        (np.zeros((4, 4, 2), np.uint8), "shape"),
        (RGBA, "alpha"),
    ],
)
def test_bad_images_are_refused_with_the_reason(image, message):
    with pytest.raises(ValueError, match=message):
        encode_image(image, "jpg")


def test_unknown_specs_and_pluggable_specs():
    with pytest.raises(SpecError, match="unknown image spec 'rgb9'"):
        ImageHandler("rgb9")
    register_image_spec("test-shape", ImageSpec("RGB", lambda img: img.size))
    assert ImageHandler("TEST-SHAPE")(".png", png_bytes(RGB)) == (7, 5)
    assert image_spec("Rgb8") is image_spec("rgb8")


def jpeg(array, **options):
    out = io.BytesIO()
    PIL.Image.fromarray(array).save(out, format="JPEG", **options)
    return out.getvalue()


PHOTO = (np.random.default_rng(1).normal(128, 40, (37, 53, 3)).clip(0, 255)).astype(np.uint8)


@pytest.mark.parametrize(
    "data",
    [
        jpeg(PHOTO),
        jpeg(PHOTO, progressive=True),
        jpeg(PHOTO, subsampling=0, quality=95),
        jpeg(PHOTO, optimize=True),
        jpeg(PHOTO[:, :, 0]),
        jpeg(PHOTO, exif=PIL.Image.Exif().tobytes()),
        jpeg(PHOTO.copy(), icc_profile=b"\0" * 200),
    ],
    ids=["baseline", "progressive", "444", "optimized", "grey", "exif", "icc"],
)
@pytest.mark.parametrize("spec", ["rgb8", "l8", "rgb", "rgba8", "pil"])
def test_jpeg_variants_decode_like_pillow(data, spec):
    mode = image_spec(spec).mode
    expected = np.asarray(PIL.Image.open(io.BytesIO(data)).convert(mode))
    got = ImageHandler(spec)(".jpg", data)
    got = np.asarray(got) if spec == "pil" else got
    if spec == "rgb":
        expected = expected.astype(np.float32) / 255.0
    np.testing.assert_array_equal(got, expected)
    assert got.flags.c_contiguous


def test_cmyk_jpegs_are_converted_like_pillow_does():
    cmyk = PIL.Image.fromarray(PHOTO).convert("CMYK")
    out = io.BytesIO()
    cmyk.save(out, format="JPEG")
    expected = np.asarray(PIL.Image.open(io.BytesIO(out.getvalue())).convert("RGB"))
    np.testing.assert_array_equal(ImageHandler("rgb8")(".jpg", out.getvalue()), expected)


def test_a_truncated_jpeg_is_an_error_not_a_grey_image():
    data = jpeg(PHOTO)
    with pytest.raises(OSError):
        ImageHandler("rgb8")(".jpg", data[: len(data) // 2])
