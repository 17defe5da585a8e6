"""webdataset's and wids's own test suites, each run on the real package and on wds through the switch.

Sections (``--rows``, both by default):

* ``webdataset`` (issue 29): downloads webdataset's source distribution from PyPI (its ``tests/`` folder), writes
  what the distribution leaves out -- the ``tests/conftest.py`` the tests import their names from and the
  ``testdata/`` shards they read -- and runs the offline tests twice in child processes: on the installed
  webdataset, and with ``wds_torch.install_as_webdataset()`` called before any test module imports
  ``webdataset``.  Tests that reach the internet (their source names webdataset's remote test buckets) are left
  out of both runs.  The test data are made here from the facts the tests check (47 samples with
  ``png``/``cls``/``wnid``/``xml``, the first image 600x793; a ``txt.gz`` field holding ``hello\\n``; 100 ``.ten``
  samples of two 28x28 float64 arrays), not copied from webdataset's repository.
* ``wids`` (issue 44): the same for wids's tests, on the installed wids and on wds's wids through the switch
  (``import wids`` gives wds's); its shards made here from what the tests check: ``mpdata.tar`` (100 samples with
  an ``.mp`` field), ``tendata.tar``, ``compressed.tar`` (3 samples ``compressed/0001``... with ``.txt.gz``),
  ``testgz.tar`` (1,000 samples with ``.txt.gz``, the first ``", or more info on the item."``) and
  ``ixtest.tar`` (10 samples with ``.cls`` and ``.jpg``; its test checks an MD5 sum of the original file, which no
  file made here has, so that test fails on both sides).

Each prints the counts of both runs and every test whose outcome differs.  Needs the test extra, PyTorch and
``imageio`` (webdataset's decoding tests import it): ``pip install -e ".[ci]" -c constraints.txt imageio``.

    python benchmarks/bench_suites.py [--rows webdataset,wids] [--webdataset-version 1.0.2]
        [--wids-version 0.1.11] [--work DIR] [--only webdataset|wds] [-k EXPR]
"""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET

import harness
import msgpack
import numpy as np

CONFTEST = '''"""Written by wds's benchmarks/bench_suites.py: the names webdataset's tests import from here."""
import inspect
import os

if os.environ.get("WDS_SUITE_SWITCH") == "1":
    import wds_torch

    wds_torch.install_as_webdataset(verbose=False)

ONLINE = ("remote_loc", "remote_sample", "remote_shard", "storage.googleapis.com", "gs://", "s3://")


def pytest_configure(config):
    config.addinivalue_line("markers", "quick: a quick test")
    config.addinivalue_line("markers", "notorch: a test without torch")


def pytest_collection_modifyitems(config, items):
    offline = []
    for item in items:
        function = getattr(item, "function", None)
        source = inspect.getsource(function) if function is not None else ""
        if not any(word in source for word in ONLINE):
            offline.append(item)
    items[:] = offline


def count_samples_tuple(source, *args, n=10000):
    count = 0
    for i, sample in enumerate(iter(source)):
        if i >= n:
            break
        assert isinstance(sample, (tuple, dict, list)), (type(sample), sample)
        for check in args:
            assert check(sample)
        count += 1
    return count


local_data = "testdata/imagenet-000000.tgz"
compressed = "testdata/compressed.tar"
remote_loc = "http://127.0.0.1:9/webdataset/openimages/"
remote_shards = "openimages-train-0000{00..99}.tar"
remote_shard = "openimages-train-000321.tar"
remote_pattern = "openimages-train-{}.tar"
remote_sample = "http://127.0.0.1:9/webdataset/testdata/sample.tgz"
'''


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_700_000_000
    tar.addfile(info, io.BytesIO(data))


