"""How well an epoch is shuffled at a given memory, and what reading many shards at once costs.

**Quality.**  200 shards of 100 samples, stored in order (a class, a source, a crawl date per shard), one epoch
of each shuffle measured by ``wds_core.observe.shufflestats`` against a global shuffle: the distinct shards in a batch
of 256 (a global shuffle's exact expectation is 145.0) and displacement (a global shuffle's: 0.333).  Each row
holds about 1,000 samples (or a window of 1,000 sample indices), except the references:

* webdataset 1.0.2: ``WebDataset(urls, shardshuffle=True).shuffle(1000)``;
* wds: the same, and ``WebDataset(urls, shardshuffle=True, interleave=K).shuffle(1000 - K)``;
* mosaic-streaming: its ``StreamingDataset(local=..., shuffle=True, shuffle_algo=..., shuffle_block_size=1000)``
  over MDS shards of the same 200 x 100 samples, each of its algorithms (its default block holds the whole
  epoch: every shard in its cache at once, shown as a reference);
* the same shuffles split between 2 DataLoader workers, each making its own batches, as a DataLoader does.

The last column is the mean number of distinct shards within 1,000 consecutive samples of the epoch: how many
shards the reader must have at hand at once (open, or in mosaic's cache).

**Speed** (``--speed``).  Raw reads of 200 shards of 100 samples of 60 KB (1.2 GB) with ``shuffle(1000)`` and
with ``interleave=200, shuffle(800)``: local (page cache), and over HTTP and S3 (path-style requests, signatures
not checked) from a local server shaped like an object store (``--latency`` ms before each response,
``--bandwidth`` MB/s a connection), with the peak resident memory of the reading process.

    python benchmarks/bench_shuffle.py [--dir /tmp/wds-bench-shuffle] [--speed] [--latency 40] [--bandwidth 40]

mosaic-streaming and webdataset are optional (``pip install mosaicml-streaming webdataset==1.0.2``): a row
whose system is missing says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402

import wds_core as wds  # noqa: E402
from wds_core.dist import set_worker_info_provider  # noqa: E402
from wds_core.observe.shufflestats import shuffle_quality, storage_order  # noqa: E402
from wds_core.tar.tarwrite import encode_member, end_of_archive  # noqa: E402

SHARDS, PER_SHARD, BATCH, HELD = 200, 100, 256, 1000
BATCH_IN_WORKERS = 16  # webdataset's recipe for mixing workers: small batches in them, the real ones after


def write_ordered(root: str) -> tuple[str, list[list[str]]]:
    os.makedirs(root, exist_ok=True)
    stored = [[f"s{s:03d}_{i:03d}" for i in range(PER_SHARD)] for s in range(SHARDS)]
    for number, keys in enumerate(stored):
        path = f"{root}/o{number:03d}.tar"
        if not os.path.exists(path):
            with open(path, "wb") as out:
                for key in keys:
                    out.write(encode_member(f"{key}.cls", b"%d" % number))
                out.write(end_of_archive())
    return f"{root}/o{{000..{SHARDS - 1:03d}}}.tar", stored


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
                if all(shard["samples"] == PER_SHARD for shard in json.load(index)["shards"]):
                    return out
        shutil.rmtree(out, ignore_errors=True)
        with MDSWriter(out=out, columns={"key": "str"}, size_limit=limit) as writer:
            for s in range(SHARDS):
                for i in range(PER_SHARD):
                    writer.write({"key": f"s{s:03d}_{i:03d}"})
    raise SystemExit("could not write MDS shards of exactly 100 samples")


def shards_at_hand(order: list[str], storage: dict, window: int = HELD) -> float:
    """Mean distinct shards within ``window`` consecutive samples (in steps of a quarter window)."""
    shard = np.asarray([storage[key][0] for key in order])
    counts = [len(np.unique(shard[i : i + window])) for i in range(0, len(shard) - window + 1, window // 4)]
    return float(np.mean(counts))


def by_workers(make, workers: int, batch: int = BATCH) -> list[str]:
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


def quality(args: argparse.Namespace) -> None:
    spec, stored = write_ordered(f"{args.dir}/ordered")
    storage = storage_order(stored)
    rows: list[tuple[str, str, object]] = []

    def wds_keys(interleave: int | None, buffer: int):
        def make():
            dataset = wds.WebDataset(spec, shardshuffle=True, seed=args.seed, interleave=interleave)
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
    mds = write_mds(f"{args.dir}/ordered")
    if mds is None:
        rows.append(("mosaic-streaming", "", "not installed"))
    else:
        import streaming
        from streaming.base.util import clean_stale_shared_memory

        for algo, block in [("py1s", 1000), ("py1br", 1000), ("py1e", 1000), ("py2s", 1000), ("py1e", None)]:
            clean_stale_shared_memory()
            dataset = streaming.StreamingDataset(
                local=mds, shuffle=True, shuffle_algo=algo, shuffle_block_size=block, shuffle_seed=args.seed,
                batch_size=BATCH, num_canonical_nodes=1,
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
    print(f"# {SHARDS} shards of {PER_SHARD} samples stored in order, batches of {BATCH}, seed {args.seed}; "
          f"python {sys.version.split()[0]}")  # fmt: skip
    print("| shuffle | held | distinct shards a batch | of a global shuffle's | displacement | shards within "
          "1,000 samples |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for label, held, order in rows:
        if isinstance(order, str):
            print(f"| {label} | {order} | | | | |")
            continue
        assert sorted(order) == sorted(storage), f"{label}: not every sample once"
        measured = shuffle_quality(order, storage, BATCH)
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


def speed(args: argparse.Namespace) -> None:
    store = f"{args.dir}/store"  # the server's root: its folder "bench" is the bucket
    root = f"{store}/bench"
    os.makedirs(root, exist_ok=True)
    sample = 60_000
    for s in range(SHARDS):
        path = f"{root}/p{s:03d}.tar"
        if not os.path.exists(path):
            with open(path, "wb") as out:
                for i in range(PER_SHARD):
                    out.write(encode_member(f"p{s:03d}_{i:03d}.bin", os.urandom(sample)))
                    out.write(encode_member(f"p{s:03d}_{i:03d}.cls", b"%d" % (i % 10)))
                out.write(end_of_archive())
    print(f"# {SHARDS} shards of {PER_SHARD} samples of {sample // 1000} KB; remote: HTTP and S3 (path-style) from "
          f"a local server, {args.latency:g} ms and "
          f"{args.bandwidth:g} MB/s a connection; best of {args.repeats}, a fresh process each; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} cores")  # fmt: skip
    print("| where | shuffle | samples/s | MB/s | first sample | peak RSS |")
    print("|---|---|---|---|---|---|")
    sys.path.insert(0, REPO)
    from tests.servers import Shape, http_server_process

    with http_server_process(store, Shape(latency=args.latency / 1000, bandwidth=args.bandwidth * 1e6)) as base:
        s3 = {"key": "bench", "secret": "bench", "client_kwargs": {"endpoint_url": base, "region_name": "us-east-1"}}
        places = [
            ("local", f"{root}/p{{000..199}}.tar", None),
            ("HTTP", f"{base}/bench/p{{000..199}}.tar", None),
            ("S3", "s3://bench/p{000..199}.tar", s3),
        ]
        for where, spec, options in places:
            for interleave, buffer in ((None, 1000), (200, 800)):
                runs = []
                for _ in range(args.repeats):
                    code = SPEED.format(repo=REPO, spec=spec, interleave=interleave, buffer=buffer, options=options)
                    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                    n, nbytes, seconds, first, rss = out.stdout.split()
                    assert int(n) == SHARDS * PER_SHARD, out.stdout
                    runs.append((float(seconds), float(first), int(rss)))
                seconds, first, rss = min(runs)
                label = f"shuffle({buffer})" if interleave is None else f"interleave={interleave}, shuffle({buffer})"
                total = SHARDS * PER_SHARD
                print(f"| {where} | {label} | {total / seconds:,.0f} | {total * sample / seconds / 1e6:,.0f} | "
                      f"{first:.3f} s | {rss} MB |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-bench-shuffle")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--speed", action="store_true", help="also the reading speed: local, shaped HTTP and S3")
    parser.add_argument("--latency", type=float, default=40, help="ms before each response (default 40)")
    parser.add_argument("--bandwidth", type=float, default=40, help="MB/s a connection (default 40)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    started = time.perf_counter()
    quality(args)
    if args.speed:
        speed(args)
    print(f"# {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
