"""A short soak (issue 21; the long one is benchmarks/soak.py): nothing grows from epoch to epoch."""

import importlib.util
import pathlib

import pytest

pytestmark = pytest.mark.slow  # worker processes over many epochs


def _soak():
    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"
    spec = importlib.util.spec_from_file_location("wds_soak", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _settle():
    """Close what earlier tests left to the garbage collector (fsspec's cached HTTP clients keep idle connections
    that their event loop closes whenever it gets to it): the soak counts this process's descriptors."""
    import gc
    import time

    import fsspec

    fsspec.AbstractFileSystem.clear_instance_cache()
    gc.collect()
    time.sleep(0.5)


@pytest.mark.parametrize("flavour", ["core", "torch"])
def test_descriptors_processes_shared_memory_and_memory_stay_flat(flavour):
    if flavour == "torch":
        pytest.importorskip("torchdata")
    _settle()
    result = _soak().soak(epochs=30, flavour=flavour)
    rows = result["rows"][5:]
    for key in ("fds", "children", "shm"):
        assert len({row[key] for row in rows}) == 1, (key, [row[key] for row in rows])
    assert result["slopes"]["rss_mb"] < 0.5, result["slopes"]
    # restoring a state taken after an epoch resumes that (finished) epoch: the loop's next pass is empty
    assert 27 * 160 <= result["samples"] <= 30 * 160 and 0 < result["cache_files"] <= 4  # the cache evicts
