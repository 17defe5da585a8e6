"""The compiled region decoder (jpegregion.c): a region's pixels are the whole decode's, and bad data is refused."""

import io
import os
import threading

import numpy as np
import PIL.Image
import pytest

from wds_core.fieldcodecs import jpeg as jpegmod
from wds_core.fieldcodecs.bounded import DecodeLimitError
from wds_core.fieldcodecs.jpeg import decode_jpeg_region, jpeg_size, region_decoding, set_jpeg_decoder

from .test_jpeg import jpeg, photo

# CI builds it (a compiler and libjpeg-turbo's headers are there) and sets this, so a build that silently left
# it out fails here instead of skipping
if os.environ.get("WDS_REQUIRE_COMPILED") != "1" and not region_decoding():
    pytest.skip(
        "the compiled region decoder is not built here (setup.py) or is turned off (WDS_PURE_PYTHON)",
        allow_module_level=True,
    )


@pytest.fixture
def decoder_choice():
    yield
    set_jpeg_decoder("auto")


def pillow(data, divisor=1):
    """Pillow's decode of the whole image (libjpeg-turbo, accurate DCT) reduced by ``divisor`` (its draft scales
    follow from the size asked for: the result is None when it would pick another)."""
    img = PIL.Image.open(io.BytesIO(data))
    if divisor > 1:
        width, height = img.size
        img.draft("RGB", (max(1, width // divisor), max(1, height // divisor)))
        if img.size != (-(-width // divisor), -(-height // divisor)):
            return None
    return np.asarray(img.convert("RGB"))


def images():
    rng = np.random.default_rng(3)
    for h, w in [(375, 500), (333, 517), (17, 241), (1, 1), (9, 40)]:
        for subsampling in (0, 1, 2):  # 4:4:4, 4:2:2, 4:2:0
            for progressive in (False, True):
                yield jpeg(photo(rng, h, w), quality=85, subsampling=subsampling, progressive=progressive)
    yield jpeg(rng.integers(0, 256, (61, 83), dtype=np.uint8))  # greyscale: RGB out, as Pillow's convert gives


def regions(rng, height, width):
    yield 0, height, 0, width  # all of it
    yield height - 1, height, width - 1, width  # the last pixel
    for _ in range(6):
        top, left = int(rng.integers(0, height)), int(rng.integers(0, width))
        yield top, int(rng.integers(top + 1, height + 1)), left, int(rng.integers(left + 1, width + 1))


@pytest.mark.slow
def test_a_region_has_the_pixels_of_the_whole_image_at_every_scale():
    rng = np.random.default_rng(4)
    checked = compared = 0
    for data in images():
        size = jpeg_size(data)
        assert size is not None
        for divisor in (1, 2, 4, 8):
            scaled = (-(-size[0] // divisor), -(-size[1] // divisor))
            reference = decode_jpeg_region(data, size, divisor, (0, scaled[0], 0, scaled[1]))  # no skip, no crop
            assert reference is not None and reference.shape == (*scaled, 3)
            theirs = pillow(data, divisor)
            if theirs is not None:
                np.testing.assert_array_equal(reference, theirs)
                compared += 1
            for top, bottom, left, right in regions(rng, *reference.shape[:2]):
                got = decode_jpeg_region(data, size, divisor, (top, bottom, left, right))
                assert got is not None
                assert got.dtype == np.uint8 and got.shape == (bottom - top, right - left, 3)
                np.testing.assert_array_equal(got, reference[top:bottom, left:right], err_msg=f"{divisor} {size}")
                checked += 1
    assert checked > 500 and compared > 60


def test_threads_decode_at_once_and_each_gets_its_own_pixels():
    data = [jpeg(photo(np.random.default_rng(i), 240, 320), quality=90) for i in range(4)]
    want = [pillow(d)[20:200, 30:300] for d in data]
    failures = []

    def work(i):
        for _ in range(20):
            got = decode_jpeg_region(data[i], (240, 320), 1, (20, 200, 30, 300))
            if got is None or not np.array_equal(got, want[i]):
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_truncated_corrupt_and_foreign_data_are_refused_not_decoded():
    data = jpeg(photo(np.random.default_rng(5), 120, 160), quality=90)
    size = jpeg_size(data)
    assert size == (120, 160)
    # truncated: the rows past the cut are missing (libjpeg would pad them grey with a warning)
    assert decode_jpeg_region(data[: len(data) // 2], size, 1, (0, 120, 0, 160)) is None
    # the rows before the cut still decode: nothing past the region is read
    assert decode_jpeg_region(data[: len(data) // 2], size, 1, (0, 8, 0, 160)) is not None
    # a corrupt scan: a marker in the middle of the entropy-coded data (libjpeg's warning is refused)
    for marker in (b"\xff\xd4", b"\xff\xc4\x00\x03"):
        broken = bytearray(data)
        broken[len(data) // 2 : len(data) // 2 + len(marker)] = marker
        assert decode_jpeg_region(bytes(broken), size, 1, (0, 120, 0, 160)) is None
    for other in (b"", b"\xff\xd8\xff", b"not a jpeg", data[:20]):
        assert jpeg_size(other) is None
    cmyk = PIL.Image.new("CMYK", (16, 16), (10, 20, 30, 40))
    out = io.BytesIO()
    cmyk.save(out, "JPEG")
    assert jpeg_size(out.getvalue()) is None  # Pillow's own conversion for those


@pytest.mark.parametrize("bounds", [(0, 0, 0, 10), (-1, 5, 0, 5), (0, 121, 0, 5), (0, 5, 7, 161), (5, 4, 0, 5)])
def test_a_region_outside_the_image_is_an_error(bounds):
    data = jpeg(photo(np.random.default_rng(6), 120, 160))
    with pytest.raises(ValueError, match="not inside"):
        decode_jpeg_region(data, (120, 160), 1, bounds)


def test_a_huge_declared_size_is_held_to_the_limits_before_any_buffer(monkeypatch):
    data = bytearray(jpeg(photo(np.random.default_rng(7), 16, 16)))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") * 2  # the frame header says 60000 x 60000
    assert jpeg_size(bytes(data)) is None  # past Pillow's decompression-bomb limit: Pillow's policy decides
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", None)
    assert jpeg_size(bytes(data)) == (60000, 60000)
    with pytest.raises(DecodeLimitError):
        decode_jpeg_region(bytes(data), (60000, 60000), 1, (0, 60000, 0, 60000))
    assert decode_jpeg_region(bytes(data), (60000, 60000), 8, (0, 1, 0, 4)) is None  # the scan is 16 x 16: refused


def test_the_pillow_choice_turns_it_off(decoder_choice):
    data = jpeg(photo(np.random.default_rng(8), 32, 32))
    set_jpeg_decoder("pillow")
    assert not region_decoding() and jpeg_size(data) is None
    set_jpeg_decoder("auto")
    assert region_decoding() and jpeg_size(data) == (32, 32)


def test_without_the_compiled_module_nothing_is_region_decoded(monkeypatch):
    monkeypatch.setattr(jpegmod, "_region_module", lambda: None)
    assert not region_decoding()
    assert jpeg_size(jpeg(photo(np.random.default_rng(9), 32, 32))) is None
