"""crop_images: torchvision's crop boxes, decoding at reduced JPEG scale, pixels close to the full-size path."""

import io
import math
import subprocess
import sys
import textwrap

import numpy as np
import PIL.Image
import pytest

import wds_core as wds
from tests.conftest import write_shard
from wds_core import DecodingError, SpecError
from wds_core.fieldcodecs import set_jpeg_decoder
from wds_core.fieldcodecs.jpeg import region_decoding
from wds_core.stages import crop as imageops
from wds_core.stages.crop import (
    ImageCrop,
    Uniform,
    center_crop_box,
    decode_at_scale,
    image_crop,
    random_resized_crop_box,
)
from wds_core.testing import check_resume


def photo(seed, h, w):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([np.sin(9 * x + seed), np.cos(7 * y), np.sin(5 * (x + y))], -1)
    return (np.clip(0.5 + 0.4 * base + rng.normal(0, 0.03, (h, w, 3)), 0, 1) * 255).astype(np.uint8)


def encode(array, fmt="JPEG"):
    out = io.BytesIO()
    PIL.Image.fromarray(array).save(out, format=fmt, quality=95)
    return out.getvalue()


class Scripted:
    """Random numbers given in advance, to follow the algorithm by hand."""

    def __init__(self, uniforms, integers=()):
        self.uniforms, self.integers = list(uniforms), list(integers)

    def uniform(self, low, high):
        return low + (high - low) * self.uniforms.pop(0)

    def integer(self, n):
        value = self.integers.pop(0)
        assert 0 <= value < n
        return value


def test_random_resized_crop_box_follows_torchvisions_algorithm():
    # 1st try: area fraction 0.08 + 0.92*0.5 = 0.54 of 400x300, aspect exp(mid of log(3/4)..log(4/3)) = 1
    box = random_resized_crop_box(300, 400, (0.08, 1.0), (3 / 4, 4 / 3), Scripted([0.5, 0.5], [7, 11]))
    side = int(round(math.sqrt(0.54 * 120000)))
    assert box == (7, 11, side, side)
    # tries that do not fit are skipped: the whole area at the widest ratio is wider than the image
    # (the whole area at ratio 3/4 is 300 wide and 400 high: too high; then 8% at 3/4: 85 wide, 113 high)
    box = random_resized_crop_box(300, 400, (0.08, 1.0), (3 / 4, 4 / 3), Scripted([1.0, 0.0, 0.0, 0.0], [5, 6]))
    assert box == (5, 6, 113, 85)
    # ten misfits: the centred fallback, ratio clamped (a 100x1000 strip is wider than 4/3)
    box = random_resized_crop_box(100, 1000, (0.9, 1.0), (3 / 4, 4 / 3), Scripted([1.0, 0.5] * 10))
    assert box == (0, (1000 - 133) // 2, 100, 133)


def test_boxes_fit_and_follow_the_seed():
    for seed in range(300):
        h, w = 50 + seed % 400, 60 + (seed * 7) % 500
        top, left, bh, bw = random_resized_crop_box(h, w, (0.08, 1.0), (3 / 4, 4 / 3), Uniform(seed))
        assert 0 <= top and 0 <= left and 0 < bh and 0 < bw and top + bh <= h and left + bw <= w
    same = [random_resized_crop_box(300, 400, (0.08, 1), (0.75, 4 / 3), Uniform(5)) for _ in range(2)]
    assert same[0] == same[1] != random_resized_crop_box(300, 400, (0.08, 1), (0.75, 4 / 3), Uniform(6))


def test_center_crop_box_is_resize_then_centre():
    top, left, h, w = center_crop_box(375, 500, 224, 224, 256)  # resized to 256x341, centre 224
    assert (h, w) == pytest.approx((224 * 375 / 256, 224 * 500 / 341))
    assert top == pytest.approx(16 * 375 / 256) and left == pytest.approx(58 * 500 / 341)


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["simplejpeg", "pillow"])
def test_jpegs_decode_at_the_smallest_scale_that_covers_the_crop(decoder):
    pytest.importorskip("simplejpeg")
    set_jpeg_decoder(decoder)
    try:
        data = encode(photo(1, 1600, 2000))
        assert decode_at_scale(data, 200, 250).size == (250, 200)  # 1/8
        assert decode_at_scale(data, 201, 250).size == (500, 400)  # 1/4: 1/8 would be too small
        # no scale but Pillow's (1/2, 1/4, 1/8): libjpeg-turbo's 7/8 would fit, and is slower than the full size
        assert decode_at_scale(data, 1300, 1700).size == (2000, 1600)
        assert decode_at_scale(encode(photo(1, 1600, 2000), "PNG"), 200, 250).size == (2000, 1600)  # not a JPEG
    finally:
        set_jpeg_decoder("auto")


