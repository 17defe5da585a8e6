"""Encoders by extension are symmetric to the decoders: write then read gives the value back."""

import gzip

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wds_core.fieldcodecs import NULL, FieldEncoder, basic_decoders, gzfilter

ENCODE = FieldEncoder()
DECODE = basic_decoders(allow_pickle=True)


def round_trip(field, value, encoder=ENCODE):
    data = encoder(field, value)
    key = "." + field
    more = gzfilter(key, data)
    if more is not None:
        key, data = more.key, more.data
    decoded = DECODE(key, data)
    if decoded is NULL:
        return None
    return data if decoded is None else decoded


@pytest.mark.parametrize(
    "field,value",
    [
        ("cls", 3),
        ("cls", np.int64(9)),
        ("index", 0),
        ("txt", "héllo wörld"),
        ("json", {"a": [1, 2.5, None, "x"]}),
        ("jsn", [1, 2]),
        ("mp", {"a": [1, b"\x00"]}),
        ("msgpack", [1, "two"]),
        ("cbor", {"a": [1, b"\x00"], "b": 2.5}),
        ("txt.gz", "compressed text"),
        ("json.gz", {"k": 1}),
        ("bin", b"\x00\x01"),
        ("json", None),
        ("cbor", None),
    ],
)
def test_round_trip(field, value):
    assert round_trip(field, value) == value


def test_str_is_utf8_under_any_extension():
    assert ENCODE("anything", "é") == "é".encode()


def test_arrays_round_trip():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(round_trip("npy", a), a)
    got = round_trip("npz", {"a": a, "b": np.ones(2, np.int8)})
    np.testing.assert_array_equal(got["a"], a) and np.testing.assert_array_equal(got["b"], np.ones(2))
    assert round_trip("json", {"x": np.float32(0.5), "y": np.arange(2)}) == {"x": 0.5, "y": [0, 1]}


def test_gz_is_deterministic():
    assert ENCODE("txt.gz", "x" * 100) == ENCODE("txt.gz", "x" * 100)
    assert gzip.decompress(ENCODE("txt.gz", "x" * 100)) == b"x" * 100


def test_refusals_are_clear():
    with pytest.raises(ValueError, match="allow_pickle=True"):
        ENCODE("pyd", {"x": 1})
    assert round_trip("pyd", {"x": 1}, FieldEncoder(allow_pickle=True)) == {"x": 1}
    with pytest.raises(TypeError, match="no encoder for extension 'xyz'"):
        ENCODE("xyz", 3)
    with pytest.raises(TypeError, match="text fields take str"):
        ENCODE("txt", 3)
    with pytest.raises(TypeError):
        ENCODE("cls", 2.5)


def test_a_custom_table_replaces_the_defaults():
    enc = FieldEncoder({"cls": lambda v: b"custom"})
    assert enc("cls", 1) == b"custom" and enc("txt", "still str") == b"still str"
    with pytest.raises(TypeError):
        enc("json", {"a": 1})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_structured_formats_round_trip(value):
    for field in ("mp", "cbor", "msgpack.gz"):
        assert round_trip(field, value) == value
    if not isinstance(value, str):  # a str under .json is JSON text already, as webdataset has it
        assert round_trip("json", value) == round_trip("json.gz", value) == value


def test_json_str_is_json_text():
    assert round_trip("json", '{"a": 1}') == {"a": 1}
    assert round_trip("mp", "plain") == "plain"


def test_bytes_under_gz_are_compressed_too():
    assert gzip.decompress(ENCODE("bin.gz", b"raw bytes")) == b"raw bytes"
    assert round_trip("txt.gz", b"already text") == "already text"
