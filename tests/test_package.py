import importlib
import subprocess
import sys

import pytest

import wds_core


@pytest.mark.slow
def test_core_imports_no_framework():
    code = "import sys, wds_core; print([m for m in ('torch', 'jax', 'tensorflow') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def api_modules():
    """The modules the API reference documents (``::: module`` in docs/api)."""
    import pathlib
    import re

    pages = pathlib.Path(__file__).parent.parent.joinpath("docs", "api").glob("*.md")
    return {name for page in pages for name in re.findall(r"^::: (\S+)", page.read_text(), flags=re.M)}


def test_public_names_are_one_sorted_list_each_documented():
    """``wds_core.__all__`` is the one list of native names (issue 59: it was copied here): sorted, each name
    there, and each defined in a module the API reference documents."""
    assert wds_core.__all__ == sorted(wds_core.__all__) and len(set(wds_core.__all__)) == len(wds_core.__all__)
    assert all(hasattr(wds_core, name) for name in wds_core.__all__)
    documented = api_modules()
    homes = {
        getattr(wds_core, name).__module__
        for name in wds_core.__all__
        if hasattr(getattr(wds_core, name), "__module__")
    }
    assert sorted(homes - documented - {"wds_core"}) == []


def test_expert_names_live_in_namespaces_and_stay_importable_from_the_top():
    for name, namespace in wds_core.EXPERT_NAMES.items():
        module = importlib.import_module(f"wds_core.{namespace}")
        assert name in getattr(module, "__all__", [name]) and name not in wds_core.__all__
        assert getattr(wds_core, name) is getattr(module, name)  # the old path still works
        for adapter in ("wds_jax", "wds_tf"):  # (wds_torch in tests/torch)
            assert getattr(importlib.import_module(adapter), name) is getattr(module, name)
    for namespace in ("wds_core.io", "wds_core.tar"):
        module = importlib.import_module(namespace)
        assert module.__all__ == sorted(module.__all__)


@pytest.mark.slow
def test_importing_the_core_changes_no_import_machinery():
    """``import wds_core`` installs no import hooks of its own (only ``install_as_webdataset()`` does, when called)."""
    code = (
        "import sys\n"
        "hooks = (list(sys.meta_path), list(sys.path_hooks))\n"
        "import wds_core, wds_core.dropin\n"
        "print(hooks == (list(sys.meta_path), list(sys.path_hooks)), 'webdataset' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_refused_webdataset_stubs_stay_in_the_drop_in():
    """Names wds does not provide are importable from the drop-in (scripts import more than they use), never
    exported by the native API."""
    from wds_core import dropin

    assert "LMDBCached" in dropin.__all__ and not hasattr(wds_core, "LMDBCached")
    with pytest.raises(NotImplementedError, match="LMDBCached is not provided"):
        dropin.LMDBCached("cache.lmdb")
    with pytest.raises(AttributeError):
        wds_core.no_such_module  # noqa: B018


@pytest.mark.slow
def test_demo_main_job_runs():
    out = subprocess.run(
        ["wds", "demo", "--shards", "3", "--samples-per-shard", "200"], capture_output=True, text=True, check=True
    )
    assert "exactly once" in out.stdout and "samples/s" in out.stdout


@pytest.mark.slow
def test_the_core_is_native_and_gives_webdatasets_spellings_from_the_dropin_when_asked():
    """Issue 46: 37 of wds_core.__all__'s names came from the drop-in, which ``import wds_core`` loaded.  Now
    ``__all__`` is native, importing the core loads no drop-in module, and webdataset's spellings are still
    importable from it (DESIGN: "the same names ... are importable from wds_core"), from the drop-in, where
    each is defined once."""
    code = (
        "import sys, wds_core\n"
        "print(any(m.startswith('wds_core.dropin') for m in sys.modules))\n"
        "from wds_core import shuffle, to_tuple\n"
        "import wds_core.dropin as d\n"
        "print(shuffle is d.shuffle and to_tuple is d.to_tuple and wds_core.gopen is d.gopen)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    assert not set(wds_core.__all__) & wds_core.WEBDATASET_NAMES and len(wds_core.WEBDATASET_NAMES) == 36
    from wds_core.spellings import TOP_LEVEL_NAMES

    dropin = importlib.import_module("wds_core.dropin")
    assert dropin.__all__[: len(TOP_LEVEL_NAMES)] == list(TOP_LEVEL_NAMES)  # one list: the drop-in's starts with it
    assert wds_core.WEBDATASET_NAMES <= set(dropin.__all__)  # the core's list names the drop-in's names
    for adapter in ("wds_jax", "wds_tf"):
        module = importlib.import_module(adapter)
        assert module.shuffle is dropin.shuffle and module.Cached is dropin.Cached
    with pytest.raises(AttributeError, match="no attribute 'shufle'"):
        wds_core.shufle  # noqa: B018
