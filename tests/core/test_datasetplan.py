"""webdataset's keywords translated into a WebDataset's plan: silently in the drop-in, with a warning natively."""

import inspect
import warnings

import pytest

import wds_core
from tests.core.test_dataset import keys
from wds_core import dropin
from wds_core.datasetplan import NATIVE_SPELLING, webdataset_plan


def test_native_code_with_webdatasets_keywords_works_and_is_told_the_new_spelling(shards):
    spec, _, _ = shards  # tests/conftest.py's
    with pytest.warns(DeprecationWarning, match=r"shardshuffle= -> shuffle=.*storage_options= -> storage="):
        old = keys(wds_core.WebDataset(spec, shardshuffle=True, seed=4, storage_options={}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = keys(wds_core.WebDataset(spec, shuffle=True, seed=4, storage={}))
        assert keys(dropin.WebDataset(spec, shardshuffle=True, seed=4, storage_options={})) == new  # no warning
    assert old == new and sorted(new) != new


def test_every_webdataset_keyword_has_a_native_spelling():
    real = pytest.importorskip("webdataset")
    theirs = set(inspect.signature(real.WebDataset.__init__).parameters) - {"self", "urls", "seed", "empty_check"}
    assert theirs <= set(NATIVE_SPELLING)
    with pytest.raises(TypeError, match="unexpected keyword argument 'shard_shuffle'"):
        wds_core.WebDataset("a.tar", shard_shuffle=True)
    with pytest.raises(TypeError, match="both storage= and storage_options="):
        webdataset_plan("a.tar", {"storage": {}}, {"storage_options": {}})
