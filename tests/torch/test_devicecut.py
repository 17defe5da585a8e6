"""A batch of planned crops decoded and cut (issue 48), on the CPU twin of the GPU path: the same boxes and flips as
``crop_images`` in the workers, pixels within interpolation; the GPU decoders' calls against stand-ins."""

import io

import numpy as np
import PIL.Image
import pytest

torch = pytest.importorskip("torch")

from wds_core.errors import DecodingError  # noqa: E402
from wds_core.stages.crop import Uniform, image_crop  # noqa: E402
from wds_core.stages.devicecrop import PlannedCrop, PlannedCrops  # noqa: E402
from wds_torch import devicecut  # noqa: E402
from wds_torch.devicecut import cut_planned  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def photo(seed: int, height: int = 375, width: int = 500) -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    phase = rng.uniform(0, 6, 3)
    base = np.stack([np.sin(9 * x + phase[0]), np.cos(7 * y + phase[1]), np.sin(5 * (x + y) + phase[2])], -1)
    pixels = (np.clip(0.5 + 0.4 * base + rng.normal(0, 0.03, (height, width, 3)), 0, 1) * 255).astype(np.uint8)
    out = io.BytesIO()
    PIL.Image.fromarray(pixels).save(out, format="JPEG", quality=92)
    return out.getvalue()


def planned(crop, datas):
    return PlannedCrops.collate([crop.planned(data, Uniform(k), f"k{k}") for k, data in enumerate(datas)])


def test_the_plan_is_the_cpu_path_s_box_and_flip():
    datas = [photo(k) for k in range(40)]
    on_device = image_crop(224, flip=0.5, layout="chw", device="cpu")
    here = image_crop(224, flip=0.5, layout="chw")
    flips = 0
    for k, data in enumerate(datas):
        plan = on_device.planned(data, Uniform(k))
        box, out, flip = here.plan(375, 500, Uniform(k))
        assert (plan.size, plan.box, plan.out, plan.flip) == ((375, 500), tuple(map(float, box)), out, flip)
        flips += flip
    assert 10 < flips < 30


@pytest.mark.parametrize("policy", ["random-resized", "center"])
def test_pixels_are_the_cpu_path_s_within_interpolation(policy):
    datas = [photo(k, *((375, 500), (512, 512), (300, 700))[k % 3]) for k in range(12)]
    options = {"flip": 0.5, "layout": "chw", "interpolation": "opencv"} if policy != "center" else {"layout": "chw"}
    pytest.importorskip("cv2")
    images = cut_planned(planned(image_crop(224, policy, device="cpu", **options), datas), "cpu")
    assert images.shape == (12, 3, 224, 224) and images.dtype == torch.uint8
    cpu = image_crop(224, policy, **options)
    for k, data in enumerate(datas):
        diff = np.abs(images[k].numpy().astype(int) - cpu.cut(data, Uniform(k)).astype(int))
        # the CPU path decodes at a DCT scale where the box allows (an average of 2x2 or 4x4 pixels): close, not equal
        assert diff.mean() < 2.0 and np.percentile(diff, 99) <= 12, (k, diff.mean(), diff.max())


def test_a_box_cut_bilinearly_with_pixel_centres_exactly():
    """The cut itself, against numpy on the same decoded pixels: bilinear, centres at +0.5, edges clamped."""
    data = photo(3)
    crop = image_crop((80, 120), scale=(0.1, 0.12), device="cpu", flip=1.0)  # a box under 2x the output
    plans = planned(crop, [data])
    decoded = devicecut.decode_planned(plans, "cpu")[0].permute(1, 2, 0).numpy().astype(np.float64)
    top, left, h, w = plans.boxes[0]
    assert h < 160 and w < 240
    ys = np.clip(top + (np.arange(80) + 0.5) * h / 80 - 0.5, 0, 374)
    xs = np.clip(left + (np.arange(120) + 0.5) * w / 120 - 0.5, 0, 499)[::-1]
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    y1, x1 = np.minimum(y0 + 1, 374), np.minimum(x0 + 1, 499)
    wy, wx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    expected = (decoded[y0][:, x0] * (1 - wy) * (1 - wx) + decoded[y0][:, x1] * (1 - wy) * wx
                + decoded[y1][:, x0] * wy * (1 - wx) + decoded[y1][:, x1] * wy * wx)  # fmt: skip
    got = cut_planned(plans, "cpu")[0].numpy()  # layout "hwc", the default
    assert np.abs(got.astype(int) - np.round(expected).astype(int)).max() <= 1


