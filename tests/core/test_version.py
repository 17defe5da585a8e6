"""wds_core.version: one version, pyproject.toml's, the same wherever it is read."""

import re
from importlib import metadata
from pathlib import Path

import pytest

import wds_core
from wds_core.version import __version__


def test_the_package_says_its_version():
    assert wds_core.__version__ == __version__ and __version__.count(".") == 2


@pytest.mark.repository
def test_it_is_pyproject_s():
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    declared = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M)  # [project]'s (tomllib: 3.11+)
    assert declared is not None and declared.group(1) == __version__


def test_the_installed_metadata_agrees():
    assert metadata.version("wds") == __version__
