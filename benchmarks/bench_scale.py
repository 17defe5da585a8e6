"""Scale: million-shard specs, balanced readers, shuffling across many shards, and soaks over many epochs.

Sections (``--rows``, all but ``plot`` by default), each one table of benchmarks/README.md:

* ``specs``: for ``s3://bucket/train-{0000000..N-1}.tar`` (``--sizes``; no object read), each measurement in a
  fresh process: building ``WebDataset(spec, shardshuffle=True, seed=1)`` (seconds, memory added, the pickle each
  DataLoader worker receives) for wds and webdataset 1.x (1M only), and reader 511 of 512's seconds and memory to
  its first shard URL, unshuffled and shuffled; with ``--simulate N``: balanced readers (``balanced="pad"``, 64
  ranks x 8 workers) over a fake object store that counts requests (tests/synthstore.py), requests and seconds to
  the first sample with each kind of ``sample_counts=`` and without, their checkpoint sizes, ``merge_states`` of
  512, and ``wds index create`` over 2,000 local shards on one process and two; ``--index N``: that many local
  shards indexed by one process, two independent processes, a 2-process pool and a 2-worker Dask cluster;
* ``plot``: start-up, requests and memory against the number of shards, measured (a balanced reader's seconds and
  requests to its first sample with a descriptor or the counts file; memory of a shuffled list), fitted with lines
  and drawn out to 10M as ``--out`` (``docs/images/scale.svg``; no plotting library);
* ``shuffle``: how well an epoch is shuffled at a given memory: 200 shards of 100 samples stored in order, one epoch
  of each shuffle measured by ``wds_core.observe.shufflestats`` against a global shuffle (distinct shards in a
  batch of 256, displacement), about 1,000 samples held: webdataset 1.0.2 ``shardshuffle=True, shuffle(1000)``;
  wds the same and ``interleave=K, shuffle(1000 - K)``; mosaic-streaming's algorithms over MDS shards of the
  same samples (when installed); the same split between 2 DataLoader workers; and the shards within 1,000
  consecutive samples (what a reader must hold open);
* ``shuffle-speed``: raw reads of 200 shards of 100 samples of 60 KB with ``shuffle(1000)`` and with
  ``interleave=200, shuffle(800)``: local, and over HTTP and S3 from a server shaped like an object store
  (``--latency`` ms, ``--bandwidth`` MB/s a connection), with the reading process's peak memory;
* ``soak``: many tiny epochs with persistent workers, a shard cache under LRU pressure (every epoch evicts) and a
  checkpoint and restore every 10 epochs, through the core ``Loader`` and a ``DataLoader`` (``--loaders``): this
  process's descriptors, children, ``/dev/shm`` entries and memory after each epoch, and each one's slope; with
  ``--breaks``, remote reading from a shaped server with each epoch stopped halfway (the workers' memory, threads
  and descriptors).  tests/core/test_soak.py runs ``soak_run``/``soak_breaks`` in a process of its own.

    python benchmarks/bench_scale.py [--rows specs,shuffle,shuffle-speed,soak,plot] [--sizes 1000000 10000000]
        [--simulate 2000 100000] [--index 100000] [--rounds 3] [--out docs/images/scale.svg] [--seed 0]
        [--latency 40] [--bandwidth 40] [--epochs 200] [--loaders core torch] [--breaks] [--shards 16]
        [--shard-mb 16]

mosaic-streaming and webdataset are optional (``pip install mosaicml-streaming webdataset==1.0.2``): a row whose
system is missing says so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import harness
import numpy as np

import wds_core as wds
from wds_core.dist import set_worker_info_provider
from wds_core.observe.shufflestats import shuffle_quality, storage_order
from wds_core.tar.tarwrite import encode_member, end_of_archive

PROBE = r"""
import json, pickle, sys, time, warnings
warnings.simplefilter("ignore")

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6

what, library, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = "s3://bucket/train-{%s..%s}.tar" % ("0" * len(str(n - 1)), n - 1)
if library == "webdataset":
    import webdataset as wds
else:
    import wds_core as wds
before = rss()
start = time.perf_counter()
if what == "build":
    dataset = wds.WebDataset(spec, shardshuffle=True, seed=1)
    seconds = time.perf_counter() - start
    result = {"seconds": seconds, "mb": rss() - before, "pickle_kb": len(pickle.dumps(dataset)) / 1e3}
else:
    import os
    os.environ.update(RANK="63", WORLD_SIZE="64", WORKER="7", NUM_WORKERS="8")
    seed = 1 if what == "first-shuffled" else None
    pipeline = wds.DataPipeline(wds.SimpleShardList(spec, seed=seed), wds.split_by_node, wds.split_by_worker)
    first = next(iter(pipeline))["url"]
    result = {"seconds": time.perf_counter() - start, "mb": rss() - before, "first": first}
