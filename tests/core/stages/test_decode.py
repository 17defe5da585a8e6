"""The Decoder and the decode stage: webdataset semantics, safe defaults, errors, threads."""

import gzip
import io
import pickle

import numpy as np
import PIL.Image
import pytest
import webdataset

import wds_core as wds
from wds_core import Decoder, DecodingError


def png(array):
    out = io.BytesIO()
    PIL.Image.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def image_of(i):
    return np.full((6, 4, 3), i % 256, np.uint8)


@pytest.fixture
def image_shard(tmp_path):
    path = str(tmp_path / "images.tar")
    with wds.TarWriter(path) as sink:
        for i in range(40):
            sink.write(
                {"__key__": f"img{i:03d}", "png": png(image_of(i)), "cls": i, "json": {"i": i}, "txt.gz": f"t{i}"}
            )
    return path


def test_decoded_fields_match_webdataset(image_shard):
    for spec in ("rgb8", "rgb", "l", "pil"):
        ours = list(wds.WebDataset(image_shard).decode(spec))
        theirs = list(webdataset.WebDataset(image_shard, shardshuffle=False).decode(spec))
        assert len(ours) == len(theirs) == 40
        for a, b in zip(ours, theirs):
            assert a["__key__"] == b["__key__"] and a["cls"] == b["cls"] and a["json"] == b["json"]
            assert a["txt.gz"] == b["txt.gz"]
            if spec == "pil":
                assert a["png"].tobytes() == b["png"].tobytes()
            else:
                np.testing.assert_array_equal(a["png"], b["png"])


def test_fields_nobody_claims_stay_bytes_and_metadata_is_text():
    sample = {"__key__": b"k", "__url__": "u", "xyz": b"\x00", "cls": b"1"}
    assert Decoder()(sample) == {"__key__": "k", "__url__": "u", "xyz": b"\x00", "cls": 1}


def test_only_and_partial():
    sample = {"__key__": "k", "cls": b"1", "txt": b"a"}
    assert Decoder(only="cls")(sample) == {"__key__": "k", "cls": 1, "txt": b"a"}
    assert Decoder(only=["txt"])(sample)["cls"] == b"1"
    decoded = Decoder()(sample)
    with pytest.raises(DecodingError, match="partial=True"):
        Decoder()(decoded)
    assert Decoder(partial=True)(decoded) == decoded


def test_custom_handlers_come_before_the_built_ins_and_continue_chains():
    def upper_txt(key, data):
        return data.decode().upper() if key.endswith(".txt") else None

    def unwrap(key, data):
        if key.endswith(".wrapped"):
            return wds.Continue(key[: -len(".wrapped")], data[1:])
        return None

    sample = {"__key__": "k", "txt": b"abc", "cls.wrapped": b"x7", "cls": b"2"}
    assert Decoder(upper_txt, unwrap)(sample) == {"__key__": "k", "txt": "ABC", "cls.wrapped": 7, "cls": 2}
    # the seed's form: Decoder(handle_extension(".png", f)) applied to a whole stream
    stream = Decoder(wds.handle_extension(".png", lambda data: "png!"))([{"__key__": "k", "png": b"x"}])
    assert [s["png"] for s in stream] == ["png!"]


def test_a_list_of_handlers_is_accepted_like_webdataset():
    assert Decoder([wds.imagehandler("l8")])({"__key__": "k", "png": png(image_of(3))})["png"].shape == (6, 4)


def test_json_null_decodes_to_none():
    assert Decoder()({"__key__": "k", "json": b"null"})["json"] is None


def test_pickle_is_refused_unless_allowed(image_shard):
    sample = {"__key__": "k", "__url__": "shard.tar", "data.pyd": pickle.dumps([1, 2])}
    with pytest.raises(DecodingError, match="allow_pickle=True") as info:
        Decoder()(sample)
    assert info.value.key == "k" and info.value.field == "data.pyd" and info.value.url == "shard.tar"
    assert Decoder(allow_pickle=True)(sample)["data.pyd"] == [1, 2]
    assert wds.decode(allow_pickle=True)([sample]).__iter__().__next__()["data.pyd"] == [1, 2]


