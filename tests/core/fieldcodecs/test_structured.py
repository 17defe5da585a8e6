"""The bounds of what JSON, MessagePack and CBOR fields decode to (wds_core/fieldcodecs/structured.py)."""

import json
import tracemalloc

import cbor2
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import wds_core as wds
from wds_core import DecodingError
from wds_core.fieldcodecs.structured import (
    WORST_RATIO,
    EndsEarly,
    cbor_cost,
    cbor_extent,
    json_cost,
    msgpack_cost,
    msgpack_extent,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.binary(max_size=40),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=8),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers(0, 9)), inner, max_size=6),
    ),
    max_leaves=60,
)


def peak(fn, data):
    tracemalloc.start()
    try:
        fn(data)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def as_json(value):
    return json.dumps(value, default=lambda b: b.hex()).encode()


@given(st.lists(values, min_size=1, max_size=30))
def test_the_bounds_hold_for_any_data(value):
    packed = msgpack.packb(value, use_bin_type=True)
    assert peak(lambda d: msgpack.unpackb(d, raw=False, strict_map_key=False), packed) <= msgpack_cost(packed)
    assert msgpack_extent(packed)[1] == len(packed)
    encoded = cbor2.dumps(value)
    assert peak(cbor2.loads, encoded) <= cbor_cost(encoded)
    assert cbor_extent(encoded)[1] == len(encoded)
    text = as_json(value)
    assert peak(json.loads, text) <= json_cost(text)


ADVERSARIAL = {
    "msgpack": [b"\x90", b"\x80", b"\x81\xc0\xc0", b"\x91\x90", b"\xd0\x80", b"\xd4\x01\x00", b"\xa2ab"],
    "cbor": [b"\x80", b"\xa0", b"\xa1\x01\x80", b"\xd9\x01\x02\x80", b"\xf0", b"\x38\x18", b"\xc1\x00"],
    "json": [b"[]", b"{}", b'{"a":{}}', b"[[]]", b"-1000", b'"ab"'],
}


@pytest.mark.parametrize("fmt", sorted(ADVERSARIAL))
def test_the_worst_cases_are_within_the_ratio_and_the_bound(fmt):
    """The fast path decodes without a walk when bytes x WORST_RATIO fits: no item shape may take more."""
    n = 50_000
    for item in ADVERSARIAL[fmt]:
        if fmt == "msgpack":
            data, cost = b"\xdd" + n.to_bytes(4, "big") + item * n, msgpack_cost
            decode = lambda d: msgpack.unpackb(d, strict_map_key=False)  # noqa: E731
        elif fmt == "cbor":
            data, decode, cost = b"\x9a" + n.to_bytes(4, "big") + item * n, cbor2.loads, cbor_cost
        else:
            data, decode, cost = b"[" + b",".join([item] * n) + b"]", json.loads, json_cost
        taken = peak(decode, data)
        assert taken <= len(data) * WORST_RATIO[fmt], (item, taken / len(data))
        assert taken <= cost(data), item


def test_lengths_beyond_the_data_are_refused_before_decoding():
    with pytest.raises(EndsEarly) as short:
        msgpack_cost(b"\xdd\xff\xff\xff\xff\x90")
    assert short.value.needed > 1 << 31
    with pytest.raises(EndsEarly):
        cbor_cost(b"\x5b" + (1 << 60).to_bytes(8, "big"))
    with pytest.raises(ValueError, match="break outside"):
        cbor_cost(b"\x81\xff")


@pytest.mark.slow
def test_a_large_field_is_walked_and_decoded_when_it_fits():
    big = msgpack.packb([{"x": i, "y": [i, i]} for i in range(200_000)])
    limits = {"field_bytes": len(big) * 100}  # under bytes x WORST_RATIO: the walk decides
    got = wds.Decoder(limits=limits).decode({"__key__": "k", "mp": big})["mp"]
    assert len(got) == 200_000 and got[-1] == {"x": 199_999, "y": [199_999, 199_999]}
    with pytest.raises(DecodingError, match=r"the msgpack field \(.* bytes\) could decode to objects of"):
        wds.Decoder(limits={"field_bytes": len(big) * 20}).decode({"__key__": "k", "mp": big})


def test_structured_fields_count_toward_the_sample_limit():
    fields = {f"{i}.json": json.dumps(list(range(1000))).encode() for i in range(4)}
    sample = {"__key__": "k", **fields}
    assert len(wds.Decoder().decode(sample)) == 5
    with pytest.raises(DecodingError, match="sample_bytes"):
        wds.Decoder(limits={"sample_bytes": 3 * len(fields["0.json"]) * WORST_RATIO["json"]}).decode(sample)
