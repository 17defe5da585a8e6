"""Image-caption pairs as img2dataset/LAION store them: decoding, metadata filters, incomplete samples."""

import io
import json

import numpy as np
import pytest

import wds_core as wds
from wds_core import DecodingError


def jpeg(width, height):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), dtype=np.uint8)).save(buf, format="JPEG")
    return buf.getvalue()


@pytest.fixture
def laion(tmp_path):
    """Samples as img2dataset writes them; some lack a caption, an image or metadata."""
    rows = [
        ("ok-big", (64, 48), "a red bus", {"width": 64, "height": 48, "similarity": 0.35}),
        ("ok-small", (16, 16), "tiny icon", {"width": 16, "height": 16, "similarity": 0.40}),
        ("low-sim", (64, 64), "unrelated words", {"width": 64, "height": 64, "similarity": 0.10}),
        ("no-caption", (64, 64), None, {"width": 64, "height": 64, "similarity": 0.5}),
        ("no-image", None, "caption only", {"similarity": 0.5}),
        ("no-meta", (40, 40), "a photo with a long caption indeed", None),
    ]
    path = tmp_path / "pairs.tar"
    with wds.TarWriter(str(path)) as sink:
        for key, size, caption, meta in rows:
            sample = {"__key__": key}
            if size:
                sample["jpg"] = jpeg(*size)
            if caption:
                sample["txt"] = caption
            if meta:
                sample["json"] = meta
            sink.write(sample)
    return str(path)


def test_pairs_skip_incomplete_samples_and_count_them(laion):
    stage = wds.ImageTextPairs()
    pairs = list(wds.WebDataset(laion).compose(stage))
    assert [caption for _, caption in pairs] == [
        "a red bus",
        "tiny icon",
        "unrelated words",
        "a photo with a long caption indeed",
    ]
    assert pairs[0][0].size == (64, 48)  # PIL by default
    assert stage.stats == {"kept": 4, "missing_caption": 1, "missing_image": 1}


def test_metadata_filters(laion):
    def keys(**kw):
        return [d["__key__"] for d in wds.WebDataset(laion).image_text_pairs(output="dict", **kw)]

    assert keys(min_size=32) == ["ok-big", "low-sim", "no-meta"]  # no-meta: measured on the decoded image
    assert keys(min_size=(50, 40)) == ["ok-big", "low-sim"]
    assert keys(min_similarity=0.3) == ["ok-big", "ok-small"]  # no similarity: skipped
    assert keys(caption_length=(10, 20)) == ["low-sim"]  # "unrelated words"; the others are shorter or longer
    first = next(iter(wds.WebDataset(laion).image_text_pairs(output="dict", decode="rgb8")))
    assert first["image"].shape == (48, 64, 3) and first["meta"]["similarity"] == 0.35 and first["text"] == "a red bus"


def test_undecoded_and_corrupt_images(tmp_path, laion):
    raw = next(iter(wds.WebDataset(laion).image_text_pairs(decode=None)))
    assert isinstance(raw[0], bytes) and raw[0][:2] == b"\xff\xd8"
    path = tmp_path / "bad.tar"
    with wds.TarWriter(str(path)) as sink:
        sink.write({"__key__": "broken", "jpg": b"not a jpeg", "txt": "x", "json": json.dumps({}).encode()})
    with pytest.raises(DecodingError, match="broken"):
        list(wds.WebDataset(str(path)).image_text_pairs())
    with pytest.warns(UserWarning, match="broken"):
        got = list(wds.WebDataset(str(path), empty_check=False).image_text_pairs(handler=wds.warn_and_continue))
    assert got == []
