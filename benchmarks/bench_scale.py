"""Million-shard specs: building the dataset, pickling it to workers, and one reader's first shard.

For ``s3://bucket/train-{0000000..N-1}.tar`` (no object is read: only the shard list is timed),
each measurement in a fresh Python process so that its memory is its own:

* build: ``WebDataset(spec, shardshuffle=True, seed=1)`` -- seconds, resident memory added, and the
  size of the pickle every DataLoader worker receives; for wds and for webdataset 1.x (1M only:
  at 10M webdataset's list takes ~40 s and several GB);
* first shard: the reader (rank 63 of 64, worker 7 of 8) of ``SimpleShardList`` + ``split_by_node``
  + ``split_by_worker``: seconds and memory until its first shard URL, unshuffled and shuffled
  (the shuffled order is webdataset's: ``random.Random(seed + epoch).shuffle``, of 4-byte positions).

    python benchmarks/bench_scale.py [--sizes 1000000 10000000]
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    args = parser.parse_args()
    print("| shards | measurement | seconds | MB added | pickle KB |\n|---|---|---|---|---|")
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