def test_a_decoding_error_names_shard_key_and_field_and_handlers_can_skip(tmp_path):
    path = str(tmp_path / "bad.tar")
    with wds.TarWriter(path, encoder=False) as sink:
        sink.write({"__key__": "good1", "png": png(image_of(1))})
        sink.write({"__key__": "broken", "png": b"not an image"})
        sink.write({"__key__": "good2", "png": png(image_of(2))})
    with pytest.raises(DecodingError) as info:
        list(wds.WebDataset(path).decode("rgb8"))
    message = str(info.value)
    assert path in message and "'broken'" in message and "'png'" in message
    assert isinstance(info.value, ValueError) and info.value.member == "broken.png"
    kept = list(wds.WebDataset(path).decode("rgb8", handler=wds.ignore_and_continue))
    assert [s["__key__"] for s in kept] == ["good1", "good2"]
    pickle.loads(pickle.dumps(info.value))  # crosses process boundaries intact


def test_gz_fields_are_decoded_by_their_inner_extension():
    sample = {"__key__": "k", "json.gz": gzip.compress(b'{"a": 1}'), "seg.png.gz": gzip.compress(png(image_of(5)))}
    out = Decoder("rgb8")(sample)
    assert out["json.gz"] == {"a": 1} and out["seg.png.gz"].shape == (6, 4, 3)


@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_decode_keeps_order_and_values(image_shard, threads):
    serial = list(wds.WebDataset(image_shard).decode("rgb8"))
    threaded = list(wds.WebDataset(image_shard).decode("rgb8", num_threads=threads))
    assert [s["__key__"] for s in threaded] == [s["__key__"] for s in serial]
    for a, b in zip(serial, threaded):
        np.testing.assert_array_equal(a["png"], b["png"])


def test_threaded_decode_errors_go_through_the_handler(tmp_path):
    path = str(tmp_path / "bad.tar")
    with wds.TarWriter(path, encoder=False) as sink:
        for i in range(20):
            sink.write({"__key__": f"k{i:02d}", "cls": b"x" if i % 5 == 0 else str(i)})
    with pytest.raises(DecodingError, match="'k00'"):
        list(wds.WebDataset(path).decode(num_threads=2))
    kept = [s["cls"] for s in wds.WebDataset(path).decode(num_threads=2, handler=wds.ignore_and_continue)]
    assert kept == [i for i in range(20) if i % 5]


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="callables"):
        Decoder(42)
    with pytest.raises(ValueError, match="num_threads"):
        wds.decode(num_threads=-1)
    with pytest.raises(TypeError, match="to_tuple"):
        list(Decoder()([("a", "b")]))


def test_closing_a_threaded_decode_never_waits_for_running_work():
    # An abandoned iterator is closed by the garbage collector, possibly inside threading's own locks:
    # closing must not join the pool's threads (that deadlocked a test run), so it returns at once.
    import threading

    from wds_core.stages.decode import CHUNK

    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    # chunks alternate between the pool's thread (even) and the consuming thread (odd): the slow
    # sample sits in the third chunk, which the pool decodes while k0 is delivered
    slow_one = str(2 * CHUNK + 1).encode()

    def slow(key, data):
        if key == ".bin" and data == slow_one:
            started.set()
            release.wait(10)
            finished.set()
        return None

    samples = [{"__key__": f"k{i}", "bin": str(i).encode()} for i in range(4 * CHUNK)]
    it = iter(wds.DataPipeline(samples, wds.decode(slow, num_threads=2)))
    assert next(it)["__key__"] == "k0"
    assert started.wait(10)  # the slow one is being decoded now
    it.close()
    assert not finished.is_set()
    release.set()
