"""wids's own test suite, run on wids 0.1.11 and on wds's wids through the switch (issue 44).

    python benchmarks/wids_suite.py [--version 0.1.11] [--work DIR] [-k EXPR]

Downloads wids's source distribution from PyPI (its ``tests/`` folder), writes the ``testdata/``
shards its tests read (the distribution leaves them out) and runs the tests twice in child
processes: on the installed wids, and with ``wds_torch.install_as_webdataset()`` (which makes
``import wids`` give wds's) called before any test imports wids.  Prints the counts of both runs
and every test whose outcome differs.  Needs PyTorch (wids imports it) and the test extra.

The shards are made here from what the tests check, not copied from webdataset's repository:
``mpdata.tar`` (100 samples ``000000``... with an ``.mp`` field), ``tendata.tar`` (100 ``.ten``
samples), ``compressed.tar`` (3 samples ``compressed/0001``... with ``.txt.gz``), ``testgz.tar``
(1,000 samples with ``.txt.gz``, the first ``", or more info on the item."``) and ``ixtest.tar``
(10 samples with ``.cls`` and ``.jpg``; its test checks an MD5 sum of the original file, which no
file made here has, so that test fails on both sides).
"""

from __future__ import annotations

import argparse
import gzip
import os
import tarfile
import tempfile

import msgpack
from webdataset_suite import _add, _png, print_results, run, write_testdata

CONFTEST = '''"""Written by wds's benchmarks/wids_suite.py."""
import os

if os.environ.get("WDS_SUITE_SWITCH") == "1":
    import wds_torch

    wds_torch.install_as_webdataset(verbose=False)


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: a quick test")
'''


def write_wids_testdata(folder: str) -> None:
    write_testdata(folder)  # tendata.tar among them
    with tarfile.open(os.path.join(folder, "mpdata.tar"), "w") as tar:
        for i in range(100):
            _add(tar, f"{i:06d}.mp", msgpack.packb({"index": i, "values": list(range(i % 7))}))
    with tarfile.open(os.path.join(folder, "compressed.tar"), "w") as tar:
        for i in range(1, 4):
            _add(tar, f"compressed/{i:04d}.txt.gz", gzip.compress(f"text {i}\n".encode(), mtime=0))
    with tarfile.open(os.path.join(folder, "testgz.tar"), "w") as tar:
        for i in range(1000):
            text = ", or more info on the item." if i == 0 else f"item {i}"
            _add(tar, f"{i:06d}.txt.gz", gzip.compress(text.encode(), mtime=0))
    with tarfile.open(os.path.join(folder, "ixtest.tar"), "w") as tar:
        for i in range(10):
            _add(tar, f"{i:06d}.cls", str(i % 3).encode())
            _add(tar, f"{i:06d}.jpg", _png(16, 12, i))


def main() -> None:
    from webdataset_suite import fetch_tests

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="0.1.11")
    parser.add_argument("--work", help="folder to work in (default: a new temporary one)")
    parser.add_argument("-k", dest="select", help="pytest -k expression")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="wds-wids-suite-")
    folder = fetch_tests(args.version, work, package="wids")
    with open(os.path.join(folder, "tests", "conftest.py"), "w") as out:
        out.write(CONFTEST)
    write_wids_testdata(os.path.join(folder, "testdata"))
    extra = ["-k", args.select] if args.select else []
    results = {name: run(folder, switch, extra) for name, switch in {"wids": False, "wds": True}.items()}
    print_results(results, folder, "tests")


if __name__ == "__main__":
    main()
