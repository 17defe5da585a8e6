"""``wds doctor``: what an installation runs with, for a bug report (issue 47)."""

import json
import os
import subprocess
import sys

import wds_core
from wds_core._native import native_status
from wds_core.cli import doctor
from wds_core.cli.main import main


def test_the_report_says_which_helpers_are_built_and_used_and_what_decodes_jpegs(monkeypatch):
    found = doctor.report()
    assert found["native"] == native_status() and set(found["native"]) >= {"tarscan", "groupfast", "jpegregion"}
    assert found["jpeg"]["decoder"] in ("simplejpeg", "pillow") and found["jpeg"]["pillow"]["version"]
    assert found["storage"]["fsspec"] and found["wds"] == wds_core.__version__
    assert set(found["frameworks"]) >= {"torch", "jax", "tensorflow"}
    monkeypatch.setenv("WDS_IO_BUDGET", "1")  # read when the process starts: the report gives the engine's
    assert doctor.report()["io_budget_bytes"] == found["io_budget_bytes"]


def test_pure_python_turns_every_helper_off_and_the_report_says_so():
    code = "import json; from wds_core.cli.doctor import report; print(json.dumps(report()))"
    env = {**os.environ, "WDS_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    found = json.loads(out.stdout)
    assert found["pure_python"] and not any(state["used"] for state in found["native"].values())
    assert found["jpeg"]["region_crops"] is False


def test_the_command_prints_a_table_or_json(capsys):
    assert main(["doctor"]) == 0
    text = capsys.readouterr().out
    assert "compiled helpers" in text and "JPEG fields:" in text and "remote engine budget" in text
    assert main(["doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["native"] == native_status()
