"""The tenbin format: round trips (hypothesis), files and streams, and damaged buffers."""

import io

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from wds_core.fieldcodecs import tenbin

DTYPES = st.sampled_from(["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
                          "uint32", "uint64"])  # fmt: skip


@given(st.lists(DTYPES.flatmap(lambda d: hnp.arrays(d, hnp.array_shapes(min_dims=0, max_dims=4, max_side=5))),
                max_size=4))  # fmt: skip
def test_round_trip(arrays):
    back = tenbin.decode_buffer(tenbin.encode_buffer(arrays))
    assert len(back) == len(arrays)
    for a, b in zip(arrays, back):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert len(tenbin.encode_buffer(arrays)) % 16 == 0  # 16-byte chunk heads, data padded to 64 bytes


def test_infos_streams_and_files(tmp_path):
    arrays = [np.eye(3, dtype=np.float32)[:, ::2], np.array(7, dtype=">i4")]  # strided and big-endian
    buffer = tenbin.encode_buffer(arrays, infos=["first", "x"])
    back, infos = tenbin.decode_buffer(buffer, infos=True)
    assert infos == ["first", "x"] and back[1] == 7 and back[0].tolist() == arrays[0].tolist()
    stream = io.BytesIO()
    tenbin.write(stream, arrays)
    stream.seek(0)
    assert len(tenbin.read(stream, n=1)) == 1 and len(tenbin.read(stream)) == 1
    tenbin.save(str(tmp_path / "a.ten"), *arrays)
    assert len(tenbin.load(str(tmp_path / "a.ten"))) == 2
    with pytest.raises(ValueError, match=r"\.ten"):
        tenbin.save(str(tmp_path / "a.bin"), *arrays)
    with pytest.raises(ValueError, match="8 ASCII"):
        tenbin.encode_buffer(arrays, infos=["way too long", ""])


def test_damaged_buffers_are_clear_errors():
    buffer = tenbin.encode_buffer([np.arange(10, dtype=np.int32)])
    with pytest.raises(ValueError, match="marker at byte 0"):
        tenbin.decode_buffer(b"x" + buffer[1:])
    with pytest.raises(ValueError, match="claims"):
        tenbin.decode_buffer(buffer[:-50])
    with pytest.raises(ValueError, match="header without"):
        tenbin.decode_buffer(buffer[:64])
    with pytest.raises(ValueError, match="cannot store"):
        tenbin.encode_buffer([np.array(["a"])])