print(json.dumps(result))
"""


def probe(what, library, n):
    out = subprocess.run([sys.executable, "-c", PROBE, what, library, str(n)], capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def simulate(nshards, readers=(0, 137, 300, 511), without_up_to=2_000):
    """Requests and seconds to a balanced reader's first sample over ``nshards`` made-up shards."""
    harness.servers()  # tests/ on the path
    import wds_core
    from tests import synthstore
    from wds_core.sources import balanced

    store = synthstore.install(nshards)
    spec = f"synth://bucket/shard-{{000000..{nshards - 1:06d}}}.tar"
    print(f"\n{nshards:,} shards of {synthstore.SAMPLES} samples, 64 ranks x 8 workers\n")
    print("| reader | counts | requests to first sample | seconds |\n|---|---|---|---|")
    for reader in readers:
        rank, worker = divmod(reader, 8)
        os.environ.update(RANK=str(rank), WORLD_SIZE="64", WORKER=str(worker), NUM_WORKERS="8")
        variants = [("descriptor", "synth://bucket/dataset.json", False, False)]
        variants.append(("descriptor with filesizes", "synth://bucket/dataset.json", True, False))
        variants.append(("descriptor with filesizes, sidecars", "synth://bucket/dataset.json", True, True))
        variants.append(("counts file, sidecars", "synth://bucket/dataset.counts.npz", True, True))
        if nshards <= without_up_to:
            variants.append(("none (indexes)", None, False, False))
        for label, counts, filesizes, sidecars in variants:
            store.filesizes, store.sidecars = filesizes, sidecars
            balanced._INDEXES.clear()  # each reader is a process of its own
            store.requests.clear()
            start = time.perf_counter()
            dataset = wds_core.WebDataset.balanced(spec, seed=1, sample_counts=counts, how="pad", shuffle=True)
            next(iter(dataset))
            seconds = time.perf_counter() - start
            print(f"| {reader} | {label} | {sum(store.requests.values()):,} | {seconds:.2f} |")


def states(nshards, readers):
    """Checkpoint sizes of balanced readers after their first sample, and merging 512 of them."""
    harness.servers()  # tests/ on the path
    import wds_core
    from tests import synthstore
    from wds_core.sources import balanced

    synthstore.install(nshards, filesizes=True, sidecars=True)
    width = max(6, len(str(nshards - 1)))
    spec = f"synth://bucket/shard-{{{0:0{width}d}..{nshards - 1:0{width}d}}}.tar"
    taken = []
    for reader in readers:
        rank, worker = divmod(reader, 8)
        os.environ.update(RANK=str(rank), WORLD_SIZE="64", WORKER=str(worker), NUM_WORKERS="8")
        balanced._INDEXES.clear()
        counts = "synth://bucket/dataset.json" if nshards <= 100_000 else "synth://bucket/dataset.counts.npz"
        dataset = wds_core.WebDataset.balanced(spec, seed=1, sample_counts=counts, how="pad", shuffle=True)
        next(iter(dataset))
        taken.append(dataset.state_dict())
    sizes = [len(json.dumps(state)) for state in taken]
    line = f"| {nshards:,} | {len(taken)} | {min(sizes)}–{max(sizes)} |"
    if len(taken) == 512:
        start = time.perf_counter()
        merged = wds_core.merge_states(taken)
        line += f" {time.perf_counter() - start:.3f} s ({len(json.dumps(merged))} bytes) |"
    else:
        line += " |"
    print(line)


def index_create(nshards=2_000, per_shard=50, repeats=2):
    """``wds index create`` over ``nshards`` local shards on one process and on two (start-up included)."""
    import os
    import tempfile
    import time

    import wds_core

    with tempfile.TemporaryDirectory() as root:
        with wds_core.ShardWriter(f"{root}/s-%06d.tar", maxcount=per_shard) as sink:
            for i in range(nshards * per_shard):
                sink.write({"__key__": f"k{i:08d}", "txt": "x" * 200, "cls": i % 10})
        spec = f"{root}/s-{{000000..{nshards - 1:06d}}}.tar"
        print(f"\n| wds index create, {nshards:,} local shards of {per_shard} samples | seconds |\n|---|---|")
        for workers in [1, 2] * repeats:
            start = time.perf_counter()
            command = ["wds", "index", "create", spec, "-o", f"{root}/d.json", "--workers", str(workers)]
            subprocess.run(command, check=True, capture_output=True, env=os.environ)
            print(f"| --workers {workers} | {time.perf_counter() - start:.2f} |")


def index_at_scale(nshards, per_shard=5, rounds=1):
    """``wds index create`` over ``nshards`` local shards on each engine (see the module doc)."""
    import os
    import tempfile
    import time

    from wds_core.tar.tarwrite import encode_member, end_of_archive

    with tempfile.TemporaryDirectory(dir=os.environ.get("WDS_BENCH_DIR")) as root:
        start = time.perf_counter()
        for s in range(nshards):  # small shards written directly: the indexing is what is timed
            members = []
            for i in range(per_shard):
                key = f"s{s:06d}-{i}"
                members += [encode_member(f"{key}.txt", b"caption %d" % i), encode_member(f"{key}.cls", b"3")]
            with open(f"{root}/s-{s:06d}.tar", "wb") as out:
                out.write(b"".join(members) + end_of_archive())
        print(f"\n{nshards:,} shards written in {time.perf_counter() - start:.0f} s")
        spec = f"{root}/s-{{000000..{nshards - 1:06d}}}.tar"
        half = nshards // 2
        halves = [f"{root}/s-{{000000..{half - 1:06d}}}.tar", f"{root}/s-{{{half:06d}..{nshards - 1:06d}}}.tar"]
        configurations = {
            "one process (--engine serial)": [["--engine", "serial"]],
            "two independent processes, half each": [["--engine", "serial"]] * 2,
            "process pool, 2 workers": [["--engine", "process", "--workers", "2"]],
            "Dask LocalCluster, 2 workers": [["--engine", "dask", "--workers", "2"]],
        }
        for sidecars in ([], ["--no-sidecar"]):
            _index_engines(root, spec, halves, configurations, sidecars, nshards, rounds)


