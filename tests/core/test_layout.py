"""The tests mirror the modules (issue 47): ``wds_core/<package>/<module>.py`` is tested in
``tests/core/<package>/test_<module>.py``; the few suites that cut across modules say so here.

Two lists hold what does not follow the rule, and both only shrink: a module added without its test file, or a
test file that is neither a module's nor a listed suite, fails here.
"""

from pathlib import Path

import pytest

pytestmark = pytest.mark.repository  # the sources in this checkout, not an installed wheel

ROOT = Path(__file__).resolve().parents[2]

#: Test files that cut across modules, each named for what it checks.
SUITES = {
    "test_architecture": "the import graph and private names",
    "test_checkpoint": "the resume oracle over every stateful stage",
    "test_epoch_model": "every way of forming an epoch (modes, ranks, workers, resume) against one model of it",
    "test_contracts": "the iterators' declared contracts elastic resume relies on",
    "test_fuzz": "random and mutated bytes through every decoder and reader",
    "test_hostile": "crafted shards, bombs and lying headers in child processes",
    "test_reader_limits": "every reader held to the decode limits",
    "test_scale": "many shards from a store that counts requests",
    "test_soak": "many epochs: nothing grows",
    "test_zero_copy": "zero_copy=True through every reader",
    "test_layout": "this file",
    "dropin/test_codecs": "webdataset's autodecode and writer over wds's codecs",
    "dropin/test_install": "install_as_webdataset in a fresh interpreter",
    "dropin/test_names": "every module-level name of webdataset 0.2.31, 0.2.86 and 1.0.2: there, or refused saying why",
    "dropin/test_subclassing": "training code that subclasses webdataset's classes",
    "dropin/test_webdataset_behaviour": "what webdataset's own suite pins down",
    "fieldcodecs/test_jpeg_region": "the compiled region decoder against whole decodes",
    "io/test_outage": "outages end to end against the local S3 server",
}

#: Modules without a test file of their own yet: their behaviour is tested through their package's files and the
#: suites above (coverage: ``coverage run -m pytest -m "not slow"``).  A module leaves the list when it gets its
#: file; nothing joins it.
UNMIRRORED = {
    "cli/common", "cli/demo", "cli/index", "cli/inspect_shards", "cli/profile", "cli/progress", "cli/reshape",
    "dropin/_refuse", "dropin/autodecode",
    "dropin/cborsiterators", "dropin/compat", "dropin/extradatasets", "dropin/handlers", "dropin/mix", "dropin/multi",
    "dropin/pipeline", "dropin/pytorch", "dropin/widsdecode", "dropin/widssamplers", "dropin/widsshards",
    "dropin/writer", "fieldcodecs/bounded", "indexed/samplers",
    "io/shardsink", "loader/shm", "loader/worker", "observe/starvation",
    "reexport", "sources/counts", "sources/descriptor", "sources/dirshards",
    "sources/readoptions", "stages/memorycache", "stages/fieldkeys",
    "stages/tracing", "stages/xdecode", "tar/resume",
    "tools/jobs",
}  # fmt: skip


def modules() -> tuple[set[str], set[str]]:
    """The core's modules and its packages, as paths under ``wds_core/`` without ``.py``."""
    found, packages = set(), set()
    for path in (ROOT / "wds_core").rglob("*.py"):
        rel = path.relative_to(ROOT / "wds_core").with_suffix("")
        if rel.name == "__init__":
            if rel.parent != Path("."):
                packages.add(rel.parent.as_posix())
        else:
            found.add(rel.as_posix())
    return found, packages


def mirror(module: str) -> str:
    """``io/retries`` -> ``io/test_retries``; a leading underscore is dropped (``_native`` -> ``test_native``)."""
    folder, _, name = module.rpartition("/")
    return f"{folder}/test_{name.lstrip('_')}".lstrip("/")


def existing_tests() -> set[str]:
    return {path.relative_to(ROOT / "tests" / "core").with_suffix("").as_posix()
            for path in (ROOT / "tests" / "core").rglob("test_*.py")}  # fmt: skip


def test_every_module_has_its_test_file():
    found, _ = modules()
    tests = existing_tests()
    missing = {module for module in found if mirror(module) not in tests}
    assert not missing - UNMIRRORED, f"write tests/core/<package>/test_<module>.py for {sorted(missing - UNMIRRORED)}"
    assert not UNMIRRORED - missing, (
        f"these have their test file now; take them off UNMIRRORED: {sorted(UNMIRRORED - missing)}"
    )


def test_every_test_file_is_a_module_s_a_package_s_or_a_suite():
    found, packages = modules()
    mirrors = {mirror(name) for name in found | packages}
    strays = sorted(name for name in existing_tests() if name not in mirrors and name not in SUITES)
    assert not strays, f"name these after the module they test, or list them in SUITES with what they check: {strays}"


def test_the_mirror_of_a_name():
    assert mirror("io/retries") == "io/test_retries"
    assert mirror("_native") == "test_native"
    assert mirror("state") == "test_state"
