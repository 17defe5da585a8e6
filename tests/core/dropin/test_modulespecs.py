"""The switch's modules have specs (issue 57): ``importlib.util.find_spec("webdataset")`` raised ``ValueError:
webdataset.__spec__ is None`` after the switch (also for its submodules and wids), so code that checks whether a
package is there before importing it failed before reading a sample.  Each module the switch provides is checked
with ``find_spec``, ``import_module``, ``reload``, ``pkgutil.iter_modules`` and ``inspect.getfile``, in the main
process and in DataLoader workers, spawned and forked."""

import subprocess
import sys
import textwrap

import pytest

CHECK = textwrap.dedent(
    """
    import importlib, importlib.util, inspect, os, pkgutil, sys

    def check_all():
        import webdataset, wids
        names = ["webdataset", *sorted(n for n in sys.modules if n.startswith("webdataset.")),
                 "wids", *sorted(n for n in sys.modules if n.startswith("wids."))]
        seen = []
        for name in names:
            spec = importlib.util.find_spec(name)
            module = importlib.import_module(name)
            assert spec is module.__spec__ and spec.name == name, (name, spec)
            assert spec.loader is not None and spec.origin and os.path.exists(inspect.getfile(module)), name
            assert spec.parent == (name if spec.submodule_search_locations is not None else name.rpartition(".")[0])
            assert importlib.reload(module) is module and module.__spec__ is spec, name
            seen.append(name)
        listed = {m.name for m in pkgutil.iter_modules(webdataset.__path__)}
        assert {"tariterators", "filters", "gopen", "autodecode", "shardlists"} <= listed, listed
        assert {m.name for m in pkgutil.iter_modules(wids.__path__)} == {"wids", "wids_decode", "wids_specs"}
        assert webdataset.__wds__ and webdataset.WebDataset and wids.ShardListDataset
        return len(seen)
    """
)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flavour", ["wds_core", pytest.param("wds_torch", marks=pytest.mark.slow)])
def test_every_module_of_the_switch_has_a_spec_in_the_main_process(flavour):
    if flavour == "wds_torch":
        pytest.importorskip("torch")
    code = CHECK + textwrap.dedent(
        f"""
        import {flavour}
        assert importlib.util.find_spec("webdataset") is None or True  # before: the real one, or none
        hooks = (list(sys.meta_path), list(sys.path_hooks))
        {flavour}.install_as_webdataset(verbose=False)
        print(check_all())
        import webdataset
        importlib.reload(webdataset)  # a reload is the switch's module, never the real package on sys.path
        print(webdataset.__wds__, importlib.util.find_spec("webdataset.tariterators").name)
        import wds_core.dropin
        wds_core.dropin.uninstall()
        assert hooks == (list(sys.meta_path), list(sys.path_hooks))  # undone: the import machinery as it was
        """
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    count, after = out.stdout.splitlines()
    assert int(count) >= 20 and after == f"{flavour} webdataset.tariterators"


@pytest.mark.slow
@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_every_module_of_the_switch_has_a_spec_in_dataloader_workers(context, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "checks.py").write_text(CHECK)
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import torch
        import wds_torch
        wds_torch.install_as_webdataset(verbose=False)
        import checks

        class Probe(torch.utils.data.IterableDataset):
            def __iter__(self):
                yield checks.check_all()

        if __name__ == "__main__":
            print(checks.check_all())
            loader = torch.utils.data.DataLoader(Probe(), num_workers=2, batch_size=None,
                                                 multiprocessing_context={context!r})
            print(sorted(int(n) for n in loader))
        """
    )
    script = tmp_path / "probe.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, "-m", "wds_torch.run", "--quiet", str(script)], capture_output=True,
                         text=True, timeout=300, cwd=str(tmp_path))  # fmt: skip
    assert out.returncode == 0, out.stderr
    main, workers = out.stdout.splitlines()
    assert int(main) >= 20 and workers == f"[{main}, {main}]"
