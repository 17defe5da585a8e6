"""The built-in decoders by extension and the handler helpers."""

import gzip
import io
import json
import pickle

import cbor2
import msgpack
import numpy as np
import pytest

from wds_core.fieldcodecs import Continue, basic_decoders, basichandlers, gzfilter, handle_extension
from wds_core.fieldcodecs.decoders import PickleNotAllowed


def npy(array):
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


@pytest.mark.parametrize(
    "ext,data,expected",
    [
        ("txt", "héllo".encode(), "héllo"),
        ("text", b"a", "a"),
        ("transcript", b"b", "b"),
        ("cls", b"7", 7),
        ("cls2", b" 12\n", 12),
        ("index", b"3", 3),
        ("inx", b"4", 4),
        ("id", b"5", 5),
        ("class", b"6", 6),
        ("count", b"8", 8),
        ("json", b'{"a": [1, 2]}', {"a": [1, 2]}),
        ("jsn", b"[1]", [1]),
        ("mp", msgpack.packb({"a": 1}), {"a": 1}),
        ("msg", msgpack.packb([1, "x"]), [1, "x"]),
        ("msgpack", msgpack.packb({1: 2}), {1: 2}),
        ("cbor", cbor2.dumps({"a": b"\x00"}), {"a": b"\x00"}),
        ("TXT", b"upper", "upper"),
    ],
)
def test_extension_table(ext, data, expected):
    assert basichandlers("." + ext, data) == expected


def test_arrays_without_pickle():
    np.testing.assert_array_equal(basichandlers(".npy", npy(np.arange(6).reshape(2, 3))), np.arange(6).reshape(2, 3))
    out = io.BytesIO()
    np.savez(out, a=np.ones(2), b=np.zeros((1, 1)))
    decoded = basichandlers(".npz", out.getvalue())
    assert isinstance(decoded, dict) and sorted(decoded) == ["a", "b"]
    with pytest.raises(ValueError, match="pickle"):
        basichandlers(".npy", npy(np.array([{"x": 1}], dtype=object)))


def test_pickles_only_when_allowed():
    data = pickle.dumps({"x": 1})
    for ext in ("pyd", "pickle", "pkl"):
        with pytest.raises(PickleNotAllowed, match="allow_pickle=True"):
            basichandlers("." + ext, data)
        assert basic_decoders(allow_pickle=True)("." + ext, data) == {"x": 1}


def test_unknown_extensions_pass():
    assert basichandlers(".xyz", b"raw") is None


def test_gzfilter_continues_with_the_inner_extension():
    result = gzfilter(".seg.txt.gz", gzip.compress(b"hi"))
    assert isinstance(result, Continue) and result.key == ".seg.txt" and result.data == b"hi"
    assert gzfilter(".txt", b"hi") is None


def test_handle_extension_matches_trailing_components():
    h = handle_extension("jpg jpeg", lambda data: "decoded")
    assert h(".jpg", b"") == "decoded" and h(".a.JPEG", b"") == "decoded" and h(".png", b"") is None
    dotted = handle_extension("seg.png", lambda data: "seg")
    assert dotted(".seg.png", b"") == "seg" and dotted(".png", b"") is None and dotted(".x.png", b"") is None
    leading = handle_extension(".png", lambda data: "png")  # the seed's spelling
    assert leading(".png", b"") == "png" and leading(".mask.png", b"") == "png"
    assert json.loads(handle_extension("json", json.loads)(".json", b"[1]").__repr__()) == [1]
