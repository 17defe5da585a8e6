"""A short soak (issue 21; the long one is benchmarks/soak.py): nothing grows from epoch to epoch.

The soak runs in a process of its own: it counts that process's descriptors, children and memory, and the test
process holds whatever earlier tests left open (kept-alive connections to their servers, closed when they are
next used or collected), which may change while the soak runs."""

import json
import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # worker processes over many epochs

SOAK = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


@pytest.mark.parametrize("flavour", ["core", "torch"])
def test_descriptors_processes_shared_memory_and_memory_stay_flat(flavour):
    if flavour == "torch":
        pytest.importorskip("torchdata")
    command = [sys.executable, str(SOAK), "--epochs", "30", "--loaders", flavour, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["flavour"] == flavour
    rows = result["rows"][5:]
    for key in ("fds", "children", "shm"):
        assert len({row[key] for row in rows}) == 1, (key, [row[key] for row in rows])
    assert result["slopes"]["rss_mb"] < 0.5, result["slopes"]
    # restoring a state taken after an epoch resumes that (finished) epoch: the loop's next pass is empty
    assert 27 * 160 <= result["samples"] <= 30 * 160 and 0 < result["cache_files"] <= 4  # the cache evicts