def test_the_cut_reads_only_the_pixels_of_its_boxes():
    """Issue 60: each output pixel is a weighted sum of the pixels its taps name and no others: whatever lies
    outside a box (and the pixel beyond its edge that bilinear sampling reaches) does not change the cut, in a
    batch of mixed sizes (whose canvas pads the smaller images) and with a box shrunk 4x (k x k points a pixel)."""
    datas = [photo(k, *((375, 500), (300, 700), (512, 512))[k % 3]) for k in range(6)]
    plans = planned(image_crop(56, flip=0.5, layout="chw", device="cpu"), datas)
    images = devicecut.decode_planned(plans, "cpu")
    changed = []
    for image, (top, left, height, width) in zip(images, plans.boxes):
        outside = torch.full_like(image, 255) - image  # every pixel different...
        y0, x0 = max(int(top) - 1, 0), max(int(left) - 1, 0)
        y1, x1 = int(np.ceil(top + height)) + 1, int(np.ceil(left + width)) + 1
        outside[:, y0:y1, x0:x1] = image[:, y0:y1, x0:x1]  # ...but the box and its edge
        changed.append(outside)
    assert torch.equal(cut_planned(plans, "cpu", images=changed), cut_planned(plans, "cpu", images=images))


def test_on_a_gpu_the_cut_computes_in_float16_within_a_level_of_float32(monkeypatch):
    """The GPU's cut computes in float16 (the canvas, the resampling matrices, the products): 0-255 and their
    eighths are exact in it, so that its pixels are float32's within rounding.  The CPU runs it here."""
    datas = [photo(k, *((375, 500), (300, 700))[k % 2]) for k in range(4)]
    plans = planned(image_crop(64, flip=0.5, layout="chw", device="cpu"), datas)
    normed = planned(image_crop(64, flip=0.5, layout="chw", mean=MEAN, std=STD, device="cpu"), datas)
    exact, exact_normed = cut_planned(plans, "cpu"), cut_planned(normed, "cpu")
    monkeypatch.setattr(devicecut, "_compute_type", lambda where: torch.float16)
    half, half_normed = cut_planned(plans, "cpu"), cut_planned(normed, "cpu", dtype=torch.bfloat16)
    assert (half.int() - exact.int()).abs().max() <= 1
    assert half_normed.dtype == torch.bfloat16 and (half_normed.float() - exact_normed).abs().max() < 0.05


def test_a_box_much_larger_than_the_output_is_averaged_not_aliased():
    stripes = np.zeros((400, 400, 3), np.uint8)
    stripes[:, ::2] = 255  # one-pixel stripes: a 10x shrink that samples them would give black or white
    out = io.BytesIO()
    PIL.Image.fromarray(stripes).save(out, format="PNG")
    crop = PlannedCrop(out.getvalue(), (400, 400), (0.0, 0.0, 400.0, 400.0), (40, 40), False,
                       image_crop(40, device="cpu").planned(out.getvalue(), Uniform(0)).finish)  # fmt: skip
    image = cut_planned(PlannedCrops.collate([crop]), "cpu")[0].numpy()
    assert 100 < image.mean() < 155 and image.std() < 40


