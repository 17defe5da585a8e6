import pathlib

import pytest

from wds_core import EmptyDatasetError, SpecError, expand_urls
from wds_core.io.urls import join_url, url_joiner


def test_braces_lists_and_double_colon():
    assert expand_urls("a-{0..2}.tar") == ["a-0.tar", "a-1.tar", "a-2.tar"]
    assert expand_urls("a-{000..001}.tar::b-{x,y}.tar") == ["a-000.tar", "a-001.tar", "b-x.tar", "b-y.tar"]
    assert expand_urls(["a-{0..1}.tar", pathlib.Path("c.tar")]) == ["a-0.tar", "a-1.tar", "c.tar"]


def test_empty_spec_is_an_error_that_says_so():
    with pytest.raises(EmptyDatasetError, match="expands to no URL"):
        expand_urls("")
    with pytest.raises(EmptyDatasetError):
        expand_urls([])


def test_wrong_types_are_errors():
    with pytest.raises(SpecError):
        expand_urls(42)
    with pytest.raises(SpecError):
        expand_urls([b"bytes.tar"])


def test_wds_environment_variables_in_specs(monkeypatch):
    monkeypatch.setenv("WDS_BUCKET", "s3://bucket")
    assert expand_urls("${BUCKET}/x-{0..1}.tar") == ["s3://bucket/x-0.tar", "s3://bucket/x-1.tar"]
    monkeypatch.delenv("WDS_BUCKET")
    with pytest.raises(SpecError, match="WDS_BUCKET"):
        expand_urls("${BUCKET}/x.tar")


@pytest.mark.parametrize(
    "base", [None, "s3://b/", "s3://b/x/", "s3://b/x/../y/", "s3://b", "/data/", "/", "//", "/a/./b/", "rel/dir/"]
)
def test_url_joiner_gives_join_url(base):
    names = ["a.tar", "d/a.tar", "../a.tar", "./a.tar", "a//b.tar", "/abs.tar", "s3://o/x.tar", "pipe:cat x", "-"]
    names += ["...", ".hidden", "a/./b", "a/../b", "x/", "a.b/c.d", "%41", "{}", " sp", "..a/b"]
    join = url_joiner(base)
    assert [join(name) for name in names] == [join_url(base, name) for name in names]


def test_joining_a_long_name_from_data_takes_no_backtracking():
    """A descriptor's shard URL of eight 15-character segments and an empty one took 60 s to be joined (a regular
    expression's backtracking, exponential in the segments); it is a loop over the segments now."""
    from wds_core.io.urls import url_joiner

    name = ("a.tar" * 3 + "/") * 8 + "/x"
    assert url_joiner("/data/")(name) == "/data/" + name.replace("//", "/")
    assert url_joiner("/data/")("a/./b/../c.tar") == "/data/a/c.tar"
