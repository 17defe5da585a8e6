"""Indexed random access against wids 0.1.11, in the same run.

* random access: raw samples/s for uniformly random indexes over 10 local shards x 1,000 samples
  (a ~10 KB "jpg", a "cls" and a "json" each), shards memory-mapped by both; wids with
  ``transformations=[]`` (raw), its shards opened in place (``localname`` = identity);
* index building: a descriptor for the same 10 shards, ``widsindex create`` (as a subprocess)
  against ``wds index create`` (as a subprocess; sidecar indexes included, no md5) and
  ``wds index create --md5`` (what widsindex always does);
* the local reads behind random access: the compiled copy out of a map (``mapcopy``, the default where it was
  built) against ``pread`` (``WDS_MAPCOPY=pread``), for the ~10 KB samples and for the 1 GB shard's ~100 KB ones;
* first access to an unindexed 1 GB shard (10,000 samples of ~100 KB): time from constructing the
  dataset to the first sample of the middle of the shard, no index anywhere beforehand.

    python benchmarks/bench_indexed.py [--dir /tmp/wds-bench-indexed] [--repeats 3]
"""

from __future__ import annotations

import argparse
import glob
import os
import random
import subprocess
import sys
import time

from wds_core.tar.tarwrite import encode_member, end_of_archive

NSHARDS, PER_SHARD, ACCESSES = 10, 1000, 20000


def write_shard(path, count, size, seed):
    rng = random.Random(seed)
    with open(path + ".tmp", "wb") as out:
        for i in range(count):
            key = f"s{seed:03d}-{i:06d}"
            out.write(encode_member(f"{key}.jpg", rng.randbytes(size)))
            out.write(encode_member(f"{key}.cls", b"%d" % (i % 10)))
            out.write(encode_member(f"{key}.json", b'{"i": %d}' % i))
        out.write(end_of_archive())
    os.replace(path + ".tmp", path)


def make_data(root):
    os.makedirs(root, exist_ok=True)
    for s in range(NSHARDS):
        path = f"{root}/shard-{s:03d}.tar"
        if not os.path.exists(path):
            write_shard(path, PER_SHARD, 10_000, s)
    big = f"{root}/big.tar"
    if not os.path.exists(big):
        write_shard(big, 10_000, 100_000, 999)
    return [f"{root}/shard-{s:03d}.tar" for s in range(NSHARDS)], big


def arguments_and_data(doc):
    """``--dir`` and ``--repeats`` of the benchmarks that use this data set, and its shards."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-bench-indexed")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shards, big = make_data(os.path.abspath(args.dir))
    return args, shards, big


def clean_indexes(root):
    for path in glob.glob(f"{root}/*.idx") + glob.glob(f"{root}/*.json"):
        os.remove(path)


def timed(command, cwd):
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def random_access(dataset, n):
    rng = random.Random(0)
    indexes = [rng.randrange(n) for _ in range(ACCESSES)]
    start = time.perf_counter()
    for i in indexes:
        dataset[i]
    return ACCESSES / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-bench-indexed")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import wids

    import wds_core

    root = os.path.abspath(args.dir)
    shards, big = make_data(root)
    names = [os.path.basename(s) for s in shards]
    widsindex = [sys.executable, "-c", "import sys; from wids.wids_index import main; sys.argv[0]='widsindex'; main()"]
    best: dict[str, float] = {}

    def keep(name, value, higher=True):
        old = best.get(name)
        best[name] = value if old is None else (max if higher else min)(old, value)

    for _ in range(args.repeats):
        clean_indexes(root)
        keep("index: widsindex create (s)", timed([*widsindex, "create", "-o", "wids.json", *names], root), False)
        clean_indexes(root)
        keep("index: wds index create (s)", timed(["wds", "index", "create", "-o", "wds.json", *names], root), False)
        clean_indexes(root)
        md5 = timed(["wds", "index", "create", "--md5", "-o", "wds.json", *names], root)
        keep("index: wds index create --md5 (s)", md5, False)
        subprocess.run([*widsindex, "create", "-o", "wids.json", *names], cwd=root, check=True, capture_output=True)
        theirs = wids.ShardListDataset(f"{root}/wids.json", transformations=[], localname=lambda url: url)
        keep("random access: wids (samples/s)", random_access(theirs, len(theirs)))
        ours = wds_core.ShardListDataset(f"{root}/wds.json")
        keep("random access: wds (samples/s)", random_access(ours, len(ours)))
        for how, switch in (("pread", "pread"), ("mapped copy", "")):  # the compiled copy out of a map, or pread
            os.environ["WDS_MAPCOPY"] = switch
            for size, dataset in (("10 KB", f"{root}/wds.json"), ("100 KB", [big])):
                rate = random_access(wds_core.ShardListDataset(dataset), 10_000 if size == "100 KB" else len(ours))
                keep(f"random access {size}: wds, {how} (samples/s)", rate)
        del os.environ["WDS_MAPCOPY"]
        for path in glob.glob(f"{root}/big.tar.idx"):
            os.remove(path)
        start = time.perf_counter()
        sample = wds_core.ShardListDataset([big])[5000]
        keep("unindexed 1 GB shard: first sample (s)", time.perf_counter() - start, False)
        assert sample["__key__"] == "s999-005000"
    print(f"# {NSHARDS} shards x {PER_SHARD} samples (~10 KB); python {sys.version.split()[0]}, {os.cpu_count()} cores")
    for name, value in best.items():
        print(f"{name:50s} {value:12,.3f}" if value < 100 else f"{name:50s} {value:12,.0f}")
    wids_rate, our_rate = best["random access: wids (samples/s)"], best["random access: wds (samples/s)"]
    print(f"random access: {our_rate / wids_rate:.2f}x wids (target >= 2x)")
    index_ratio = best["index: widsindex create (s)"] / best["index: wds index create (s)"]
    print(f"index building: {index_ratio:.1f}x faster than widsindex (target >= 5x)")


if __name__ == "__main__":
    main()
