"""Shared fixtures: shards written in several ways, in a temporary directory."""

from __future__ import annotations

import io
import os
import tarfile
import threading

import pytest
from hypothesis import HealthCheck, settings

import wds_core
from wds_core.tar.tarwrite import encode_member, end_of_archive

# Cloud clients in the tests talk to the servers of tests/servers.py only: dummy
# credentials, no instance-metadata lookups, gcsfs without its gRPC probe.
for _name, _value in {
    "AWS_ACCESS_KEY_ID": "dummy-key-from-environment",
    "AWS_SECRET_ACCESS_KEY": "dummy-secret-from-environment",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
    "NO_GCE_CHECK": "true",
}.items():
    os.environ[_name] = _value
for _name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "WDS_CONFIG", "WDS_REWRITE", "GOPEN_REWRITE"):
    os.environ.pop(_name, None)


# Property tests draw FUZZ_EXAMPLES cases each, one setting for all of them: 60 by default, drawn the same way
# every run so a failure repeats; WDS_FUZZ_EXAMPLES=5000 is the long campaign, drawn afresh each run.
FUZZ_EXAMPLES = int(os.environ.get("WDS_FUZZ_EXAMPLES", "60"))
settings.register_profile(
    "wds",
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=FUZZ_EXAMPLES <= 60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("wds")


# scripts that the loader tests run in subprocesses (on webdataset and on wds), not test modules
collect_ignore = ["torch/loaders"]


# ---------------------------------------------------------------- shared memory outlives nothing (issue 21)


def _shm_slots() -> set[str]:
    from wds_core.loader.shm import SHM_FOLDER

    try:
        return {name for name in os.listdir(SHM_FOLDER) if name.startswith("wds_")}
    except OSError:
        return set()


class _SlotWatch(threading.Thread):
    """Notes which new slots belong to this session: made by it or by a process descending from it.

    A slot's name gives the pid that made it (``wds_<pid>_...``); whether that process descends from this
    session can only be asked while it runs, so new names are looked at every few hundredths of a second.
    Slots of other wds programs on the machine (one killed during the run, say) are not this session's.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True, name="wds-test-slot-watch")
        self.seen: set[str] = set()
        self.ours: set[str] = set()
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.02):
            self.scan()

    def scan(self) -> None:
        from wds_core.loader.shm import slot_owner

        for name in _shm_slots() - self.seen:
            self.seen.add(name)
            owner = slot_owner(name)
            if owner is not None and _descends_from(owner, os.getpid()):
                self.ours.add(name)


def _descends_from(pid: int, root: int) -> bool:
    for _ in range(64):
        if pid == root:
            return True
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
        if pid <= 1:
            return False
    return False


# ---------------------------------------------------------------- the two tiers (docs/guides/testing.md)

# The fast tier is `-m "not slow"`: the README's test command. A test is marked slow when it takes a second or
# more on the 2-core machine by its nature: worker processes, gloo ranks, subprocesses, servers that trickle,
# hang or drop, inflation bombs, scale. The slow tier, `-m "slow or frameworks"`, is the rest of what CI runs once
# the ci extra (torch, torchdata, JAX, TensorFlow, the docs tools) is installed: the tests under these folders and
# files need it (without it they skip themselves), and are marked `frameworks` here.
FRAMEWORK_TESTS = {"torch", "jax", "tf", "test_docs.py", "test_doc_examples.py", "test_examples.py"}
SLOW_AFTER = 2.0  # seconds (noise allowed for): a fast-tier test that takes longer is listed at the end of the run
# (when WDS_REPORT_SLOW is set, as CI sets it: the list is for those who keep the fast tier fast)


def pytest_collection_modifyitems(config, items):
    tests = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        relative = os.path.relpath(str(item.path), tests).split(os.sep)
        if relative[0] in FRAMEWORK_TESTS:
            item.add_marker(pytest.mark.frameworks)


def pytest_runtest_logreport(report):
    fast_tier = "slow" not in report.keywords and "frameworks" not in report.keywords
    if report.when == "call" and report.duration > SLOW_AFTER and fast_tier:
        _SLOW_IN_FAST_TIER.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter):
    if _SLOW_IN_FAST_TIER and os.environ.get("WDS_REPORT_SLOW"):  # for maintainers: CI sets it (.ci/run)
        terminalreporter.section(f"fast-tier tests that took over {SLOW_AFTER:.0f} s", sep="-")
        for duration, nodeid in sorted(_SLOW_IN_FAST_TIER, reverse=True)[:20]:
            terminalreporter.write_line(f"{duration:6.2f} s  {nodeid}")
        terminalreporter.write_line("the fast tier is the README's command: mark them slow or make them cheaper")


_SLOW_IN_FAST_TIER: list[tuple[float, str]] = []


def pytest_sessionstart(session):
    session.config.stash[_SHM_BEFORE] = _shm_slots()
    watch = session.config.stash[_SHM_WATCH] = _SlotWatch()
    watch.seen |= session.config.stash[_SHM_BEFORE]
    watch.start()


def pytest_sessionfinish(session, exitstatus):
    """Fail the run when a slot this session made (it or its children) belongs to a process that is gone:
    nothing would ever free it.

    (Slots of this process and its live workers are freed at exit; ``.ci/run`` checks ``/dev/shm`` after.)
    """
    import gc

    from wds_core.dist import process_running
    from wds_core.loader.shm import slot_owner

    before = session.config.stash.get(_SHM_BEFORE, None)
    watch = session.config.stash.get(_SHM_WATCH, None)
    if before is None or watch is None:
        return
    gc.collect()
    watch.halt.set()
    watch.join()
    watch.scan()
    new = _shm_slots() - before
    owners = {name: slot_owner(name) for name in new if name in watch.ours or slot_owner(name) == os.getpid()}
    orphans = sorted(name for name, pid in owners.items() if pid is not None and not process_running(pid))
    if orphans:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"shared memory left by processes of this session that are gone: {orphans}"
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_SHM_BEFORE = pytest.StashKey[set]()
_SHM_WATCH = pytest.StashKey[_SlotWatch]()


def write_shard(path, samples, fields=("txt", "cls")):
    """Write samples ``{"__key__": k, field: bytes}`` with the project's encoder."""
    with open(path, "wb") as out:
        for sample in samples:
            for field, value in sample.items():
                if field.startswith("__"):
                    continue
                out.write(encode_member(f"{sample['__key__']}.{field}", value))
        out.write(end_of_archive())
    return str(path)


def tar_bytes(members, fmt=tarfile.PAX_FORMAT, compress=""):
    """A tar built by the standard library from ``[(name, bytes), ...]``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w" + (":" + compress if compress else ""), format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def npy_bytes(array):
    """``array`` as the bytes of a ``.npy`` file."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def counted_shards(directory, counts, stem="u"):
    """Shards ``stem-0.tar ...`` holding ``counts[i]`` samples each: ``(brace spec, keys in order)``."""
    keys = []
    for s, n in enumerate(counts):
        samples = make_samples(f"s{s}-", n)
        keys += [x["__key__"] for x in samples]
        write_shard(directory / f"{stem}-{s}.tar", samples)
    return str(directory / f"{stem}-{{0..{len(counts) - 1}}}.tar"), keys


def array_shards(root, prefix, nshards, per_shard, shape, classes):
    """Shards of samples with a float32 ``npy`` array filled with ``shard * 100 + index`` and a ``cls``."""
    import numpy as np

    for s in range(nshards):
        samples = make_samples(f"s{s}-", per_shard, fields=())
        for i, sample in enumerate(samples):
            sample["npy"] = npy_bytes(np.full(shape, s * 100 + i, dtype=np.float32))
            sample["cls"] = b"%d" % (i % classes)
        write_shard(root / f"{prefix}-{s}.tar", samples, ("npy", "cls"))
    return str(root / f"{prefix}-{{0..{nshards - 1}}}.tar")


def make_samples(prefix, n, fields=("txt", "cls")):
    return [{"__key__": f"{prefix}{i:05d}", **{f: f"{prefix}-{i}-{f}".encode() for f in fields}} for i in range(n)]


@pytest.fixture
def shards(tmp_path):
    """Four shards of 25 samples each; returns (brace spec, list of paths, all keys)."""
    paths, keys = [], []
    for s in range(4):
        samples = make_samples(f"s{s}-", 25)
        keys += [x["__key__"] for x in samples]
        paths.append(write_shard(tmp_path / f"shard-{s:02d}.tar", samples))
    return str(tmp_path / "shard-{00..03}.tar"), paths, keys


@pytest.fixture(autouse=True)
def _clean_storage_registry(tmp_path_factory, monkeypatch):
    """Every test starts with no registered storage options, rewrites or scheme openers, and no config file; and
    with the process's rate-limit throttle fresh (a test that met a store's limit leaves it slowed down)."""
    from wds_core.io.remote.throttle import THROTTLE

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))
    THROTTLE.__init__(THROTTLE.most)  # type: ignore[misc]
    yield
    wds_core.unregister_storage()
    wds_core.unregister_rewrite()
    for scheme in list(wds_core.io.storage.OPENERS):
        wds_core.register_opener(scheme, None)


@pytest.fixture(scope="session")
def s3_servers():
    """Two S3 endpoints: bucket ``team-a`` (access key AKIDTEAMA) and ``team-b`` (AKIDTEAMB)."""
    pytest.importorskip("s3fs")
    from tests.servers import S3Server

    servers = {"team-a": S3Server({"team-a": "AKIDTEAMA"}), "team-b": S3Server({"team-b": "AKIDTEAMB"})}
    for server in servers.values():
        server.create_buckets()
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def s3(s3_servers):
    for server in s3_servers.values():
        server.faults.clear()
        server.write_faults.clear()
    yield s3_servers
    for server in s3_servers.values():
        server.faults.clear()
        server.write_faults.clear()


@pytest.fixture(scope="session")
def gcs_server():
    pytest.importorskip("gcsfs")
    from tests.servers import GcsServer

    server = GcsServer("gbucket")
    yield server
    server.stop()


@pytest.fixture
def http_server(tmp_path):
    """An HTTP server with Range support over a fresh directory (``server.root``)."""
    from tests.servers import HttpServer

    server = HttpServer(str(tmp_path / "www"))
    os.makedirs(server.root)
    yield server
    server.stop()
