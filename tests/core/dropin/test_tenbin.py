"""webdataset.tenbin through the drop-in: the format wds's codec reads and writes; the inner helpers refused."""

import numpy as np
import pytest

from wds_core.dropin import tenbin


def test_the_format_round_trips_and_the_inner_pieces_say_why_they_are_absent():
    arrays = [np.arange(6, dtype=np.int16).reshape(2, 3), np.zeros(0, dtype=np.float32)]
    back = tenbin.decode_buffer(tenbin.encode_buffer(arrays))
    assert [a.tolist() for a in back] == [a.tolist() for a in arrays] and back[0].dtype == np.int16
    with pytest.raises(AttributeError, match=r"tenbin.encode_chunks is not provided by wds: an inner piece"):
        tenbin.encode_chunks  # noqa: B018