def reference(array, box, out_size, flip=False):
    """The full-size path: the whole image, cut and resized by Pillow (as torchvision does for PIL)."""
    top, left, h, w = box
    img = PIL.Image.fromarray(array).resize(
        out_size[::-1], PIL.Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
    )
    out = np.asarray(img)
    return out[:, ::-1] if flip else out


HAVE_OPENCV = imageops._opencv() is not None
INTERPOLATIONS = ["pillow"] + (["opencv"] if HAVE_OPENCV else [])


def opencv_reference(array, box, out_size, flip=False):
    """OpenCV's path on the whole image: the box rounded to whole pixels, bilinear without antialiasing (area
    averaging when it shrinks by more than 2x)."""
    import cv2

    top, left, h, w = box
    y0, x0, y1, x1 = round(top), round(left), round(top + h), round(left + w)
    far = y1 - y0 > 2 * out_size[0] or x1 - x0 > 2 * out_size[1]  # shrinking more than 2x: averaged
    out = cv2.resize(array[y0:y1, x0:x1], out_size[::-1], interpolation=cv2.INTER_AREA if far else cv2.INTER_LINEAR)
    return out[:, ::-1] if flip else out


@pytest.mark.parametrize("interpolation", INTERPOLATIONS)
@pytest.mark.parametrize("policy", ["random-resized", "center"])
def test_pixels_are_close_to_the_full_size_path(policy, interpolation):
    crop = image_crop(224, policy, interpolation=interpolation)
    for seed in range(6):
        array = photo(seed, 900, 1200)
        data = encode(array)
        full = np.asarray(PIL.Image.open(io.BytesIO(data)).convert("RGB"))
        got = crop.cut(data, Uniform(seed))
        box, out_size, _ = crop.plan(900, 1200, Uniform(seed))
        want = reference(full, box, out_size)
        assert got.shape == want.shape == (224, 224, 3) and got.dtype == np.uint8 and got.flags.c_contiguous
        # DCT scaling vs full decode + resize; OpenCV's bilinear also keeps detail Pillow's antialiasing averages
        assert np.abs(got.astype(int) - want).mean() < (2.0 if interpolation == "pillow" else 4.0)


def test_png_and_decoded_inputs_give_exactly_the_full_size_path():
    array = photo(3, 300, 400)
    crop = image_crop((96, 128), flip=1.0, interpolation="pillow")
    box, out_size, flip = crop.plan(300, 400, Uniform(9))
    want = reference(array, box, out_size, flip)
    assert flip and np.array_equal(crop.cut(encode(array, "PNG"), Uniform(9)), want)
    assert np.array_equal(crop.cut(array, Uniform(9)), want)  # an array decoded earlier
    assert np.array_equal(crop.cut(PIL.Image.fromarray(array), Uniform(9)), want)


@pytest.mark.skipif(not HAVE_OPENCV, reason="the cv extra (OpenCV) is not installed")
def test_opencv_cuts_png_and_decoded_inputs_as_it_would_the_whole_image():
    array = photo(3, 300, 400)
    crop = image_crop((96, 128), flip=1.0, interpolation="opencv")
    box, out_size, flip = crop.plan(300, 400, Uniform(9))
    want = opencv_reference(array, box, out_size, flip)
    for given in (encode(array, "PNG"), array, PIL.Image.fromarray(array)):
        got = crop.cut(given, Uniform(9))
        assert np.array_equal(got, want) and got.flags.c_contiguous and got.flags.writeable
    auto = image_crop((96, 128), flip=1.0).cut(array, Uniform(9))
    assert np.array_equal(auto, want)  # "auto" is OpenCV when it is installed
    enlarged = image_crop(256, "center", interpolation="opencv").cut(array, Uniform(1))
    exact = image_crop(256, "center", interpolation="pillow").cut(array, Uniform(1))
    assert np.abs(enlarged.astype(int) - exact).mean() < 2.0  # enlarging: bilinear in both
    big = photo(2, 600, 800)  # a PNG shrunk 18x: no DCT scale to bring it near the output first
    far = image_crop(32, "center", interpolation="opencv").cut(encode(big, "PNG"), Uniform(0))
    box, out_size, _ = image_crop(32, "center").plan(600, 800, Uniform(0))
    assert np.array_equal(far, opencv_reference(big, box, out_size))
    averaged = image_crop(32, "center", interpolation="pillow").cut(big, Uniform(0))
    assert np.abs(far.astype(int) - averaged).mean() < 3.0  # averaged too, not aliased


