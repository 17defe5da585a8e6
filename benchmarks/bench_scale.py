"""Million-shard specs: building the dataset, pickling it to workers, and one reader's first shard.

For ``s3://bucket/train-{0000000..N-1}.tar`` (no object is read: only the shard list is timed),
each measurement in a fresh Python process so that its memory is its own:

* build: ``WebDataset(spec, shardshuffle=True, seed=1)`` -- seconds, resident memory added, and the
  size of the pickle every DataLoader worker receives; for wds and for webdataset 1.x (1M only:
  at 10M webdataset's list takes ~40 s and several GB);
* first shard: the reader (rank 63 of 64, worker 7 of 8) of ``SimpleShardList`` + ``split_by_node``
  + ``split_by_worker``: seconds and memory until its first shard URL, unshuffled and shuffled
  (the shuffled order is webdataset's: ``random.Random(seed + epoch).shuffle``, of 4-byte positions).

* simulated balanced readers (``--simulate``): shards of a fake object store that makes them up
  and counts requests (``tests/synthstore.py``), ``balanced="pad"`` over 64 ranks x 8 workers;
  for a sample of the 512 readers, requests and seconds until the first sample, with
  ``sample_counts=`` (a wids descriptor in the store, with and without file sizes and ``.idx``
  sidecars, or a counts file) and without (every shard indexed).

* ``wds index create`` (with ``--simulate``): 2,000 local shards indexed on one and two processes.

* ``wds index create`` at scale (``--index 100000``): that many local shards (and their sidecars)
  indexed by one process, by two independent processes taking half each (what this machine gives
  for "one process x 2"), by a 2-process pool and by a 2-worker Dask ``LocalCluster``, in turns.

    python benchmarks/bench_scale.py [--sizes 1000000 10000000] [--simulate 100000] [--index 100000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

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
    import os
    import time

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
            dataset = wds_core.WebDataset(spec, shardshuffle=True, seed=1, balanced="pad", sample_counts=counts)
            next(iter(dataset))
            seconds = time.perf_counter() - start
            print(f"| {reader} | {label} | {sum(store.requests.values()):,} | {seconds:.2f} |")


def states(nshards, readers):
    """Checkpoint sizes of balanced readers after their first sample, and merging 512 of them."""
    import os
    import time

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
        dataset = wds_core.WebDataset(spec, shardshuffle=True, seed=1, balanced="pad", sample_counts=counts)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000_000, 10_000_000])
    parser.add_argument("--simulate", type=int, nargs="*", default=[2_000, 100_000])
    parser.add_argument("--index", type=int, nargs="*", default=[], help="wds index create over this many shards")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the --index configurations")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
