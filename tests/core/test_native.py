"""The compiled helpers behind one loader (wds_core._native): one switch turns them all off, and each says whether
it is built and used."""

import os
import subprocess
import sys

import pytest

from wds_core import _native


def test_native_status_names_every_helper_and_load_refuses_others():
    status = _native.native_status()
    assert sorted(status) == sorted(_native.HELPERS) and all(set(s) == {"built", "used"} for s in status.values())
    if os.environ.get("WDS_REQUIRE_COMPILED") == "1":  # CI builds them all: one left out fails here
        assert all(s["built"] for s in status.values()), status
    with pytest.raises(ValueError, match="no compiled helper 'nope'"):
        _native.load("nope")


@pytest.mark.slow
def test_pure_python_leaves_every_helper_unused():
    code = (
        "from wds_core import _native\n"
        "from wds_core.tar import grouping\n"
        "from wds_core.tar import compiled_walk\n"
        "from wds_core.fieldcodecs.jpeg import region_decoding\n"
        "from wds_core.io.localfiles import _mapped_copy\n"
        "print(compiled_walk(), grouping.GROUPER, region_decoding(), _mapped_copy(),"
        " any(s['used'] for s in _native.native_status().values()))\n"
    )
    env = {**os.environ, "WDS_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["False", "None", "False", "None", "False"]


def test_the_package_says_its_status_and_each_switch_turns_off_its_helper(monkeypatch):
    import wds_core
    from wds_core.io.localfiles import _mapped_copy

    assert wds_core.native_status is _native.native_status  # the first thing a bug report asks for
    for name, (variable, off) in _native._SWITCHES.items():
        monkeypatch.setenv(variable, off)
        assert _native.load(name) is None and not _native.native_status()[name]["used"]
    assert _mapped_copy() is None  # WDS_MAPCOPY=pread: indexed access reads local shards with pread