def _index_engines(root, spec, halves, configurations, sidecars, nshards, rounds):
    """Each configuration ``rounds`` times, in turns; a table of the best of each."""
    import time

    results: dict[str, list[tuple[float, float]]] = {label: [] for label in configurations}
    for _ in range(rounds):  # configurations in turns: this VM drifts within minutes
        for label, runs in configurations.items():
            specs = [spec] if len(runs) == 1 else halves
            start = time.perf_counter()
            children = [
                subprocess.Popen(
                    ["wds", "index", "create", one, "-o", f"{root}/d{i}.json", *options, *sidecars],
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for i, (one, options) in enumerate(zip(specs, runs))
            ]
            rates = []
            for child in children:
                _, err = child.communicate()
                if child.returncode:
                    raise RuntimeError(err)
                rates.append(float(err.rsplit(", ", 1)[1].split()[0].replace(",", "")))
            results[label].append((time.perf_counter() - start, sum(rates)))
            print(f"  {label}: {results[label][-1][0]:.1f} s, {sum(rates):,.0f} shards/s", flush=True)
    serial = max(rate for _, rate in results["one process (--engine serial)"])
    print(
        f"\n| wds index create {' '.join(sidecars)}, {nshards:,} local shards, best of {rounds} "
        "| seconds, start-up included "
        "| shards/s after the first task | vs one process x 2 |\n|---|---|---|---|"
    )
    for label, measured in results.items():
        seconds, rate = min(t for t, _ in measured), max(r for _, r in measured)
        print(f"| {label} | {seconds:.1f} | {rate:,.0f} | {rate / (2 * serial):.0%} |", flush=True)


def specs(args):
    saved = dict(os.environ)  # the simulated readers set RANK, WORLD_SIZE...: the other sections read as one process
    try:
        _specs(args)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _specs(args):
    for nshards in args.index:
        index_at_scale(nshards, rounds=args.rounds)
    for nshards in args.simulate:
        simulate(nshards)
    if args.simulate:
        print("\n| shards | readers | state bytes (JSON) | merge_states of 512 |\n|---|---|---|---|")
        states(2_000, range(512))
        states(max(args.simulate), (0, 511))
        states(10_000_000, (0, 511))  # from the counts file: a descriptor of 10M shards is ~500 MB of JSON
        index_create()
    if args.sizes:
        print("\n| shards | measurement | seconds | MB added | pickle KB |\n|---|---|---|---|---|")
    for n in args.sizes:
        rows = [("wds build", probe("build", "wds", n))]
        if n <= 1_000_000:
            rows.append(("webdataset 1.0.2 build", probe("build", "webdataset", n)))
        rows.append(("wds reader 511 of 512, first shard, unshuffled", probe("first", "wds", n)))
        rows.append(("wds reader 511 of 512, first shard, shuffled", probe("first-shuffled", "wds", n)))
        for label, r in rows:
            kb = f"{r['pickle_kb']:,.1f}" if "pickle_kb" in r else ""
            print(f"| {n:,} | {label} | {r['seconds']:.3f} | {r['mb']:,.0f} | {kb} |")


PLOT_READER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[2])
from tests import synthstore
import wds_core
n, counts = int(sys.argv[1]), sys.argv[3]
store = synthstore.install(n, filesizes=True, sidecars=True)
os.environ.update(RANK="37", WORLD_SIZE="64", WORKER="4", NUM_WORKERS="8")
start = time.perf_counter()
dataset = wds_core.WebDataset(
    f"synth://bucket/shard-{{000000..{n - 1:06d}}}.tar", shardshuffle=True, seed=1, balanced="pad",
    sample_counts=f"synth://bucket/{counts}",
)
next(iter(dataset))
print(json.dumps({"seconds": time.perf_counter() - start, "requests": sum(store.requests.values())}))
"""


def reader(n: int, counts: str) -> dict:
    command = [sys.executable, "-c", PLOT_READER, str(n), harness.REPO, counts]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b x``."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / max(sum((x - mx) ** 2 for x, _ in points), 1e-12)
    return my - b * mx, b


class Panel:
    """One log-log chart of an SVG: ``series`` of measured points (dots) and fitted lines (dashes)."""

    def __init__(self, x0: float, title: str, ylabel: str, xs: tuple[float, float], ys: tuple[float, float]) -> None:
        self.x0, self.title, self.ylabel, self.xs, self.ys = x0, title, ylabel, xs, ys
        self.w, self.h, self.top, self.left = 300, 230, 40, 60
        self.parts: list[str] = []

    def px(self, x: float, y: float) -> tuple[float, float]:
        fx = (math.log10(x) - math.log10(self.xs[0])) / (math.log10(self.xs[1]) - math.log10(self.xs[0]))
        fy = (math.log10(max(y, self.ys[0])) - math.log10(self.ys[0])) / (
            math.log10(self.ys[1]) - math.log10(self.ys[0])
        )
        return self.x0 + self.left + fx * self.w, self.top + self.h - fy * self.h

    def axes(self) -> None:
        x, y = self.x0 + self.left, self.top
        self.parts.append(f'<rect x="{x}" y="{y}" width="{self.w}" height="{self.h}" fill="none" stroke="#999"/>')
        self.parts.append(f'<text x="{x + self.w / 2}" y="{y - 14}" text-anchor="middle" font-weight="bold">')
        self.parts.append(f"{self.title}</text>")
        for e in range(round(math.log10(self.xs[0])), round(math.log10(self.xs[1])) + 1):
            px, _ = self.px(10**e, self.ys[0])
            self.parts.append(f'<line x1="{px}" y1="{y}" x2="{px}" y2="{y + self.h}" stroke="#eee"/>')
            self.parts.append(f'<text x="{px}" y="{y + self.h + 16}" text-anchor="middle">1e{e}</text>')
        for e in range(round(math.log10(self.ys[0])), round(math.log10(self.ys[1])) + 1):
            _, py = self.px(self.xs[0], 10**e)
            self.parts.append(f'<line x1="{x}" y1="{py}" x2="{x + self.w}" y2="{py}" stroke="#eee"/>')
            self.parts.append(f'<text x="{x - 6}" y="{py + 4}" text-anchor="end">1e{e}</text>')
        self.parts.append(f'<text x="{x + self.w / 2}" y="{y + self.h + 34}" text-anchor="middle">shards</text>')
        self.parts.append(
            f'<text x="{self.x0 + 14}" y="{y + self.h / 2}" text-anchor="middle" '
            f'transform="rotate(-90 {self.x0 + 14} {y + self.h / 2})">{self.ylabel}</text>'
        )

    def series(self, label: str, colour: str, points: list[tuple[float, float]], line: tuple[float, float]) -> None:
        a, b = line
        xs = [self.xs[0] * (self.xs[1] / self.xs[0]) ** (i / 60) for i in range(61)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(
            self.px(v, a + b * v) for v in xs
        ))  # fmt: skip
        self.parts.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-dasharray="5,3"/>')
        for x, y in points:
            cx, cy = self.px(x, y)
            self.parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{colour}"/>')
        n = sum(1 for p in self.parts if p.startswith("<text class"))
        lx, ly = self.x0 + self.left + 8, self.top + 16 + 15 * n
        self.parts.append(f'<text class="key" x="{lx}" y="{ly}" fill="{colour}">{label}</text>')


def plot(args) -> None:
    readers, compact = {}, {}
    for n in (10_000, 30_000, 100_000, 300_000):
        readers[n] = min((reader(n, "dataset.json") for _ in range(2)), key=lambda r: r["seconds"])
        print(f"descriptor, {n:,} shards: {readers[n]['seconds']:.2f} s, {readers[n]['requests']} requests")
    for n in (10_000, 100_000, 1_000_000, 10_000_000):
        compact[n] = min((reader(n, "dataset.counts.npz") for _ in range(2)), key=lambda r: r["seconds"])
        print(f"counts file, {n:,} shards: {compact[n]['seconds']:.2f} s, {compact[n]['requests']} requests")
    memory = {n: probe("first-shuffled", "wds", n)["mb"] for n in (100_000, 1_000_000, 10_000_000)}
    old = {n: probe("build", "webdataset", n)["mb"] for n in (100_000, 1_000_000)}
    for n in memory:
        print(f"shuffled list to the first shard, {n:,} shards: wds +{memory[n]:.0f} MB", end="")
        print(f", webdataset 1.x build +{old[n]:.0f} MB" if n in old else "")

    width, height = 1150, 330
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>']  # fmt: skip
    span = (1e3, 1e7)
    requests = Panel(0, "requests before the first samples, 512 readers", "requests", span, (1e2, 1e11))
    requests.axes()
    per_reader = readers[max(readers)]["requests"]
    requests.series("descriptor + sidecars (measured)", "#1b7837", [(n, 512 * r["requests"]) for n, r in
                    readers.items()], (512 * per_reader, 0))  # fmt: skip
    requests.series("no counts: 3 per shard per reader", "#b2182b", [(2_000, 512 * 6_001)], (0, 512 * 3))
    startup = Panel(380, "seconds to a reader's first sample", "seconds", span, (1e-2, 1e3))
    startup.axes()
    points = [(n, r["seconds"]) for n, r in readers.items()]
    startup.series("descriptor (JSON) + sidecars", "#b2182b", points, fit(points))
    compact_points = [(n, r["seconds"]) for n, r in compact.items()]
    startup.series("counts file + sidecars", "#1b7837", compact_points, fit(compact_points))
    mem = Panel(760, "memory per process, shuffled list", "MB", span, (1e-1, 1e4))
    mem.axes()
    wds_points = [(n, max(m, 0.1)) for n, m in memory.items()]
    mem.series("wds (positions, 4 B a shard)", "#1b7837", wds_points, fit(wds_points))
    old_points = list(old.items())
    mem.series("webdataset 1.x (names)", "#b2182b", old_points, fit(old_points))
    for panel in (requests, startup, mem):
        parts += panel.parts
    parts.append("</svg>")
    with open(args.out, "w") as out:
        out.write("\n".join(parts) + "\n")
    for label, series in (("descriptor", points), ("counts file", compact_points)):
        a, b = fit(series)
        print(f"start-up fit, {label}: {a:.3f} s + {b * 1e6:.2f} s per million shards; at 1M {a + b * 1e6:.1f} s, "
              f"at 10M {a + b * 1e7:.1f} s")  # fmt: skip
    print(f"wrote {args.out}")


SHUFFLE_SHARDS, SHUFFLE_PER_SHARD, SHUFFLE_BATCH, HELD = 200, 100, 256, 1000
BATCH_IN_WORKERS = 16  # webdataset's recipe for mixing workers: small batches in them, the real ones after


def write_ordered(root: str) -> tuple[str, list[list[str]]]:
    os.makedirs(root, exist_ok=True)
    stored = [[f"s{s:03d}_{i:03d}" for i in range(SHUFFLE_PER_SHARD)] for s in range(SHUFFLE_SHARDS)]
    for number, keys in enumerate(stored):
        path = f"{root}/o{number:03d}.tar"
        if not os.path.exists(path):
            with open(path, "wb") as out:
                for key in keys:
                    out.write(encode_member(f"{key}.cls", b"%d" % number))
                out.write(end_of_archive())
    return f"{root}/o{{000..{SHUFFLE_SHARDS - 1:03d}}}.tar", stored


def write_mds(root: str) -> str | None:
    """The same samples as MDS shards of exactly 100 samples (mosaic cuts shards by bytes: the limit is searched)."""
    try:
        from streaming import MDSWriter
    except ImportError:
        return None
    out = f"{root}/mds"
    for limit in range(1700, 1900):
        if os.path.exists(f"{out}/index.json"):
            with open(f"{out}/index.json") as index:
                if all(shard["samples"] == SHUFFLE_PER_SHARD for shard in json.load(index)["shards"]):
                    return out
        shutil.rmtree(out, ignore_errors=True)
        with MDSWriter(out=out, columns={"key": "str"}, size_limit=limit) as writer:
            for s in range(SHUFFLE_SHARDS):
                for i in range(SHUFFLE_PER_SHARD):
                    writer.write({"key": f"s{s:03d}_{i:03d}"})
    raise SystemExit("could not write MDS shards of exactly 100 samples")


def shards_at_hand(order: list[str], storage: dict, window: int = HELD) -> float:
    """Mean distinct shards within ``window`` consecutive samples (in steps of a quarter window)."""
    shard = np.asarray([storage[key][0] for key in order])
    counts = [len(np.unique(shard[i : i + window])) for i in range(0, len(shard) - window + 1, window // 4)]
    return float(np.mean(counts))


def by_workers(make, workers: int, batch: int = SHUFFLE_BATCH) -> list[str]:
    """The epoch a DataLoader delivers when each of ``workers`` makes its own batches: their batches in turn."""
    batches = []
    for worker in range(workers):
        set_worker_info_provider(lambda worker=worker: (worker, workers))
        try:
            keys = list(make())
        finally:
            set_worker_info_provider(None)
        batches.append([keys[i : i + batch] for i in range(0, len(keys), batch)])
    order = []
    for turn in range(max(len(b) for b in batches)):
        for mine in batches:
            if turn < len(mine):
                order += mine[turn]
    return order


def rebatched(order: list[str], buffer: int, seed: int) -> list[str]:
    """webdataset's recipe for mixing workers: the workers hand over small batches (in turns, as a DataLoader
    does), the main process unbatches them into a ``shuffle(buffer)`` before making the batches."""
    return list(wds.DataPipeline(order, wds.shuffle(buffer), seed=seed))


def shuffle(args: argparse.Namespace) -> None:
    spec, stored = write_ordered(os.path.join(args.data, "shuffle", "ordered"))
    storage = storage_order(stored)
    rows: list[tuple[str, str, object]] = []

    def wds_keys(interleave: int | None, buffer: int):
        def make():
            dataset = wds.WebDataset(spec, seed=args.seed, interleave=interleave, shuffle=True)
            return (sample["__key__"] for sample in dataset.shuffle(buffer))

        return make

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import webdataset
        os.environ["WDS_SEED"] = str(args.seed)
        rows.append(("webdataset 1.0.2: shardshuffle=True, shuffle(1000)", "1,000",
                     [s["__key__"] for s in webdataset.WebDataset(spec, shardshuffle=True).shuffle(1000)]))  # fmt: skip
    except ImportError:
        rows.append(("webdataset 1.0.2", "", "not installed"))
    rows.append(("wds: shardshuffle=True, shuffle(1000)", "1,000", list(wds_keys(None, 1000)())))
    for lanes in (50, 100, 200):
        label = f"wds: interleave={lanes}, shuffle({HELD - lanes})"
        rows.append((label, "1,000", list(wds_keys(lanes, HELD - lanes)())))
    mds = write_mds(os.path.join(args.data, "shuffle", "ordered"))
    if mds is None:
        rows.append(("mosaic-streaming", "", "not installed"))
    else:
        import streaming
        from streaming.base.util import clean_stale_shared_memory

        for algo, block in [("py1s", 1000), ("py1br", 1000), ("py1e", 1000), ("py2s", 1000), ("py1e", None)]:
            clean_stale_shared_memory()
            dataset = streaming.StreamingDataset(
                local=mds, shuffle=True, shuffle_algo=algo, shuffle_block_size=block, shuffle_seed=args.seed,
                batch_size=SHUFFLE_BATCH, num_canonical_nodes=1,
            )  # fmt: skip
            held = "a block of 1,000" if block else "the epoch (its default block)"
            rows.append((f"mosaic-streaming {streaming.__version__}: {algo}", held, [s["key"] for s in dataset]))
    common, lanes = by_workers(wds_keys(None, 1000), 2), by_workers(wds_keys(100, 400), 2)
    rows.append(("2 workers, shardshuffle=True, shuffle(1000) each", "2 x 1,000", common))
    rows.append(("2 workers, interleave=100, shuffle(400) each", "2 x 500", lanes))
    rows.append(("2 workers, interleave=100, shuffle(900) each", "2 x 1,000", by_workers(wds_keys(100, 900), 2)))
    small = by_workers(wds_keys(100, 150), 2, BATCH_IN_WORKERS)
    rows.append(("2 workers, interleave=100, shuffle(150) each, batches of 16; shuffle(500) in the main process",
                 "2 x 250 + 500", rebatched(small, 500, args.seed)))  # fmt: skip
    print(f"# {SHUFFLE_SHARDS} shards of {SHUFFLE_PER_SHARD} samples stored in order, batches of {SHUFFLE_BATCH}, "
          f"seed {args.seed}")  # fmt: skip
    print("| shuffle | held | distinct shards a batch | of a global shuffle's | displacement | shards within "
          "1,000 samples |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for label, held, order in rows:
        if isinstance(order, str):
            print(f"| {label} | {order} | | | | |")
            continue
        assert sorted(order) == sorted(storage), f"{label}: not every sample once"
        measured = shuffle_quality(order, storage, SHUFFLE_BATCH)
        print(f"| {label} | {held} | {measured.distinct_per_batch:.1f} / {measured.global_distinct_per_batch:.1f} | "
              f"{measured.diversity_ratio:.2f} | {measured.displacement:.3f} | "
              f"{shards_at_hand(order, storage):.0f} |", flush=True)  # fmt: skip


SPEED = """
import os, sys, time
sys.path.insert(0, {repo!r})
import wds_core as wds
spec, interleave, buffer, options = {spec!r}, {interleave!r}, {buffer!r}, {options!r}
started = time.perf_counter()
first, n, nbytes = None, 0, 0
dataset = wds.WebDataset(spec, shardshuffle=True, seed=1, interleave=interleave, storage_options=options)
for sample in dataset.shuffle(buffer):
    n += 1
    nbytes += len(sample["bin"])
    if first is None:
        first = time.perf_counter() - started
