import io
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wds_torch as wds  # noqa: E402
from wds_core.errors import DecodingError  # noqa: E402


def png(array):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(array).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def image():
    return np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8)


def test_torch_image_specs_give_chw_tensors(image):
    data = png(image)
    rgb8 = wds.Decoder("torchrgb8").decode1("png", data)
    assert rgb8.dtype == torch.uint8 and tuple(rgb8.shape) == (3, 20, 30)
    assert np.array_equal(rgb8.permute(1, 2, 0).numpy(), image)
    for spec in ("torchrgb", "torch"):
        value = wds.Decoder(spec).decode1("png", data)
        assert value.dtype == torch.float32 and tuple(value.shape) == (3, 20, 30)
        assert torch.allclose(value, rgb8.float() / 255)
    assert tuple(wds.Decoder("torchrgba8").decode1("png", data).shape) == (4, 20, 30)
    gray = wds.Decoder("torchl8").decode1("png", data)
    assert gray.dtype == torch.uint8 and tuple(gray.shape) == (20, 30)
    assert wds.Decoder("torchl").decode1("png", data).dtype == torch.float32


@pytest.mark.slow
def test_torch_specs_load_the_adapter_on_demand(tmp_path, image):
    path = tmp_path / "a.tar"
    with wds.TarWriter(str(path)) as sink:
        sink.write({"__key__": "a", "png": png(image)})
    code = (
        "import sys, wds_core\n"
        f"s = next(iter(wds_core.WebDataset({str(path)!r}).decode('torchrgb8')))\n"
        "print(type(s['png']).__name__, tuple(s['png'].shape), 'wds_torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["Tensor", "(3,", "20,", "30)", "True"]


class Custom:
    def __init__(self, value):
        self.value = value


def test_pth_fields_round_trip_and_refuse_arbitrary_pickles(tmp_path):
    path = str(tmp_path / "w.tar")
    weights = {"w": torch.arange(6.0).reshape(2, 3), "step": 7}
    with wds.TarWriter(path) as sink:
        sink.write({"__key__": "a", "pth": weights})
        sink.write({"__key__": "b", "pth": Custom(3)})
    samples = wds.WebDataset(path).decode()
    stream = iter(samples)
    first = next(stream)
    assert torch.equal(first["pth"]["w"], weights["w"]) and first["pth"]["step"] == 7
    with pytest.raises(DecodingError, match="pth"):
        next(stream)
    trusted = list(wds.WebDataset(path).decode(allow_pickle=True))
    assert trusted[1]["pth"].value == 3


@pytest.mark.slow
def test_pth_decodes_without_importing_the_adapter_first(tmp_path):
    path = str(tmp_path / "w.tar")
    with wds.TarWriter(path) as sink:
        sink.write({"__key__": "a", "pth": torch.ones(2)})
    code = f"import wds_core\nprint(next(iter(wds_core.WebDataset({path!r}).decode()))['pth'].sum().item())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "2.0"


def test_video_and_audio_handlers(monkeypatch):
    assert wds.torch_video(".jpg", b"x") is None and wds.torch_audio(".txt", b"x") is None
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    monkeypatch.setitem(sys.modules, "torchaudio", None)
    with pytest.raises(wds.SpecError, match="pip install torchvision"):
        wds.torch_video(".mp4", b"x")
    with pytest.raises(wds.SpecError, match="pip install torchaudio"):
        wds.torch_audio(".flac", b"x")
    decoder = wds.Decoder(wds.torch_video, wds.torch_audio)
    with pytest.raises(DecodingError, match="torchaudio"):
        decoder({"__key__": "k", "wav": b"RIFF"})


def test_crop_images_gives_tensors_with_the_torch_specs():
    from wds_core.stages.crop import Uniform, image_crop

    array = (np.arange(60 * 80 * 3) % 251).astype(np.uint8).reshape(60, 80, 3)
    rgb = image_crop(32, "center").cut(array, Uniform(0))
    as_uint8 = image_crop(32, "center", spec="torchrgb8").cut(array, Uniform(0))
    as_float = image_crop(32, "center", spec="torchrgb").cut(array, Uniform(0))
    assert as_uint8.dtype == torch.uint8 and torch.equal(as_uint8, torch.from_numpy(rgb).permute(2, 0, 1))
    assert as_float.dtype == torch.float32 and torch.allclose(as_float, as_uint8.float() / 255)


def test_secure_mode_refuses_pth_fields_as_enforce_security_does(tmp_path, monkeypatch):
    """torch.load unpickles even with weights_only=True: webdataset's enforce_security refuses it, and so does wds."""
    from wds_torch.codecs import torch_loads

    stream = io.BytesIO()
    torch.save(torch.ones(2), stream)
    assert torch.equal(torch_loads(stream.getvalue()), torch.ones(2))
    monkeypatch.setenv("WDS_SECURE", "1")
    with pytest.raises(ValueError, match="torch.loads is not allowed for security reasons when enforce_security"):
        torch_loads(stream.getvalue())
