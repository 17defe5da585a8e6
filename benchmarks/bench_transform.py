"""Scale-out processing: ``map_shards`` on each engine against the seed's webdataset + Dask pattern.

The job: bench_indexed.py's 10 shards (10,000 samples of ~10 KB), each sample's ``txt`` field
upper-cased, written as 10 new shards. Timed from the call to the last shard written, including
starting the pool or the cluster (two worker processes each):

* wds ``map_shards`` with ``engine="serial"``, ``"process"`` and ``"dask"`` (a LocalCluster);
* webdataset 1.0.2 the way the seed README does it: ``dask.delayed(augment)`` per shard, where
  ``augment`` reads with ``wds.WebDataset`` and writes with ``wds.TarWriter``, on the same kind
  of LocalCluster.

    python benchmarks/bench_transform.py [--dir /tmp/wds-bench-indexed] [--repeats 3]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_indexed  # noqa: E402

import wds_core  # noqa: E402


def shout(sample):
    if "txt" in sample:
        sample["txt"] = sample["txt"].upper()
    return sample


def augment(src, dst):
    import webdataset

    with webdataset.TarWriter(dst) as sink:
        for sample in webdataset.WebDataset(src, shardshuffle=False, empty_check=False):
            sink.write({k: v for k, v in shout(sample).items() if k == "__key__" or not k.startswith("__")})


def webdataset_dask(shards, out):
    import dask
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster):
            jobs = [dask.delayed(augment)(src, f"{out}/w-{i:02d}.tar") for i, src in enumerate(shards)]
            dask.compute(*jobs)


def timed(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        out = tempfile.mkdtemp(prefix="wds-bench-transform-")
        start = time.perf_counter()
        fn(out)
        best = min(best, time.perf_counter() - start)
        shutil.rmtree(out)
    return best


def main():
    args, shards, _ = bench_indexed.arguments_and_data(__doc__)
    samples = bench_indexed.NSHARDS * bench_indexed.PER_SHARD
    results = {}
    for engine in ("serial", "process", "dask"):

        def ours(out, engine=engine):
            summary = wds_core.map_shards(shout, shards, out + "/", engine=engine, workers=2)
            assert summary.ok and summary.samples_out == samples, summary

        results[f"wds map_shards engine={engine!r}"] = timed(ours, args.repeats)
    results["webdataset 1.0.2 + dask.delayed (the seed's pattern)"] = timed(
        lambda out: webdataset_dask(shards, out), args.repeats
    )
    for name, seconds in results.items():
        print(f"{name:<55} {seconds:6.2f} s  {samples / seconds:>9,.0f} samples/s")


if __name__ == "__main__":
    main()
