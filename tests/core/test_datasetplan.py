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


def test_every_native_entry_point_says_storage_and_takes_the_old_word_with_the_tables_warning(tmp_path, shards):
    """Issue 68.5: WebDataset took storage=, eight other entry points storage_options=; now all take storage=,
    and webdataset's word still works with the DeprecationWarning of the keyword table."""
    from wds_core.io.storage import create_shard, open_shard, read_bytes
    from wds_core.sources.descriptor import load_descriptor
    from wds_core.sources.recordstreams import cbors_to_samples, msgpacks_to_samples
    from wds_core.sources.tarsamples import TarfileToSamples, tarfile_to_samples

    spec, paths, _ = shards
    entry_points = [
        lambda **kw: wds_core.ShardListDataset(paths, **kw).close(),
        lambda **kw: wds_core.TarWriter(str(tmp_path / f"w{len(list(tmp_path.iterdir()))}.tar"), **kw).close(),
        lambda **kw: TarfileToSamples(**kw),
        lambda **kw: tarfile_to_samples(**kw),
        lambda **kw: cbors_to_samples(**kw),
        lambda **kw: msgpacks_to_samples(**kw),
        lambda **kw: load_descriptor({"wids_version": 1, "shardlist": [{"url": paths[0], "nsamples": 25}]}, **kw),
        lambda **kw: open_shard(paths[0], **kw).close(),
        lambda **kw: read_bytes(paths[0], **kw),
        lambda **kw: create_shard(str(tmp_path / "c.bin"), **kw).abort(),
    ]
    spelled = NATIVE_SPELLING["storage_options"].replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
    for call in entry_points:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            call(storage={})
        with pytest.warns(DeprecationWarning, match=rf"storage_options= -> {spelled}"):
            call(storage_options={})
        with pytest.raises(TypeError, match="both storage= and storage_options="):
            call(storage={}, storage_options={})
    for name in ("make_shards", "map_shards"):
        parameters = inspect.signature(getattr(wds_core, name)).parameters
        assert "storage" in parameters and parameters["storage_options"].default is None
