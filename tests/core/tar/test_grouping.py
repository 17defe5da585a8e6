"""Members to samples: webdataset's key rules (checked against webdataset's own) and the grouping."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wds_core import SampleError
from wds_core.errors import OverLimitError, ShardOpenError, TruncatedShardError, WdsError
from wds_core.fieldcodecs.bounded import DecodeLimits
from wds_core.tar.cursor import Cursor
from wds_core.tar.grouping import group_members, split_key
from wds_core.tar.members import Refused

webdataset = pytest.importorskip("webdataset")
from webdataset.tariterators import base_plus_ext  # noqa: E402


@given(st.text(st.sampled_from("ab./_X\n"), max_size=12))
def test_split_key_is_webdatasets_rule(name):
    assert split_key(name) == base_plus_ext(name)


def members(*names):
    return iter([(n, n.encode(), i * 1024) for i, n in enumerate(names)])


def test_grouping_rules():
    got = list(
        group_members(
            members("__meta__", "a.jpg", "a.JSON", "a.seg.PNG", "noext", "b/c.d/e.txt", ".hidden", "__d__/x.txt"),
            "u.tar",
            path="u.tar",
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


PLAIN = st.builds("{}.{}".format, st.sampled_from(["a", "b", "d.v/a", "Ü"]), st.sampled_from(["jpg", "JPG", "seg.Png"]))
NAMES = st.one_of(PLAIN, PLAIN, PLAIN, st.text(st.sampled_from("ab./_X\nü"), max_size=7))
DATA = st.one_of(st.binary(max_size=6), st.binary(max_size=6), st.binary(max_size=6).map(memoryview), st.booleans())


@given(
    st.lists(st.tuples(NAMES, DATA), max_size=12),
    st.sampled_from([None, "cut", "refused", "broken"]),
    st.integers(0, 30),
    st.sampled_from([None, True, False]),
    st.sampled_from(["u.tar", "http://host/u.tar"]),
)
def test_the_compiled_grouping_gives_what_the_python_loop_gives(items, ending, budget, go_on, url):
    """groupfast.c groups plain members and leaves the first other one, and all after it, to the Python loop:
    on members of every kind (refusals among them, a cut, a reader's refusal or a failing stream at the end),
    the same samples, the same cursor at each, the same error and the same partial sample as the loop alone."""
    from wds_core.tar import grouping

    if grouping.GROUPER is None:
        if os.environ.get("WDS_REQUIRE_COMPILED") == "1":
            pytest.fail("the compiled grouping (wds_core/groupfast.c) was not built")
        pytest.skip("the compiled grouping is not built here or is turned off (WDS_PURE_PYTHON)")

    def run(compiled: bool) -> tuple[list, str, object]:
        def members():
            for i, (name, data) in enumerate(items):
                if isinstance(data, bool):  # a member the reader refused (data=True: an unnamed refusal)
                    refusal = OverLimitError("over", url=url, member=None if data else name, offset=i * 512)
                    yield Refused((None if data and i % 2 else name), refusal, i * 512)
                else:
                    yield name, data, i * 512
            if ending == "cut":
                raise TruncatedShardError("cut", url=url, offset=len(items) * 512)
            if ending == "refused":
                raise OverLimitError("over", url=url, member="b.txt", offset=len(items) * 512)
            if ending == "broken":
                raise ShardOpenError("gone", url=url)

        position, got, reports = Cursor(), [], []
        saved = grouping.GROUPER
        grouping.GROUPER = saved if compiled else None
        try:
            refused = None if go_on is None else (lambda error: reports.append(str(error)) or go_on)
            limits = DecodeLimits(sample_bytes=budget)
            for sample in group_members(members(), url, cursor=position, limits=limits, refused=refused):
                got.append(({k: bytes(v) if isinstance(v, memoryview) else v for k, v in sample.items()},
                            position.offset, position.name))  # fmt: skip
            ended = "end"
        except WdsError as exn:
            ended = f"{type(exn).__name__}: {exn}"
        finally:
            grouping.GROUPER = saved
        return got, ended, (position.partial, reports)

    assert run(True) == run(False)
