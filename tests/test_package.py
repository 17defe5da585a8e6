import subprocess
import sys

import pytest

import wds_core


@pytest.mark.slow
def test_core_imports_no_framework():
    code = "import sys, wds_core; print([m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_names_are_pinned():
    expected = {
        "DataPipeline", "WebDataset", "SimpleShardList", "ResampledShards", "tarfile_to_samples", "shuffle",
        "to_tuple", "map", "map_dict", "map_tuple", "select", "rename", "batched", "unbatched", "slice",
        "split_by_node", "split_by_worker", "reraise_exception", "warn_and_continue", "ignore_and_continue",
        "ignore_and_stop", "warn_and_stop", "WdsError", "expand_urls",
    }  # fmt: skip
    assert expected <= set(wds_core.__all__)
    assert all(hasattr(wds_core, name) for name in wds_core.__all__)
    assert len(wds_core.__all__) == 152


@pytest.mark.slow
def test_demo_main_job_runs():
    out = subprocess.run(
        ["wds", "demo", "--shards", "3", "--samples-per-shard", "200"], capture_output=True, text=True, check=True
    )
    assert "exactly once" in out.stdout and "samples/s" in out.stdout