seconds = time.perf_counter() - started
with open("/proc/self/status") as status:  # this process's own peak (ru_maxrss would be its parent's, kept by exec)
    peak = next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM"))
print(n, nbytes, seconds, first, peak)
"""


def shuffle_speed(args: argparse.Namespace) -> None:
    store = os.path.join(args.data, "shuffle", "store")  # the server's root: its folder "bench" is the bucket
    root = f"{store}/bench"
    os.makedirs(root, exist_ok=True)
    sample = 60_000
    for s in range(SHUFFLE_SHARDS):
        path = f"{root}/p{s:03d}.tar"
        if not os.path.exists(path):
            with open(path, "wb") as out:
                for i in range(SHUFFLE_PER_SHARD):
                    out.write(encode_member(f"p{s:03d}_{i:03d}.bin", os.urandom(sample)))
                    out.write(encode_member(f"p{s:03d}_{i:03d}.cls", b"%d" % (i % 10)))
                out.write(end_of_archive())
    print(f"# {SHUFFLE_SHARDS} shards of {SHUFFLE_PER_SHARD} samples of {sample // 1000} KB; remote: HTTP and S3 "
          f"(path-style) from a local server, {args.latency:g} ms and "
          f"{args.bandwidth:g} MB/s a connection; best of {harness.repeats(args, 3)}, a fresh process each; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cores")  # fmt: skip
    print("| where | shuffle | samples/s | MB/s | first sample | peak RSS |")
    print("|---|---|---|---|---|---|")
    servers = harness.servers()
    with servers.http_server_process(
        store, servers.Shape(latency=args.latency / 1000, bandwidth=args.bandwidth * 1e6)
    ) as base:
        s3 = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": base, "region_name": "us-east-1"}}
        places = [
            ("local", f"{root}/p{{000..199}}.tar", None),
            ("HTTP", f"{base}/bench/p{{000..199}}.tar", None),
            ("S3", "s3://bench/p{000..199}.tar", s3),
        ]
        for where, spec, options in places:
            for interleave, buffer in ((None, 1000), (200, 800)):
                runs = []
                for _ in range(harness.repeats(args, 3)):
                    code = SPEED.format(
                        repo=harness.REPO, spec=spec, interleave=interleave, buffer=buffer, options=options
                    )
                    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                    n, nbytes, seconds, first, rss = out.stdout.split()
                    assert int(n) == SHUFFLE_SHARDS * SHUFFLE_PER_SHARD, out.stdout
                    runs.append((float(seconds), float(first), int(rss)))
                seconds, first, rss = min(runs)
                label = f"shuffle({buffer})" if interleave is None else f"interleave={interleave}, shuffle({buffer})"
                total = SHUFFLE_SHARDS * SHUFFLE_PER_SHARD
                print(f"| {where} | {label} | {total / seconds:,.0f} | {total * sample / seconds / 1e6:,.0f} | "
                      f"{first:.3f} s | {rss} MB |", flush=True)  # fmt: skip


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:  # the parent pid
                found.append(int(entry))
    return found


_OURS: set[int] = {os.getpid()}  # this process and every child it had: the wds_<pid>_... slots that are ours


def measure() -> dict[str, float]:
    """This process's descriptors, children and resident memory, and the ``/dev/shm`` slots of this process and
    its children (``wds_<pid>_...``, those of other programs on the machine left out) with PyTorch's ``psm_*``."""
    children = _children()
    _OURS.update(children)
    shm = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    slots = [name for name in shm if name.startswith("wds_") and name.split("_")[1].isdigit()]
    with open("/proc/self/statm") as statm:
        rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    return {
        "fds": len(os.listdir("/proc/self/fd")),
        "children": len(children),
        "shm": sum(int(name.split("_")[1]) in _OURS for name in slots) + sum(n.startswith("psm_") for n in shm),
        "rss_mb": rss,
    }


