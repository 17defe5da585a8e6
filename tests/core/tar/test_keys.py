"""wds_core.tar.keys: webdataset's rules for the sample and field a member's name stands for."""

import pytest

from wds_core.tar.keys import is_meta, split_key


@pytest.mark.parametrize(
    ("name", "key", "field"),
    [
        ("abc.jpg", "abc", "jpg"),
        ("abc.seg.JPG", "abc", "seg.JPG"),
        ("dir.v2/abc.seg.png", "dir.v2/abc", "seg.png"),
        ("a/b/c.json", "a/b/c", "json"),
        ("abc.", "abc", ""),
        ("0001.txt.gz", "0001", "txt.gz"),
    ],
)
def test_key_and_field(name, key, field):
    assert split_key(name) == (key, field)


@pytest.mark.parametrize("name", ["noext", "dir.v2/noext", ".jpg", "dir/"])
def test_names_without_a_key(name):
    assert split_key(name) == (None, None)


@pytest.mark.parametrize(
    "name", ["dir/.hidden", "a/b.c/d.e.f", "x..y", "a b.txt", "\u00e9.jpg", "dir/", "k.", "./k.jpg"]
)
def test_the_same_as_webdataset(name):
    tariterators = pytest.importorskip("webdataset.tariterators")
    assert split_key(name) == tariterators.base_plus_ext(name)


def test_a_newline_in_a_name_is_read_as_webdataset_reads_it():
    assert split_key("a\nb.txt") == ("a\nb", "txt")


@pytest.mark.parametrize(("name", "meta"), [("__meta__", True), ("__info__/a.json", True), ("__key__.txt", False),
                                            ("__x", False), ("a/__meta__", False), ("k.__x__", False)])  # fmt: skip
def test_metadata_members(name, meta):
    assert is_meta(name) is meta
