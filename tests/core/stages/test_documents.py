"""Interleaved documents: MMC4 with members, MMC4 with embedded base64 (OpenFlamingo), OBELICS."""

import base64
import io
import json

import numpy as np
import pytest

import wds_core as wds
from tests.conftest import tar_bytes
from wds_core import SampleError


def png(value):
    """A 4x4 grey PNG whose pixels all equal ``value`` (so decoded images identify themselves)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.full((4, 4), value, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def flat(sequence):
    """Texts as themselves, images as the grey value they hold."""
    out = []
    for item in sequence:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, (bytes, bytearray)):
            out.append(("bytes", len(item)))
        else:
            out.append(int(np.asarray(item if not isinstance(item, wds.LazyImage) else item.decode()).flat[0]))
    return out


DOCS = {
    "doc0": ["A cat.", 10, "It sleeps.", 20, 30, "The end."],
    "doc1": [40, "Starts with an image.", "Two sentences."],
    "doc2": ["Only text here."],
    "doc3": ["Ends with images.", 50, 60],
}


def items(doc):
    return [x if isinstance(x, str) else png(x) for x in doc]


@pytest.fixture
def mmc4_members(tmp_path):
    path = tmp_path / "mmc4.tar"
    with wds.TarWriter(str(path)) as sink:
        for key, doc in DOCS.items():
            sink.write(wds.interleaved_sample(key, items(doc), image_format="png", meta={"url": f"http://x/{key}"}))
    return str(path)


def test_writer_and_reader_round_trip_in_order(mmc4_members):
    got = {s["__key__"]: s for s in wds.WebDataset(mmc4_members).interleaved(decode="l8")}
    assert {k: flat(s["interleaved"]) for k, s in got.items()} == DOCS
    assert not any(k.endswith(".png") for s in got.values() for k in s), "image members are consumed"
    assert json.loads(got["doc0"]["json"])["url"] == "http://x/doc0"


def test_undecoded_lazy_and_options(mmc4_members):
    raw = next(iter(wds.WebDataset(mmc4_members).interleaved(decode=None)))["interleaved"]
    assert [type(x) for x in raw] == [str, bytes, str, bytes, bytes, str]
    lazy = next(iter(wds.WebDataset(mmc4_members).interleaved(decode="l8", lazy=True)))["interleaved"]
    assert isinstance(lazy[1], wds.LazyImage) and flat(lazy) == DOCS["doc0"]
    capped = [flat(s["interleaved"]) for s in wds.WebDataset(mmc4_members).interleaved(decode="l8", max_images=1)]
    assert capped[0] == ["A cat.", 10, "It sleeps.", "The end."]
    stage = wds.Interleaved(decode="l8", require_images=True)
    kept = [s["__key__"] for s in wds.WebDataset(mmc4_members).compose(stage)]
    assert kept == ["doc0", "doc1", "doc3"] and stage.stats["documents_without_images"] == 1


def mmc4_json(texts, infos):
    return json.dumps({"text_list": texts, "image_info": infos}).encode()


def test_mmc4_embedded_base64_and_by_name_and_min_sim(tmp_path):
    """OpenFlamingo's layout (image_base64) and images found by image_name, with matched_sim filtering."""
    embedded = base64.b64encode(png(7)).decode()
    infos = [
        {"image_name": "x.jpg", "matched_text_index": 1, "matched_sim": 0.31, "image_base64": embedded},
        {"image_name": "pic.png", "matched_text_index": 0, "matched_sim": 0.12, "raw_url": "http://img/pic.png"},
    ]
    shard = tar_bytes([("k1.json", mmc4_json(["one", "two"], infos)), ("k1.pic.png", png(9))])
    ds = lambda **kw: wds.WebDataset([_file(tmp_path, shard)]).interleaved(decode="l8", **kw)  # noqa: E731
    assert flat(next(iter(ds()))["interleaved"]) == [9, "one", 7, "two"]
    assert flat(next(iter(ds(min_sim=0.2)))["interleaved"]) == ["one", 7, "two"]


def _file(directory, data):
    path = directory / f"shard-{len(list(directory.iterdir()))}.tar"
    path.write_bytes(data)
    return str(path)


def test_obelics_layout(tmp_path):
    doc = {"texts": ["Title", None, "Body", None], "images": [None, "page.3.png", None, None]}
    doc["images"][3] = "data:image/png;base64," + base64.b64encode(png(33)).decode()
    doc["texts"][3] = None
    shard = tar_bytes([("page.json", json.dumps(doc).encode()), ("page.1.png", png(22))])
    got = next(iter(wds.WebDataset([_file(tmp_path, shard)]).interleaved(decode="l8")))
    assert flat(got["interleaved"]) == ["Title", 22, "Body", 33]


@pytest.mark.parametrize(
    "doc,members,message",
    [
        ({"text_list": ["a"], "image_info": [{"matched_text_index": 5}]}, [], "matched_text_index 5, outside 0..1"),
        ({"text_list": ["a"], "image_info": [{"matched_text_index": 0, "image_name": "gone.jpg"}]}, [], "'gone.jpg'"),
        (
            {"text_list": ["a"], "image_info": [{"matched_text_index": 0, "image_base64": "%%%notbase64"}]},
            [],
            "not valid base64",
        ),
        ({"texts": ["a", None], "images": [None]}, [], "same length"),
        ({"texts": ["a"], "images": ["b.png"]}, [], "both a text and an image"),
        ({"texts": [None], "images": ["http://x/y.png"]}, [], "is not a member"),
        ({"something": 1}, [], "neither MMC4 nor OBELICS"),
    ],
)
def test_malformed_documents_name_the_key(doc, members, message, tmp_path):
    shard = _file(tmp_path, tar_bytes([("bad7.json", json.dumps(doc).encode()), *members]))
    with pytest.raises(SampleError, match=message) as info:
        list(wds.WebDataset([shard]).interleaved())
    assert "'bad7'" in str(info.value) and shard in str(info.value)
    with pytest.warns(UserWarning, match=message):
        out = list(wds.WebDataset([shard], empty_check=False).interleaved(handler=wds.warn_and_continue))
    assert out == []


def test_a_corrupt_image_is_a_data_error(tmp_path):
    doc = {"text_list": ["a"], "image_info": [{"matched_text_index": 0}]}
    shard = _file(tmp_path, tar_bytes([("c.json", json.dumps(doc).encode()), ("c.0.png", b"not a png")]))
    with pytest.raises(SampleError, match="cannot be decoded"):
        list(wds.WebDataset([shard]).interleaved())
