"""``wds_core.install_as_webdataset()``: framework-free, `import webdataset` gives wds_core, and undoing it."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter

CODE = """
import sys
import wds_core
wds_core.install_as_webdataset()
import webdataset as wds
from webdataset.filters import _shuffle
from webdataset.tariterators import url_opener, tar_file_expander
from webdataset.shardlists import expand_urls
from webdataset.utils import pytorch_worker_seed
print(wds.__wds__, wds.__version__, issubclass(wds.WebDataset, wds_core.WebDataset), wds.gopen is wds_core.gopen)
print(sorted(m for m in ("torch", "jax", "tensorflow") if m in sys.modules))
try:
    wds.WebLoader([])
except NotImplementedError as exn:
    print("WebLoader:", exn)
wds_core.dropin.uninstall()
import webdataset
print("after:", getattr(webdataset, "__wds__", "real"))
"""


def test_core_install_needs_no_framework():
    pytest.importorskip("webdataset")
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "wds_core 1.0.2 True True"
    assert lines[1] == "[]"
    assert lines[2].startswith("WebLoader: webdataset's compat.WebLoader is not provided by wds")
    assert "wds_core.Loader" in lines[2]
    assert lines[3] == "after: real"
    assert "wds: import webdataset -> wds_core" in out.stderr
