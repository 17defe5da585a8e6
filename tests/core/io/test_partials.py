"""wds_core.io.partials: a file being written has a hidden name of its writer's, which its leftovers are known by."""

import os

from wds_core.io.partials import PARTIAL, temporary_name


def test_a_temporary_name_is_hidden_unique_and_says_whose_it_is():
    names = {temporary_name("shard-000001.tar") for _ in range(100)}
    assert len(names) == 100
    for name in names:
        matched = PARTIAL.fullmatch(name)
        assert name.startswith(".") and matched is not None
        assert matched["name"] == "shard-000001.tar" and int(matched["pid"]) == os.getpid()
    assert PARTIAL.fullmatch(".a.tar.12.zz.partial") is None
