"""The seed README's examples, run with ``import wds_torch as wds`` on local shards shaped like PubLayNet's."""

import io
import json
from random import randrange

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wds_torch as wds  # noqa: E402

# the seed uses num_workers=4; this machine has 2 cores, which torch warns about
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("publaynet")
    rng = np.random.default_rng(0)
    for s in range(4):
        with wds.TarWriter(str(root / f"publaynet-train-{s:06d}.tar"), encoder=False) as sink:
            for i in range(6):
                buf = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (300, 320, 3), dtype=np.uint8)).save(buf, "PNG")
                meta = {"annotations": [{"category_id": (s + i) % 5}]} if i % 3 else {}
                sink.write({"__key__": f"{s}-{i}", "png": buf.getvalue(), "json": json.dumps(meta).encode()})
    return str(root / "publaynet-train-{000000..000003}.tar")


def preprocess(sample):
    image, json = sample
    try:
        label = json["annotations"][0]["category_id"]
    except Exception:
        label = 0
    return 1 - image, label


def get_patches(src):
    for sample in src:
        image, label = sample
        h, w = image.shape[:2]
        for _ in range(16):
            y, x = randrange(h - 256), randrange(w - 265)
            patch = image[y : y + 256, x : x + 256]
            yield (patch, label)


@pytest.mark.slow  # four workers filling 10,000-patch shuffle buffers: stopping them waits for torch's timeouts
def test_fluid_pipeline_and_dataloaders(url):
    dataset = wds.WebDataset(url).shuffle(1000).decode("rgb").to_tuple("png", "json")
    assert isinstance(dataset, torch.utils.data.IterableDataset)
    image, meta = next(iter(dataset))
    assert image.shape == (300, 320, 3) and isinstance(meta, dict)
    dataset = dataset.map(preprocess)
    dataset = dataset.compose(get_patches).shuffle(10000)
    loader = torch.utils.data.DataLoader(dataset, num_workers=4, batch_size=8)
    batch = next(iter(loader))
    assert (batch[0].shape, batch[1].shape) == (torch.Size([8, 256, 256, 3]), torch.Size([8]))
    loader = wds.WebLoader(dataset, num_workers=4, batch_size=8)
    loader = loader.unbatched().shuffle(1000).batched(12)
    batch = next(iter(loader))
    assert (batch[0].shape, batch[1].shape) == (torch.Size([12, 256, 256, 3]), torch.Size([12]))


@pytest.mark.slow  # four workers filling 10,000-patch shuffle buffers: stopping them waits for torch's timeouts
def test_complete_pipeline_batched_in_the_dataset(url):
    dataset = wds.WebDataset(url).shuffle(1000).decode("rgb").to_tuple("png", "json").map(preprocess)
    dataset = dataset.compose(get_patches)
    dataset = dataset.batched(16)
    loader = wds.WebLoader(dataset, num_workers=4, batch_size=None)
    loader = loader.unbatched().shuffle(1000).batched(12)
    batch = next(iter(loader))
    assert (batch[0].shape, batch[1].shape) == (torch.Size([12, 256, 256, 3]), torch.Size([12]))


def test_pipeline_interface_and_resampling(url):
    dataset = wds.DataPipeline(
        wds.SimpleShardList(url),
        wds.shuffle(100),
        wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.shuffle(1000),
        wds.decode("torchrgb"),
        wds.to_tuple("png", "json"),
        wds.batched(4),
    )
    images, metas = next(iter(dataset))
    assert images.shape == torch.Size([4, 3, 300, 320]) and len(metas) == 4
    resampled = (
        wds.WebDataset.resampled(url).shuffle(1000).decode("rgb").to_tuple("png", "json").map(preprocess).with_epoch(30)
    )
    assert len(list(resampled)) == 30
    sample = next(iter(resampled))
    assert sample[0].shape == (300, 320, 3)


def test_decoder_and_processor_forms(url):
    dataset = wds.DataPipeline(wds.SimpleShardList(url), wds.tarfile_to_samples())

    def my_sample_decoder(sample):
        return {"__key__": sample["__key__"], "size": len(sample["png"])}

    decoded = wds.Processor(wds.map, my_sample_decoder)(dataset)
    assert all(s["size"] > 1000 for s in decoded)

    def my_png_decoder(key, value):
        if not key.endswith(".png"):
            return None
        assert isinstance(value, bytes)
        return "png!"

    decoded = wds.Decoder(my_png_decoder, wds.torch_video, wds.torch_audio)(dataset)
    assert {s["png"] for s in decoded} == {"png!"}
    with_ext = wds.Decoder(wds.handle_extension("png", lambda data: len(data)))(dataset)
    assert all(isinstance(s["png"], int) for s in with_ext)


def test_length_properties(url):
    dataset = wds.WebDataset(url)
    with pytest.raises(TypeError):
        len(dataset)
    assert len(wds.WebDataset(url).with_epoch(10).with_length(10)) == 10