def test_normalised_float_hwc_and_channels_last():
    datas = [photo(k) for k in range(3)]
    normed = cut_planned(planned(image_crop(64, "center", layout="chw", mean=MEAN, std=STD, device="cpu"), datas))
    plain = cut_planned(planned(image_crop(64, "center", layout="chw", device="cpu"), datas)).float()
    expected = (plain / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    assert normed.dtype == torch.float32 and torch.allclose(normed, expected, atol=0.03)
    hwc = cut_planned(planned(image_crop(64, "center", device="cpu"), datas))
    assert hwc.shape == (3, 64, 64, 3) and torch.equal(hwc, plain.to(torch.uint8).permute(0, 2, 3, 1))
    last = cut_planned(planned(image_crop(64, "center", layout="chw", device="cpu"), datas), channels_last=True)
    assert last.is_contiguous(memory_format=torch.channels_last)
    half = cut_planned(planned(image_crop(64, "center", layout="chw", device="cpu"), datas), dtype=torch.float16)
    assert half.dtype == torch.float16


def test_bad_images_are_named():
    crop = image_crop(32, device="cpu")
    garbage = photo(2)[:600] + bytes(3000)  # a JPEG whose header reads and whose pixels are not there
    batch = PlannedCrops.collate([crop.planned(photo(1), Uniform(0), "fine"), crop.planned(garbage, Uniform(1), "cut")])
    try:
        cut_planned(batch, "cpu")  # decoders may fill what is missing with grey; if one refuses, it names the sample
    except DecodingError as exn:
        assert "'cut'" in str(exn)


def _cmyk_jpeg(seed: int) -> bytes:
    out = io.BytesIO()
    PIL.Image.open(io.BytesIO(photo(seed, 60, 80))).convert("CMYK").save(out, format="JPEG")
    return out.getvalue()


def _png(seed: int) -> bytes:
    out = io.BytesIO()
    PIL.Image.open(io.BytesIO(photo(seed, 50, 70))).save(out, format="PNG")
    return out.getvalue()


def stand_in_nvimgcodec(monkeypatch, decoder, choice, stream):
    """``decoder`` (a class) as nvImageCodec's ``Decoder``, chosen by ``WDS_DEVICE_DECODER=choice``, the current
    CUDA stream's handle ``stream``."""
    import sys
    import types

    nvidia = types.ModuleType("nvidia")
    nvidia.nvimgcodec = types.SimpleNamespace(
        Decoder=decoder,
        Backend=lambda kind: types.SimpleNamespace(kind=kind),
        BackendKind=types.SimpleNamespace(HW_GPU_ONLY="HW_GPU_ONLY"),
        DecodeParams=types.SimpleNamespace,
        ColorSpec=types.SimpleNamespace(SRGB="SRGB"),
        SampleFormat=types.SimpleNamespace(I_RGB="I_RGB"),
    )
    monkeypatch.setitem(sys.modules, "nvidia", nvidia)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", nvidia.nvimgcodec)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: types.SimpleNamespace(cuda_stream=stream))
    monkeypatch.setenv("WDS_DEVICE_DECODER", choice)
    devicecut._nvimgcodec.cache_clear()


def test_the_gpu_decoders_against_stand_ins_batch_what_they_take_and_leave_the_rest_to_the_host(monkeypatch):
    """``_decode_cuda``, the one piece that needs a GPU, with stand-ins for torchvision's and nvImageCodec's
    decoders (which here refuse CMYK JPEGs, as nvJPEG does): the JPEGs go to them in one batch, in order, on the
    current stream; what they refuse and what is not a JPEG is decoded on the host; every image comes back."""
    import sys
    import types

    crop = image_crop(32, device="cpu")
    datas = [photo(1, 60, 80), _cmyk_jpeg(2), _png(3), photo(4, 70, 50)]
    batch = PlannedCrops.collate([crop.planned(data, Uniform(k), f"k{k}") for k, data in enumerate(datas)])
    expected = [devicecut._decode_host(batch, i) for i in range(len(datas))]
    calls = []

    def refuses(data: bytes) -> bool:
        return PIL.Image.open(io.BytesIO(data)).mode == "CMYK"

    def decode_jpeg(input, mode, device):
        calls.append(("torchvision", len(input) if isinstance(input, list) else 1, mode))
        if isinstance(input, list):
            if any(refuses(view.numpy().tobytes()) for view in input):
                raise RuntimeError("Failed to decode batch: 5")
            return [decode_jpeg(view, mode, device) for view in input]
        if refuses(input.numpy().tobytes()):
            raise RuntimeError("Failed to get image info: 5")
        return torch.from_numpy(np.array(PIL.Image.open(io.BytesIO(input.numpy().tobytes())).convert("RGB"))).permute(
            2, 0, 1
        )

    torchvision_io = types.ModuleType("torchvision.io")
    torchvision_io.ImageReadMode = types.SimpleNamespace(RGB="RGB")
    torchvision_io.decode_jpeg = decode_jpeg
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.io", torchvision_io)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda tensor: tensor)  # no CUDA here to pin with
    monkeypatch.delenv("WDS_DEVICE_DECODER", raising=False)

    decoded = devicecut._decode_cuda(batch, torch.device("cpu"), range(len(batch)))
    assert all(torch.equal(got, want) for got, want in zip(decoded, expected))
    assert calls[0] == ("torchvision", 3, "RGB") and len(calls) == 1 + 3  # the batch, then one at a time

    class Decoder:
        def __init__(self, device_id):
            self.device_id = device_id

        def decode(self, sources, params, cuda_stream):
            assert params.apply_exif_orientation is False and params.sample_format == "I_RGB"
            calls.append(("nvimgcodec", len(sources), cuda_stream, self.device_id))
            return [None if refuses(bytes(s)) else np.array(PIL.Image.open(io.BytesIO(bytes(s))).convert("RGB"))
                    for s in sources]  # fmt: skip

    stand_in_nvimgcodec(monkeypatch, Decoder, "nvimgcodec", 1234)
    calls.clear()
    try:
        decoded = devicecut._decode_cuda(batch, torch.device("cpu"), range(len(batch)))
    finally:
        devicecut._nvimgcodec.cache_clear()
    assert all(torch.equal(got, want) for got, want in zip(decoded, expected))
    assert calls == [("nvimgcodec", 3, 1234, 0)]


@pytest.mark.parametrize("engines", ["there", "absent"])
def test_the_jpeg_engines_first_then_the_default_backends_then_the_host_image_by_image(monkeypatch, engines):
    """``WDS_DEVICE_DECODER=nvimgcodec-hw`` against a stand-in for nvImageCodec: its hardware backend (here refusing
    CMYK and images wider than 75 pixels, as an engine refuses what it cannot take) gets the batch's JPEGs; what it
    refuses goes to the default backends, what they refuse to the host, image by image; on a GPU without engines
    (the backend cannot be made) the default backends take them all."""

    crop = image_crop(32, device="cpu")
    datas = [photo(1, 60, 80), _cmyk_jpeg(2), _png(3), photo(4, 70, 50)]
    batch = PlannedCrops.collate([crop.planned(data, Uniform(k), f"k{k}") for k, data in enumerate(datas)])
    expected = [devicecut._decode_host(batch, i) for i in range(len(datas))]
    calls = []

    class Decoder:
        def __init__(self, device_id, backends=None):
            self.kind = "default" if backends is None else backends[0].kind
            if self.kind == "HW_GPU_ONLY" and engines == "absent":
                raise RuntimeError("nvImageCodec: no hardware decoder backend on this device")

        def decode(self, sources, params, cuda_stream):
            calls.append((self.kind, [bytes(s) for s in sources]))
            images = [PIL.Image.open(io.BytesIO(bytes(s))) for s in sources]
            return [None if image.mode == "CMYK" or (self.kind == "HW_GPU_ONLY" and image.width > 75)
                    else np.array(image.convert("RGB")) for image in images]  # fmt: skip

    stand_in_nvimgcodec(monkeypatch, Decoder, "nvimgcodec-hw", 7)
    try:
        decoded = devicecut._decode_cuda(batch, torch.device("cpu"), range(len(batch)))
    finally:
        devicecut._nvimgcodec.cache_clear()
    assert all(torch.equal(got, want) for got, want in zip(decoded, expected))
    if engines == "there":
        assert calls == [("HW_GPU_ONLY", [datas[0], datas[1], datas[3]]), ("default", [datas[0], datas[1]])]
    else:
        assert calls == [("default", [datas[0], datas[1], datas[3]])]


def test_a_batch_too_large_for_one_cut_is_cut_a_part_at_a_time_with_the_same_pixels(monkeypatch):

    datas = [photo(k, *((375, 500), (512, 512), (300, 700))[k % 3]) for k in range(7)]
    crops = planned(image_crop(48, flip=0.5, layout="chw", device="cpu"), datas)
    whole = cut_planned(crops, "cpu")
    shapes = np.array([(375, 500), (512, 512), (300, 700)] * 2 + [(375, 500)], np.float64)
    assert devicecut._parts(shapes, 48, 48, 4) == [slice(0, 7)]
    each = 3 * 512 * 700 + 96 * (512 + 700) + 3 * 96 * 700  # canvas, matrices, products: at the part's largest
    one_image = each * 4 + 3 * 512 * 512  # in float32, and its decode
    monkeypatch.setattr(devicecut, "CUT_BYTES", 2 * one_image)
    parts = devicecut._parts(shapes, 48, 48, 4)
    assert len(parts) > 2 and [i for part in parts for i in range(7)[part]] == list(range(7))
    for part in parts:
        tall, wide = int(shapes[part, 0].max()), int(shapes[part, 1].max())
        each = 3 * tall * wide + 96 * (tall + wide) + 3 * 96 * max(tall, wide)
        decoded = int((3 * shapes[part, 0] * shapes[part, 1]).sum())
        assert part.stop - part.start == 1 or (part.stop - part.start) * each * 4 + decoded <= 2 * one_image
    asked = []
    real = devicecut.decode_planned
    monkeypatch.setattr(devicecut, "decode_planned", lambda crops, where, which: asked.append(which) or real(
        crops, where, which))  # fmt: skip
    in_parts = cut_planned(crops, "cpu")
    assert asked == [range(part.start, part.stop) for part in parts]  # each part decoded when its turn comes
    assert in_parts.shape == whole.shape == (7, 3, 48, 48)
    assert torch.equal(in_parts, whole)  # each image's positions are its own, whatever part it is cut in


def lying_jpeg(height: int, width: int) -> bytes:
    """A small JPEG whose header (its SOF) claims ``height x width``."""
    data = bytearray(photo(7, 16, 16))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


def test_lying_headers_cost_the_device_what_the_cpu_path_spends(monkeypatch, tmp_path):
    """Issue 56, case 8: four 3 KB JPEGs whose headers claim 8000x8000 were decoded at that size (192 MB each, and
    their float32 canvas four times that: +1.1 GB at the first batch, GPU memory on CUDA).  Their plan says to
    decode them on the host at the scale their crop needs, as the CPU path does (1000x1000), and nothing larger is
    ever decoded; a header that claims more than even that may take is refused in the plan, naming the sample."""
    import wds_torch as wds
    from wds_core.limits import DecodeLimitError
    from wds_core.stages.devicecrop import DEVICE_IMAGE_BYTES

    liars = [lying_jpeg(8000, 8000) for _ in range(4)]
    assert all(len(data) < 4000 for data in liars)
    plans = planned(image_crop(224, device="cpu"), liars + [photo(1)])
    assert [tuple(r) for r in plans.reduced[:4]] != [(0, 0)] * 4 and tuple(plans.reduced[4]) == (0, 0)
    assert all(plans.decoded_size(i) == (1000, 1000) for i in range(4))
    decoded = []
    real = devicecut._decode_host
    monkeypatch.setattr(devicecut, "_decode_host", lambda crops, i: decoded.append(real(crops, i)) or decoded[-1])
    with wds.TarWriter(str(tmp_path / "liars.tar")) as sink:
        for k, data in enumerate(liars * 2):
            sink.write({"__key__": f"k{k}", "jpg": data, "cls": k})
    ds = wds.WebDataset(str(tmp_path / "liars.tar")).crop_images(224, device="cpu")
    loader = wds.WebLoader(ds.to_tuple("jpg", "cls").batched(4), batch_size=None, num_workers=0).to_device("cpu")
    batches = list(loader)
    assert len(batches) == 2 and batches[0][0].shape == (4, 224, 224, 3)
    assert decoded and max(image.numel() for image in decoded) <= 3 * 1000 * 1000
    huge = lying_jpeg(9000, 9000)  # 243 MB whole, over DEVICE_IMAGE_BYTES: reduced too, on the host
    assert 3 * 9000 * 9000 > DEVICE_IMAGE_BYTES
    assert planned(image_crop(224, device="cpu"), [huge]).decoded_size(0) == (1125, 1125)
    with pytest.raises(DecodeLimitError, match="9000x9000.*expansion"):
        planned(image_crop(8000, policy="center", device="cpu"), [huge])  # its crop needs it whole


def test_dataloaders_pin_memory_thread_pins_the_plans_so_the_device_side_does_not(monkeypatch):
    """Issue 60: the JPEG bytes were pinned by the thread preparing batches for the device, batch by batch; with
    ``pin_memory=True`` DataLoader's pin-memory thread does it now (``PlannedCrops.pin_memory``), host-cut pixels
    too, and the decode copies from there.  Pinning itself needs CUDA: a stand-in records it here."""
    import sys
    import types

    from torch.utils.data._utils.pin_memory import pin_memory

    pinned, pins = set(), []

    def pin(tensor):
        copy = tensor.clone()
        pinned.add(copy.data_ptr())
        pins.append(copy.numel())
        return copy

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda tensor: tensor.data_ptr() in pinned)
    crop = image_crop(32, device="cpu")
    datas = [photo(k, 60, 80) for k in range(3)]
    plans = [crop.planned(data, Uniform(k), f"k{k}", host=k == 1) for k, data in enumerate(datas)]
    batch = PlannedCrops.collate(plans)
    moved, labels = pin_memory((batch, torch.arange(3)))  # what DataLoader's thread does with a batch
    assert isinstance(moved, PlannedCrops) and moved is not batch and len(pins) == 3  # bytes, pixels, labels
    assert [bytes(moved.image(k)) for k in (0, 2)] == [datas[0], datas[2]] and np.array_equal(moved.cut, batch.cut)
    assert torch.from_numpy(moved.data).is_pinned() and moved.keys == batch.keys

    views = []
    torchvision_io = types.ModuleType("torchvision.io")
    torchvision_io.ImageReadMode = types.SimpleNamespace(RGB="RGB")

    def decode_jpeg(given, mode, device):
        views.extend(given)
        return [torch.from_numpy(np.array(PIL.Image.open(io.BytesIO(v.numpy().tobytes())).convert("RGB")))
                .permute(2, 0, 1) for v in given]  # fmt: skip

    torchvision_io.decode_jpeg = decode_jpeg
    monkeypatch.setitem(sys.modules, "torchvision", types.ModuleType("torchvision"))
    monkeypatch.setitem(sys.modules, "torchvision.io", torchvision_io)
    monkeypatch.delenv("WDS_DEVICE_DECODER", raising=False)
    before = len(pins)
    devicecut._decode_cuda(moved.select([0, 2]), torch.device("cpu"), range(2))
    assert len(pins) == before and len(views) == 2  # nothing pinned again
    devicecut._decode_cuda(batch.select([0, 2]), torch.device("cpu"), range(2))
    assert len(pins) == before + 1  # a batch that did not go through the pin-memory thread is pinned here