def test_interpolation_is_checked_when_the_stage_is_made(monkeypatch):
    with pytest.raises(SpecError, match="interpolation must be one of"):
        image_crop(32, interpolation="bicubic")
    monkeypatch.setattr(imageops, "_opencv", lambda: None)
    with pytest.raises(SpecError, match=r'pip install opencv-python-headless \(or pip install -e "\.\[cv\]"'):
        image_crop(32, interpolation="opencv")
    array = photo(4, 120, 160)  # "auto" without OpenCV: Pillow's pixels
    assert np.array_equal(image_crop(32, "center").cut(array, Uniform(0)),
                          image_crop(32, "center", interpolation="pillow").cut(array, Uniform(0)))  # fmt: skip


def test_layouts_normalisation_and_bad_options():
    array = photo(4, 120, 160)
    chw = image_crop(32, "center", layout="chw").cut(array, Uniform(0))
    hwc = image_crop(32, "center").cut(array, Uniform(0))
    assert chw.shape == (3, 32, 32) and np.array_equal(chw, hwc.transpose(2, 0, 1)) and chw.flags.c_contiguous
    norm = image_crop(32, "center", mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)).cut(array, Uniform(0))
    assert norm.dtype == np.float32 and np.allclose(norm, (hwc / 255.0 - 0.5) / 0.25, atol=1e-5)
    assert image_crop(64, "shorter").cut(array, Uniform(0)).shape == (64, 85, 3)
    for bad in ({"policy": "zoom"}, {"layout": "cwh"}, {"flip": 2}, {"mean": (0.5,)}):
        with pytest.raises(SpecError):
            image_crop(32, **bad)
    assert isinstance(image_crop(32), ImageCrop)


@pytest.fixture
def shards(tmp_path):
    paths = []
    for s in range(2):
        samples = [
            {"__key__": f"s{s}k{i}", "jpg": encode(photo(10 * s + i, 90, 120)), "cls": b"%d" % i} for i in range(12)
        ]
        paths.append(write_shard(tmp_path / f"img-{s}.tar", samples))
    return f"{tmp_path}/img-{{0..1}}.tar"


def test_the_stage_is_deterministic_threaded_or_not_and_new_each_epoch(shards):
    def run(seed=1, threads=0, epoch=None):
        ds = wds.WebDataset(shards, seed=seed).crop_images(48, flip=0.5, num_threads=threads).to_tuple("jpg", "cls")
        if epoch is not None:
            ds.set_epoch(epoch)
        return [image for image, _ in ds]

    first = run()
    assert all(x.shape == (48, 48, 3) for x in first)
    assert all(np.array_equal(a, b) for a, b in zip(first, run(threads=2)))
    assert all(np.array_equal(a, b) for a, b in zip(first, run()))
    assert not any(np.array_equal(a, b) for a, b in zip(first, run(seed=2)))
    assert not all(np.array_equal(a, b) for a, b in zip(run(epoch=0), run(epoch=1)))


@pytest.mark.slow
def test_the_stage_resumes_exactly(shards):
    def make():
        return wds.WebDataset(shards, seed=3).shuffle(5).crop_images(40, flip=0.5).to_tuple("__key__", "jpg")

    check_resume(make, step=3)
    check_resume(lambda: make().compose(wds.batched(4)), step=2)


def test_a_broken_image_is_a_decoding_error_naming_the_sample(shards, tmp_path):
    bad = write_shard(
        tmp_path / "bad.tar", [{"__key__": "ok", "jpg": encode(photo(0, 40, 40))}, {"__key__": "no", "jpg": b"xx"}]
    )
    ds = wds.WebDataset(bad).crop_images(16)
    with pytest.raises(DecodingError, match="cannot crop") as info:
        list(ds)
    assert info.value.key == "no" and info.value.field == "jpg" and "bad.tar" in str(info.value)
    assert [s["__key__"] for s in wds.WebDataset(bad).crop_images(16, handler=wds.ignore_and_continue)] == ["ok"]


def test_the_pipeline_form_and_samples_without_an_image():
    samples = [{"__key__": "a", "png": encode(photo(0, 40, 50), "PNG")}, {"__key__": "b", "txt": "no image"}]
    out = list(wds.DataPipeline(samples, wds.crop_images(20, "center"), seed=0))
    assert out[0]["png"].shape == (20, 20, 3) and out[1] == samples[1]


def test_same_random_numbers_as_torchvision():
    transforms = pytest.importorskip("torchvision.transforms")
    import torch

    for seed in range(50):
        torch.manual_seed(seed)
        image = torch.zeros(3, 300, 400)
        theirs = transforms.RandomResizedCrop.get_params(image, [0.08, 1.0], [3 / 4, 4 / 3])
        torch.manual_seed(seed)

        class TorchRandom:
            def uniform(self, low, high):
                return torch.empty(1).uniform_(low, high).item()

            def integer(self, n):
                return torch.randint(0, n, size=(1,)).item()

        assert random_resized_crop_box(300, 400, (0.08, 1.0), (3 / 4, 4 / 3), TorchRandom()) == tuple(theirs)


