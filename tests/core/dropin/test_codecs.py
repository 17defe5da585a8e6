"""webdataset.autodecode and webdataset.writer over wds's codecs, and the tenbin format end to end."""

import importlib

import numpy as np
import pytest

import wds_core
from wds_core.dropin import autodecode, writer

webdataset = pytest.importorskip("webdataset")


def test_decoders_table_registers_for_every_decoder():
    assert autodecode.decoders["cls"](b"7") == 7
    autodecode.decoders["rev"] = lambda data: data[::-1]
    try:
        assert wds_core.Decoder()({"__key__": "k", "x.rev": b"abc"})["x.rev"] == b"cba"
        assert "rev" in autodecode.decoders
    finally:
        del autodecode.decoders["rev"]
    assert autodecode.npy_loads(writer.numpy_dumps(np.arange(3))).tolist() == [0, 1, 2]
    assert autodecode.msgpack_loads(writer.mp_dumps({"a": 1})) == {"a": 1}
    assert autodecode.cbor_loads(writer.cbor_dumps([1, "x"])) == [1, "x"]
    assert autodecode.call_extension_handler(".seg.png", b"abc", len, ["seg.png"]) == 3
    with pytest.raises(NotImplementedError, match="wds_torch"):
        autodecode.torch_loads(b"")
    assert "rgb8" in autodecode.imagespecs and "jpg" in autodecode.IMAGE_EXTENSIONS


def test_pickle_fields_stay_refused_by_default():
    import pickle

    sample = {"__key__": "k", "x.pyd": pickle.dumps(1)}
    with pytest.raises(wds_core.DecodingError, match="allow_pickle"):
        autodecode.default_decoder(sample)
    assert autodecode.Decoder(allow_pickle=True)(sample)["x.pyd"] == 1


def test_writer_encoders_by_webdataset_names():
    encode = writer.make_encoder(True)
    encoded = encode({"__key__": "k", "a.cls": 3, "b.json": {"x": 1}, "c.ten": [np.ones(2, np.float32)]})
    assert encoded["a.cls"] == b"3" and encoded["__key__"] == "k"
    assert writer.make_encoder(False)({"a": 1}) == {"a": 1}
    png = writer.imageencoder(np.zeros((4, 4, 3), np.uint8), "PNG")
    assert png[:4] == b"\x89PNG"
    assert writer.bytestr(12) == b"12"
    handlers = writer.make_handlers()
    writer.add_handlers(handlers, "joined", lambda v: ",".join(v).encode())
    assert writer.encode_based_on_extension1(["a", "b"], "x.joined", handlers) == b"a,b"
    assert writer.encode_based_on_extension1("ab", "x.joined", handlers) == b"ab"  # str is text, as in webdataset


def test_tenbin_fields_write_and_read_back_and_match_webdataset(tmp_path):
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1, 2], dtype=np.int64)]
    with wds_core.TarWriter(str(tmp_path / "t.tar")) as sink:
        sink.write({"__key__": "a", "ten": arrays, "tb": arrays[0]})
    sample = next(iter(wds_core.WebDataset(str(tmp_path / "t.tar")).decode()))
    assert [a.tolist() for a in sample["ten"]] == [a.tolist() for a in arrays]
    assert sample["tb"][0].tolist() == arrays[0].tolist()
    raw = next(iter(wds_core.WebDataset(str(tmp_path / "t.tar"))))["ten"]
    theirs = webdataset.tenbin.decode_buffer(raw)
    assert [a.tolist() for a in theirs] == [a.tolist() for a in arrays]
    ours = importlib.import_module("wds_core.fieldcodecs.tenbin").decode_buffer(
        bytes(webdataset.tenbin.encode_buffer(arrays))
    )
    assert [a.tolist() for a in ours] == [a.tolist() for a in arrays]