def test_the_jpeg_engines_decode_each_box_s_region_alone_and_cut_the_same_pixels(monkeypatch):
    """Issue 60: with nvImageCodec (0.6 and later: code streams and regions) each JPEG is decoded as its box and
    two pixels around (``CodeStream(data).get_sub_code_stream(region=Region(top, left, bottom, right))``), and the
    cut shifts its box into the region: the same pixels as from the whole image.  A CMYK JPEG both backends refuse
    goes to the host whole; an nvImageCodec without regions decodes whole images."""
    import sys

    from wds_core.fieldcodecs import image_spec
    from wds_core.fieldcodecs.images import decode_image

    datas = [photo(k, *((375, 500), (300, 700))[k % 2]) for k in range(6)] + [_cmyk_jpeg(9), _png(8)]
    plans = planned(image_crop(48, flip=0.5, layout="chw", device="cpu"), datas)
    whole = cut_planned(plans, "cpu")
    asked = []

    class Region:
        def __init__(self, top, left, bottom, right):
            self.bounds = (top, left, bottom, right)

    class CodeStream:
        def __init__(self, data, region=None):
            self.data, self.region = bytes(data), region

        def get_sub_code_stream(self, region):
            return CodeStream(self.data, region)

    class Decoder:
        def __init__(self, device_id, backends=None):
            self.kind = "default" if backends is None else "engines"

        def decode(self, sources, params, cuda_stream):
            out = []
            for source in sources:
                region = source.region if isinstance(source, CodeStream) else None
                asked.append((self.kind, region.bounds if region else None))
                data = source.data if isinstance(source, CodeStream) else bytes(source)
                if PIL.Image.open(io.BytesIO(data)).mode == "CMYK":
                    out.append(None)
                    continue
                pixels = decode_image(data, image_spec("rgb8"))  # the host's decoder: the same pixels
                top, left, bottom, right = region.bounds if region else (0, 0, *pixels.shape[:2])
                out.append(np.ascontiguousarray(pixels[top:bottom, left:right]))
            return out

    stand_in_nvimgcodec(monkeypatch, Decoder, "nvimgcodec-hw", 7)
    monkeypatch.setattr(devicecut, "_decodes_regions", lambda where: True)
    try:
        without = cut_planned(plans, "cpu")  # this stand-in has no code streams yet: whole images
        assert asked and all(bounds is None for _, bounds in asked)
        nvimgcodec = sys.modules["nvidia.nvimgcodec"]
        monkeypatch.setattr(nvimgcodec, "CodeStream", CodeStream, raising=False)
        monkeypatch.setattr(nvimgcodec, "Region", Region, raising=False)
        asked.clear()
        regional = cut_planned(plans, "cpu")
    finally:
        devicecut._nvimgcodec.cache_clear()
    assert torch.equal(without, whole)
    diff = (regional.int() - whole.int()).abs()
    assert diff.max() <= 1 and diff.float().mean() < 0.02
    engines = [bounds for kind, bounds in asked if kind == "engines"]
    assert len(engines) == 7 and [kind for kind, _ in asked[7:]] == ["default"]  # the CMYK one, refused again
    for (top, left, bottom, right), (y, x, h, w), (height, width) in zip(engines, plans.boxes, plans.sizes):
        assert top == max(int(np.floor(y)) - 2, 0) and bottom == min(int(np.ceil(y + h)) + 2, height)
        assert left == max(int(np.floor(x)) - 2, 0) and right == min(int(np.ceil(x + w)) + 2, width)
    decoded = sum((bottom - top) * (right - left) for top, left, bottom, right in engines[:6])
    assert decoded < 0.8 * sum(h * w for h, w in plans.sizes[:6])  # less to decode than the whole images


def test_regions_are_decoded_on_a_gpu_with_nvimgcodec_unless_turned_off(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.setenv("WDS_DEVICE_DECODER", "nvimgcodec-hw")
    assert devicecut._decodes_regions(cuda) and not devicecut._decodes_regions(cpu)
    monkeypatch.setenv("WDS_DEVICE_REGIONS", "0")
    assert not devicecut._decodes_regions(cuda)
    monkeypatch.delenv("WDS_DEVICE_REGIONS")
    monkeypatch.setenv("WDS_DEVICE_DECODER", "torchvision")  # nvJPEG through torchvision decodes whole images
    assert not devicecut._decodes_regions(cuda)
