"""Writer speed: wds_core.TarWriter against webdataset 1.x's TarWriter, in the same run.

Small samples (an int class, a short caption, a small JSON record), encoded by
extension on both sides, written to a local file; webdataset gets a fixed mtime
too so both produce reproducible files.  Best of N repeats.

    python benchmarks/bench_write.py [--samples 50000] [--repeats 3] [--dir /tmp/wds-bench]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import wds_core


def make_samples(n):
    return [
        {
            "__key__": f"sample{i:08d}",
            "cls": i % 1000,
            "txt": f"a photo of thing number {i}",
            "json": {"i": i, "w": 256},
        }
        for i in range(n)
    ]


def time_writer(make_writer, samples, path, repeats):
    best = float("inf")
    for _ in range(repeats):
        if os.path.exists(path):
            os.unlink(path)
        start = time.perf_counter()
        with make_writer(path) as sink:
            for sample in samples:
                sink.write(sample)
        best = min(best, time.perf_counter() - start)
    return best, os.path.getsize(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/wds-bench")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    warnings.filterwarnings("ignore")
    import webdataset

    samples = make_samples(args.samples)
    ours, our_size = time_writer(wds_core.TarWriter, samples, f"{args.dir}/write-wds.tar", args.repeats)
    theirs, their_size = time_writer(
        lambda p: webdataset.TarWriter(p, mtime=0), samples, f"{args.dir}/write-webdataset.tar", args.repeats
    )
    n = args.samples
    print("| writer | samples/s | shard MB |\n|---|---|---|")
    print(f"| wds TarWriter | {n / ours:,.0f} | {our_size / 1e6:.1f} |")
    print(
        f"| webdataset {webdataset.__version__ if hasattr(webdataset, '__version__') else '1.x'} TarWriter "
        f"| {n / theirs:,.0f} | {their_size / 1e6:.1f} |"
    )
    print(f"speedup {theirs / ours:.1f}x; shard size {our_size / their_size:.2f} of webdataset's")


if __name__ == "__main__":
    main()