def _process(pid: int) -> tuple[float, int, int]:
    """Resident MB, threads and open descriptors of process ``pid``."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"]), len(os.listdir(f"/proc/{pid}/fd"))


def measure_workers(others: set[int]) -> dict[str, float]:
    """:func:`measure`, with the resident MB, threads and descriptors of this process's children (but ``others``)
    together."""
    row = measure()
    workers = [_process(pid) for pid in _children() if pid not in others]
    row["workers_rss_mb"] = sum(rss for rss, _, _ in workers)
    row["workers_threads"] = sum(threads for _, threads, _ in workers)
    row["workers_fds"] = sum(fds for _, _, fds in workers)
    return row


def slope(values: list[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    return sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values)) / sum((x - mean_x) ** 2 for x in range(n))


def _shards(root: str, nshards: int = 8, per_shard: int = 20) -> str:
    import numpy as np

    import wds_core as wds

    for s in range(nshards):
        with wds.TarWriter(f"{root}/soak-{s}.tar") as sink:
            for i in range(per_shard):
                sink.write({"__key__": f"s{s}-{i:03d}", "npy": np.full((64, 64), i, np.uint8), "cls": i})
    return f"{root}/soak-{{0..{nshards - 1}}}.tar"


def _dataset(spec: str, cache: str, shard_bytes: int, flavour: str):
    import wds_core

    module = wds_core
    if flavour == "torch":
        import wds_torch as module  # type: ignore[no-redef]
    shard_cache = wds_core.ShardCache(cache, 3 * shard_bytes, cache_local=True)
    return (
        module.WebDataset(spec, seed=1, shuffle=True, storage=wds_core.Storage(cache=shard_cache))
        .decode()
        .to_tuple("npy", "cls")
    )  # fmt: skip


def _loader(dataset, flavour: str):
    if flavour == "torch":
        import torch
        from torchdata.stateful_dataloader import StatefulDataLoader

        del torch
        return StatefulDataLoader(dataset, num_workers=2, batch_size=None, persistent_workers=True)
    import wds_core

    return wds_core.Loader(dataset, num_workers=2, persistent_workers=True)


def soak_run(epochs: int = 200, flavour: str = "core", every: int = 10) -> dict[str, object]:
    """Run the soak; the per-epoch measurements and each one's slope after the warm-up."""
    with tempfile.TemporaryDirectory() as root:
        spec = _shards(root)
        shard_bytes = os.path.getsize(f"{root}/soak-0.tar")
        cache = f"{root}/cache"
        loader = _loader(_dataset(spec, cache, shard_bytes, flavour), flavour)
        rows, samples = [], 0
        for epoch in range(epochs):
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(epoch)
            samples += sum(1 for _ in loader)
            rows.append(measure())
            if epoch % every == every - 1:  # a checkpoint, and a new loader restored from it
                state = loader.state_dict()
                del loader
                loader = _loader(_dataset(spec, cache, shard_bytes, flavour), flavour)
                loader.load_state_dict(state)
        del loader
        warm = max(1, epochs // 10)
        slopes = {key: slope([row[key] for row in rows[warm:]]) for key in rows[0]}
        cached = sum(len(files) for _, _, files in os.walk(cache))
        return {"rows": rows, "slopes": slopes, "samples": samples, "cache_files": cached}


def _remote_shards(root: str, nshards: int, shard_mb: float) -> int:
    """Shards of 80 KB samples (and a label) in ``root``, ``shard_mb`` MB each: the samples a shard has."""
    import numpy as np

    from wds_core.tar.tarwrite import encode_member, end_of_archive

    per_shard = max(1, int(shard_mb * 1e6 // 81_920))
    for s in range(nshards):
        rng = np.random.default_rng(s)
        with open(f"{root}/shard-{s:03d}.tar", "wb") as out:
            for i in range(per_shard):
                out.write(encode_member(f"s{s}-{i:05d}.bin", rng.bytes(80_000)))
                out.write(encode_member(f"s{s}-{i:05d}.cls", b"%d" % i))
            out.write(end_of_archive())
    return per_shard


def soak_breaks(epochs: int = 30, flavour: str = "core", nshards: int = 16, shard_mb: float = 16) -> dict[str, object]:
    """Remote reading with an early break every epoch (see the module doc): the per-epoch measurements (workers
    included) and each one's slope after the warm-up."""
    servers = harness.servers()
    with tempfile.TemporaryDirectory() as root:
        per_shard = _remote_shards(root, nshards, shard_mb)
        half = nshards * per_shard // 2
        with servers.http_server_process(root, servers.Shape(latency=0.04, bandwidth=40e6)) as url:
            server = set(_children())  # not a worker
            import wds_core

            module = wds_core
            if flavour == "torch":
                import wds_torch as module  # type: ignore[no-redef]
            spec = f"{url}/shard-{{000..{nshards - 1:03d}}}.tar"
            dataset = module.WebDataset(spec, seed=1, shuffle=True).to_tuple("bin", "cls")
            if flavour == "torch":
                import torch

                loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
            else:
                loader = wds_core.Loader(dataset, num_workers=2, persistent_workers=True)
            rows, samples = [], 0
            for _ in range(epochs):
                for count, _ in enumerate(loader, 1):
                    if count == half:
                        break
                samples += count
                rows.append(measure_workers(server))
            del loader
    warm = max(2, epochs // 5)
    slopes = {key: slope([row[key] for row in rows[warm:]]) for key in rows[0]}
    return {"rows": rows, "slopes": slopes, "samples": samples, "warm": warm}


def soak(args) -> None:
    for flavour in args.loaders:
        if flavour == "torch":
            try:  # the DataLoader (and for the plain soak, torchdata's StatefulDataLoader)
                import torch  # noqa: F401

                if not args.breaks:
                    import torchdata  # noqa: F401
            except ImportError:
                print("torch: not installed, skipped", file=sys.stderr)
                continue
        start = time.perf_counter()
        if args.breaks:
            result = soak_breaks(args.epochs, flavour, args.shards, args.shard_mb)
            keys, what, warm = ("workers_rss_mb", "workers_threads", "workers_fds", "rss_mb", "fds"), "", result["warm"]
        else:
            result = soak_run(args.epochs, flavour)
            keys, warm = ("fds", "children", "shm", "rss_mb"), max(1, args.epochs // 10)
            what = f"; cache entries at the end: {result['cache_files']}"
        rows, slopes = result["rows"], result["slopes"]
        kind = ", an early break every epoch" if args.breaks else ""
        print(f"\n{flavour}{kind}: {args.epochs} epochs, {result['samples']:,} samples in "
              f"{time.perf_counter() - start:.0f} s{what}")  # fmt: skip
        print("| measure | after warm-up | at the end | slope per epoch |\n|---|---|---|---|")
        for key in keys:
            print(f"| {key} | {rows[warm][key]:,.1f} | {rows[-1][key]:,.1f} | {slopes[key]:+.4f} |")  # type: ignore[index]


def options(parser):
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000_000, 10_000_000], help="shards (specs)")
    parser.add_argument("--simulate", type=int, nargs="*", default=[2_000, 100_000], help="fake shards (specs)")
    parser.add_argument("--index", type=int, nargs="*", default=[], help="wds index create over this many (specs)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the --index configurations (specs)")
    parser.add_argument("--out", default=os.path.join(harness.REPO, "docs", "images", "scale.svg"), help="(plot)")
    parser.add_argument("--seed", type=int, default=0, help="(shuffle)")
    parser.add_argument("--latency", type=float, default=40, help="ms before each response (shuffle-speed)")
    parser.add_argument("--bandwidth", type=float, default=40, help="MB/s a connection (shuffle-speed)")
    parser.add_argument("--epochs", type=int, default=200, help="(soak; 30 is plenty with --breaks)")
    parser.add_argument("--loaders", nargs="+", default=["core", "torch"], help="(soak)")
    parser.add_argument("--breaks", action="store_true", help="remote reading, each epoch stopped halfway (soak)")
    parser.add_argument("--shards", type=int, default=16, help="shards on the HTTP server (soak --breaks)")
    parser.add_argument("--shard-mb", type=float, default=16, help="MB a shard (soak --breaks)")


SECTIONS = {"specs": specs, "shuffle": shuffle, "shuffle-speed": shuffle_speed, "soak": soak, "plot": plot}

if __name__ == "__main__":
    # plot rewrites a file of docs/: only when asked for
    harness.run(__doc__, SECTIONS, options, default=["specs", "shuffle", "shuffle-speed", "soak"])
