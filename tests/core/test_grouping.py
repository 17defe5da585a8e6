"""Members to samples: webdataset's key rules (checked against webdataset's own) and the grouping."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wds_core import SampleError
from wds_core.tar import group_members, split_key

webdataset = pytest.importorskip("webdataset")
from webdataset.tariterators import base_plus_ext  # noqa: E402


@given(st.text(st.sampled_from("ab./_X\n"), max_size=12))
@settings(max_examples=500, deadline=None)
def test_split_key_is_webdatasets_rule(name):
    assert split_key(name) == base_plus_ext(name)


def members(*names):
    return iter([(n, n.encode(), i * 1024) for i, n in enumerate(names)])


def test_grouping_rules():
    got = list(
        group_members(
            members("__meta__", "a.jpg", "a.JSON", "a.seg.PNG", "noext", "b/c.d/e.txt", ".hidden", "__d__/x.txt"),
            "u.tar",
        )
    )
    assert got == [
        {"__key__": "a", "__url__": "u.tar", "__local_path__": "u.tar", "jpg": b"a.jpg", "json": b"a.JSON",
         "seg.png": b"a.seg.PNG"},
        {"__key__": "b/c.d/e", "__url__": "u.tar", "__local_path__": "u.tar", "txt": b"b/c.d/e.txt"},
    ]  # fmt: skip


def test_duplicate_field_is_an_error_naming_member_and_offset():
    with pytest.raises(SampleError, match="occurs twice") as info:
        list(group_members(members("a.jpg", "a.JPG"), "u.tar"))
    assert info.value.member == "a.JPG" and info.value.offset == 1024 and info.value.url == "u.tar"
