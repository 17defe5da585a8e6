"""Every module-level name of webdataset 0.2.31, 0.2.86 and 1.0.2 (issue 68): the drop-in's module of the same name
has it, or reading it is an error that says why it is not provided; the same for the modules themselves.

The names are read from those versions' sources by ``webdataset_names.py`` (beside this file) into
``webdataset_names.json``: regenerate it to follow another version.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wds_core import dropin

NAMES = json.loads((Path(__file__).parent / "webdataset_names.json").read_text())


def _modules(version: str):
    return sorted(NAMES[version].items())


@pytest.mark.parametrize("version", sorted(NAMES))
def test_every_name_of_webdataset_is_there_or_refused_saying_why(version):
    lacking, refused = [], 0
    for module, names in _modules(version):
        if module == "__init__":
            held = sys.modules["wds_core.dropin"]
        elif module in dropin.MODULES:
            held = dropin.MODULES[module]
        else:
            assert module in dropin.LEFT_OUT_MODULES, (
                f"webdataset {version}'s module {module} is neither here nor refused"
            )
            continue
        for name in names:
            try:
                getattr(held, name)
            except AttributeError as exn:
                if "is not provided by wds:" not in str(exn):
                    lacking.append(f"{module}.{name}")
                refused += 1
    assert lacking == [], f"webdataset {version}'s names the drop-in lacks, saying nothing: {lacking}"
    assert refused < 40  # the refusals stay few: internals (tenbin's, MultiLoader's, 0.2's cache and CBOR pieces)


def test_the_names_were_read_from_the_three_versions():
    assert sorted(NAMES) == ["0.2.31", "0.2.86", "1.0.2"]
    assert "Pipe" in NAMES["0.2.31"]["gopen"] and "info" in NAMES["1.0.2"]["gopen"]
    assert "gopen" in NAMES["0.2.31"]["writer"] and "bench" in NAMES["0.2.31"]


def test_a_left_out_module_says_why_through_the_switch():
    code = (
        "from wds_core import dropin; dropin.install(dropin.top_level(dropin.MODULES), dropin.MODULES, 'wds_core', "
        "False)\ntry:\n    import webdataset.bench\nexcept ModuleNotFoundError as exn:\n    print(exn)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "No module named 'webdataset.bench'" in out.stdout and "`wds bench` measures reading" in out.stdout, out
