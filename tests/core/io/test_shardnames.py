import array
import pickle
import random

import pytest

from wds_core.errors import EmptyDatasetError, SpecError
from wds_core.io import shardnames
from wds_core.io.shardnames import PermutedNames, ShardNames, shard_names
from wds_core.io.urls import expand_urls

SPECS = [
    "data-{000..009}.tar",
    "a{1,2}b{x,y}c",
    "x{a..e}y{1..2}",
    "{10..1}",
    "{1..10..3}",
    "{10..1..4}",
    "{-3..3}",
    "{-03..3}",
    "{0..0}",
    "{1..3}{01..03}",
    "s3://b/{a,b}/x-{00..12}.tar::other.tar",
    "n{a,{b,c}}-{1..2}",
    "a\\{b\\}{1..3}",
    "dir/{0..2}/t-{0..1}.tar",
    "${ROOT}/t-{0..5}.tar",
    ["a.tar", "b.tar", "c-{0..2}.tar", "d.tar", "e.tar"],
    "plain.tar",
    "unicodé-{0..2}.tar::ü.tar",
    "100%-{0..3}-%d.tar",
]


@pytest.fixture
def lazy(monkeypatch):
    monkeypatch.setattr(shardnames, "LAZY_FROM", 0)
    monkeypatch.setenv("WDS_ROOT", "/data")


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_the_names_and_order_are_expand_urls(lazy, spec):
    expected = expand_urls(spec)
    names = shard_names(spec)
    assert isinstance(names, ShardNames) and len(names) == len(expected)
    assert list(names) == expected and names == expected
    assert [names[i] for i in range(len(expected))] == expected
    assert [names[-i] for i in range(1, len(expected) + 1)] == expected[::-1]
    assert names[1:4] == expected[1:4] and names[::-2] == expected[::-2]
    assert list(pickle.loads(pickle.dumps(names))) == expected
    order = random.Random(5).sample(range(len(expected)), len(expected))
    assert names.pick(order) == [expected[i] for i in order]
    permuted = PermutedNames(names, array.array("i", order))
    assert permuted[:] == [expected[i] for i in order] and permuted[1::2] == [expected[i] for i in order[1::2]]
    with pytest.raises(IndexError):
        names[len(expected)]


def test_ten_million_shards_are_a_range_not_a_list():
    names = shard_names("s3://bucket/train-{0000000..9999999}.tar")
    assert len(names) == 10_000_000
    assert names[0] == "s3://bucket/train-0000000.tar" and names[-1] == "s3://bucket/train-9999999.tar"
    assert names[1234567] == "s3://bucket/train-1234567.tar"
    assert len(pickle.dumps(names)) < 2_000
    both = shard_names("a-{000000..199999}.tar::b-{0..9}.tar")
    assert len(both) == 200_010 and both[199_999] == "a-199999.tar" and both[200_000] == "b-0.tar"


def test_small_specs_stay_lists_and_bad_specs_are_clear():
    assert shard_names("a-{0..3}.tar") == ["a-0.tar", "a-1.tar", "a-2.tar", "a-3.tar"]
    assert type(shard_names("a-{0..3}.tar")) is list
    with pytest.raises(EmptyDatasetError):
        shard_names("::")
    with pytest.raises(SpecError):
        shard_names(3)
    with pytest.raises(SpecError):
        shard_names(["a.tar", 3])
    for unbalanced in ("{1..3}{", "}{1..2}", "a}b", "{a"):  # a SpecError saying where (issue 45), in both
        with pytest.raises(SpecError, match="never closed|without its"):
            expand_urls(unbalanced)
        with pytest.raises(SpecError, match="never closed|without its"):
            shard_names(unbalanced)


@pytest.mark.parametrize("spec", ["lit{abc}-{1..2}", "x{a{1,2}}y{0..1}", "t-{000000...000005}.tar"])
def test_a_group_braceexpand_would_keep_as_it_is_is_an_error(spec):
    """braceexpand leaves such a group in the name (a shard "not found" later); issue 45 makes it an error that
    says where, in both expansions."""
    from wds_core.errors import SpecError

    for expand in (expand_urls, shard_names):
        with pytest.raises(SpecError, match="does not expand"):
            expand(spec)