def test_other_results_by_spec():
    array = photo(5, 60, 80)
    rgb = image_crop(32, "center").cut(array, Uniform(0))
    pil = image_crop(32, "center", spec="pil").cut(array, Uniform(0))
    assert isinstance(pil, PIL.Image.Image) and np.array_equal(np.asarray(pil), rgb)
    grey = image_crop(32, "center", spec="l8").cut(array, Uniform(0))
    assert np.array_equal(grey, np.asarray(PIL.Image.fromarray(rgb).convert("L")))
    with pytest.raises(SpecError, match="apply to the default spec"):
        image_crop(32, spec="pil", layout="chw")
    with pytest.raises(SpecError, match="unknown image spec"):
        image_crop(32, spec="nosuch")


def test_pillows_decompression_bomb_limit_holds(monkeypatch):
    data = encode(photo(0, 60, 80))
    monkeypatch.setattr(PIL.Image, "MAX_IMAGE_PIXELS", 2000)
    for choice in ("pillow", "simplejpeg"):
        set_jpeg_decoder(choice)
        try:
            with pytest.raises(PIL.Image.DecompressionBombError):
                decode_at_scale(data, 10, 10)
            with pytest.raises(PIL.Image.DecompressionBombError):
                image_crop(16).cut(data, Uniform(0))
        finally:
            set_jpeg_decoder("auto")


@pytest.mark.skipif(not (HAVE_OPENCV and region_decoding()), reason="needs the cv extra and the region decoder")
@pytest.mark.parametrize("subsampling", [0, 2])
def test_decoding_only_the_box_gives_the_pixels_of_decoding_it_all(monkeypatch, subsampling):
    images = []
    for seed in range(4):
        out = io.BytesIO()
        PIL.Image.fromarray(photo(seed, 375 + seed * 31, 500 - seed * 17)).save(
            out, "JPEG", quality=90, subsampling=subsampling, progressive=seed % 2 == 1
        )
        images.append(out.getvalue())
    crops = [image_crop(224, flip=0.5), image_crop(64), image_crop(32, "center"), image_crop(160, scale=(0.01, 0.05))]
    cut = {}
    used = []
    real = imageops.decode_jpeg_region
    monkeypatch.setattr(imageops, "decode_jpeg_region", lambda *a: used.append(a[2:]) or real(*a))
    for region in (True, False):
        if not region:  # the whole image decoded (at the same DCT scale) and the box cut from it
            monkeypatch.setattr(imageops, "jpeg_size", lambda data: None)
        cut[region] = [c.cut(d, Uniform(s)) for c in crops for d in images for s in range(8)]
    assert len(used) == len(cut[True]) and {divisor for divisor, _ in used} == {1, 2, 4, 8}
    assert all(np.array_equal(a, b) for a, b in zip(cut[True], cut[False], strict=True))


# crop_images says when it runs on the slow path (issue 58.2): the speed the README promises needs simplejpeg and
# OpenCV, which the framework extras now bring; without them, one warning a process says what is missing and how to
# install it, and `wds doctor` says which path crop_images takes.

WITHOUT = textwrap.dedent(
    """
    import sys, warnings
    sys.modules["cv2"] = None  # not installed, as far as imports go
    sys.modules["simplejpeg"] = None
    import wds_core as wds
    from wds_core.stages.crop import SlowPathWarning, slow_path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            wds.WebDataset("a.tar").crop_images(224)
    said = [str(w.message) for w in caught if issubclass(w.category, SlowPathWarning)]
    assert len(said) == 1, said  # once a process
    assert "simplejpeg" in said[0] and "opencv-python-headless" in said[0] and ".[jpeg,cv]" in said[0], said
    assert len(slow_path()) == 2
    from wds_core.cli.doctor import _lines, report
    print([line for line in _lines(report()) if line.startswith("crop_images:")][0])
    """
)


def test_the_slow_path_is_said_once_and_by_doctor():
    out = subprocess.run([sys.executable, "-c", WITHOUT], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("crop_images: slow path, without simplejpeg"), out.stdout


def test_the_fast_path_says_nothing(recwarn):
    import wds_core as wds
    from wds_core.stages.crop import SlowPathWarning, slow_path

    if slow_path():
        return  # this environment lacks them (the wheel's test environment): the test above covers it
    wds.WebDataset("a.tar").crop_images(224)
    assert not [w for w in recwarn if issubclass(w.category, SlowPathWarning)]


@pytest.mark.repository
def test_each_framework_extra_brings_the_fast_image_path():
    import pathlib

    import tomllib

    project = tomllib.loads((pathlib.Path(__file__).parents[3] / "pyproject.toml").read_text())["project"]
    for extra in ("torch", "jax", "tf"):
        assert "wds[jpeg,cv]" in project["optional-dependencies"][extra], extra
