"""webdataset's top-level names: the one list, and what the core and the drop-in derive from it."""

import types

import pytest

import wds_core
from wds_core.spellings import ELSEWHERE, TOP_LEVEL_NAMES, spellings

# 0.2.x's names that 1.x dropped (code written for 0.2 still imports them)
FROM_0_2 = {"cached_tarfile_samples", "cached_tarfile_to_samples", "cbors2_to_samples", "cbors_to_samples",
            "lru_cleanup", "maybe_cached_tarfile_to_samples"}  # fmt: skip


@pytest.mark.slow
def test_the_list_is_webdatasets_top_level_names():
    real = pytest.importorskip("webdataset")
    theirs = {n for n in dir(real) if not n.startswith("_") and not isinstance(getattr(real, n), types.ModuleType)}
    assert set(TOP_LEVEL_NAMES) == theirs | FROM_0_2 and len(set(TOP_LEVEL_NAMES)) == len(TOP_LEVEL_NAMES)


def test_spellings_are_the_names_a_package_gives_besides_its_own():
    assert spellings([]) == (set(TOP_LEVEL_NAMES) | {"Processor"}) - ELSEWHERE
    assert wds_core.WEBDATASET_NAMES == spellings(wds_core.__all__)
    assert "shuffle" in wds_core.WEBDATASET_NAMES and "WebDataset" not in wds_core.WEBDATASET_NAMES
    assert not ELSEWHERE & wds_core.WEBDATASET_NAMES and ELSEWHERE <= set(TOP_LEVEL_NAMES)
