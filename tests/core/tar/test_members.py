"""wds_core.tar.members: what a walk yields, typed: a member, or a refusal of one, never an error in a data slot."""

import io

import pytest

from tests.conftest import tar_bytes
from wds_core.errors import OverLimitError
from wds_core.limits import DecodeLimits
from wds_core.tar.members import Refused, TarOptions
from wds_core.tar.tario import iter_members


def test_a_member_over_the_limit_is_a_refusal_in_the_stream_and_the_others_stay_members():
    data = tar_bytes([("a.txt", b"small"), ("b.bin", bytes(3000)), ("c.txt", b"after")])
    options = TarOptions(limits=DecodeLimits(field_bytes=1000), skip_over_limit=True)
    items = list(iter_members(io.BytesIO(data), "s.tar", options=options))
    assert [type(item) for item in items] == [tuple, Refused, tuple]
    refusal = items[1]
    assert refusal.name == "b.bin" and isinstance(refusal.error, OverLimitError) and refusal.offset > 0
    assert refusal == ("b.bin", refusal.error, refusal.offset)  # still unpacks as (name, data, offset) did
    with pytest.raises(OverLimitError):
        list(iter_members(io.BytesIO(data), "s.tar", limits=DecodeLimits(field_bytes=1000)))


def test_options_say_what_is_kept_and_how_much_is_walked_at_a_time():
    data = tar_bytes([(f"k{i}.{ext}", b"x" * 700) for i in range(5) for ext in ("txt", "cls")])
    options = TarOptions(want=lambda name: name.endswith(".cls"), chunk=512)
    assert [name for name, _, _ in iter_members(io.BytesIO(data), options=options)] == [f"k{i}.cls" for i in range(5)]
    assert TarOptions().resolved_limits() == DecodeLimits.of()