def _png(width: int, height: int, seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _annotation(key: str, wnid: str) -> bytes:
    root = ET.Element("annotation")
    ET.SubElement(root, "filename").text = key
    ET.SubElement(ET.SubElement(root, "object"), "name").text = wnid
    return ET.tostring(root)


def write_testdata(folder: str) -> None:
    """The three shards webdataset's offline tests read."""
    os.makedirs(folder, exist_ok=True)
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for i in range(47):
            key, label = f"n{1440764 + i % 5:08d}_{1000 + i}", i % 5
            wnid = f"n{1440764 + label:08d}"
            width, height = (600, 793) if i == 0 else (64 + i, 48 + i)
            _add(tar, f"{key}.cls", str(label).encode())
            _add(tar, f"{key}.png", _png(width, height, i))
            _add(tar, f"{key}.wnid", wnid.encode())
            _add(tar, f"{key}.xml", _annotation(key, wnid))
    with open(os.path.join(folder, "imagenet-000000.tgz"), "wb") as out:
        out.write(gzip.compress(raw.getvalue(), mtime=0))
    with tarfile.open(os.path.join(folder, "compressed.tar"), "w") as tar:
        _add(tar, "hello.txt.gz", gzip.compress(b"hello\n", mtime=0))
    from webdataset import tenbin  # the format's writer of record (the real webdataset is installed for this)

    rng = np.random.default_rng(0)
    with tarfile.open(os.path.join(folder, "tendata.tar"), "w") as tar:
        for i in range(100):
            _add(tar, f"{i:06d}.ten", tenbin.encode_buffer([rng.random((28, 28)), rng.random((28, 28))]))


def fetch_tests(version: str, work: str, package: str = "webdataset") -> str:
    """``package``'s source distribution unpacked under ``work``; returns its folder."""
    subprocess.run(
        [sys.executable, *"-m pip download -q --no-deps --no-binary :all: -d".split(), work, f"{package}=={version}"],
        check=True,
    )
    with tarfile.open(os.path.join(work, f"{package}-{version}.tar.gz")) as sdist:
        sdist.extractall(work, filter="data")
    return os.path.join(work, f"{package}-{version}")


def run(folder: str, switch: bool, extra: list[str]) -> dict[str, str]:
    """Outcome by test id of one pytest run (``passed``, ``failed``, ``skipped``...)."""
    report = os.path.join(folder, f"report-{int(switch)}.txt")
    env = dict(os.environ, WDS_SUITE_SWITCH="1" if switch else "0", PYTHONPATH=folder)
    flags = "-q -p no:cacheprovider -o addopts= -rA --tb=line --continue-on-collection-errors".split()
    command = [sys.executable, "-m", "pytest", "tests", "--rootdir", folder, *flags, *extra]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
    with open(report, "w") as out:
        out.write(done.stdout + done.stderr)
    outcomes = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL", "XPASS") and "::" in rest:
            outcomes[rest.split(" - ")[0].strip()] = word.lower()
    return outcomes


def webdataset(args) -> None:
    work = os.path.join(args.work, "webdataset") if args.work else tempfile.mkdtemp(prefix="wds-suite-")
    os.makedirs(work, exist_ok=True)
    folder = fetch_tests(args.webdataset_version, work)
    with open(os.path.join(folder, "tests", "conftest.py"), "w") as out:
        out.write(CONFTEST)
    write_testdata(os.path.join(folder, "testdata"))
    extra = ["-k", args.select] if args.select else []
    sides = {"webdataset": False, "wds": True}
    results = {name: run(folder, switch, extra) for name, switch in sides.items() if args.only in (None, name)}
    print_results(results, folder, "offline tests")


def print_results(results: dict[str, dict[str, str]], folder: str, what: str) -> None:
    """The counts of each side's outcomes, then every test whose outcome differs (the real package first)."""
    for name, outcomes in results.items():
        counts = {kind: sum(1 for v in outcomes.values() if v == kind) for kind in sorted(set(outcomes.values()))}
        print(f"{name:10s} {len(outcomes)} {what}: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    names = list(results)
    if len(names) == 2:
        real, ours = results[names[0]], results[names[1]]
        for test in sorted(set(real) | set(ours)):
            if real.get(test) != ours.get(test):
                print(f"  {test}: {names[0]} {real.get(test, '-')}, {names[1]} {ours.get(test, '-')}")
    print(f"reports: {folder}/report-0.txt ({names[0]}), report-1.txt ({names[-1]})")


WIDS_CONFTEST = '''"""Written by wds's benchmarks/bench_suites.py."""
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


def wids(args) -> None:
    work = os.path.join(args.work, "wids") if args.work else tempfile.mkdtemp(prefix="wds-wids-suite-")
    os.makedirs(work, exist_ok=True)
    folder = fetch_tests(args.wids_version, work, package="wids")
    with open(os.path.join(folder, "tests", "conftest.py"), "w") as out:
        out.write(WIDS_CONFTEST)
    write_wids_testdata(os.path.join(folder, "testdata"))
    extra = ["-k", args.select] if args.select else []
    results = {name: run(folder, switch, extra) for name, switch in {"wids": False, "wds": True}.items()}
    print_results(results, folder, "tests")


def options(parser):
    parser.add_argument("--webdataset-version", default="1.0.2")
    parser.add_argument("--wids-version", default="0.1.11")
    parser.add_argument("--work", help="folder to work in (default: a new temporary one)")
    parser.add_argument("--only", choices=["webdataset", "wds"], help="run one side only (webdataset)")
    parser.add_argument("-k", dest="select", help="pytest -k expression")


if __name__ == "__main__":
    harness.run(__doc__, {"webdataset": webdataset, "wids": wids}, options)
