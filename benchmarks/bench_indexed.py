"""Indexed random access against wids 0.1.11, and checkpoints inside a 1 GB shard, in the same run.

Sections (``--rows``, all by default), each one table of benchmarks/README.md; the data is
harness.indexed_shards (10 local shards x 1,000 samples of a ~10 KB ``jpg``, a ``cls`` and a ``json``, and a
1 GB shard of 10,000 samples of ~100 KB), made once under ``--data``:

* ``indexed``: raw samples/s for uniformly random indexes over the 10 shards, memory-mapped by both, wids with
  ``transformations=[]`` (its shards opened in place); index building for them, ``widsindex create`` against ``wds
  index create`` (sidecar indexes included, no md5) and ``wds index create --md5`` (what widsindex always does),
  each a subprocess; the local reads behind random access, the compiled copy out of a map (``mapcopy``, the
  default where it was built) against ``pread`` (``WDS_MAPCOPY=pread``) for the ~10 KB samples and the 1 GB
  shard's ~100 KB ones; first access to the unindexed 1 GB shard (constructing the dataset to the first sample of
  the middle of the shard);
* ``resume``: ``WebDataset(big).shuffle(1000).decode(only="cls")``: ``state_dict()`` + ``json.dumps`` after each
  of 2,000 samples; restoring a state taken at sample 5,000 (to the first sample; against reading up to it); and
  elastic: the shard read as a balanced epoch (``balanced="pad"``) by 4 readers that stop after 1,000 samples
  each, ``merge_states`` of their 4 states, each of 2 new readers to its first sample of the rest of the epoch
  (reading the shard's offset index again, as a restarted process does).

    python benchmarks/bench_indexed.py [--rows indexed,resume] [--repeats 3] [--data /tmp/wds-bench]
"""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess
import sys
import time

import harness

import wds_core
import wds_core.dist
import wds_core.sources.balanced

ACCESSES = 20000


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


def indexed(args):
    import wids

    shards, big = harness.indexed_shards(args.data)
    root = os.path.dirname(big)
    names = [os.path.basename(s) for s in shards]
    widsindex = [sys.executable, "-c", "import sys; from wids.wids_index import main; sys.argv[0]='widsindex'; main()"]
    best: dict[str, float] = {}

    def keep(name, value, higher=True):
        old = best.get(name)
        best[name] = value if old is None else (max if higher else min)(old, value)

    for _ in range(harness.repeats(args, 3)):
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
    print(f"# {harness.INDEXED_SHARDS} shards x {harness.INDEXED_PER_SHARD} samples (~10 KB)")
    for name, value in best.items():
        print(f"{name:50s} {value:12,.3f}" if value < 100 else f"{name:50s} {value:12,.0f}")
    wids_rate, our_rate = best["random access: wids (samples/s)"], best["random access: wds (samples/s)"]
    print(f"random access: {our_rate / wids_rate:.2f}x wids (target >= 2x)")
    index_ratio = best["index: widsindex create (s)"] / best["index: wds index create (s)"]
    print(f"index building: {index_ratio:.1f}x faster than widsindex (target >= 5x)")


def _pipeline(path):
    return wds_core.WebDataset(path, seed=1).shuffle(1000).decode(only="cls")


def resume(args):
    _, big = harness.indexed_shards(args.data)
    ds = _pipeline(big)
    it = iter(ds)
    spent, sizes = 0.0, []
    for _ in range(2000):
        next(it)
        start = time.perf_counter()
        text = json.dumps(ds.state_dict())
        spent += time.perf_counter() - start
        sizes.append(len(text))
    print(f"state_dict() + json.dumps: {spent / 2000 * 1e3:.3f} ms per call, state {max(sizes):,} bytes at most")
    for _ in range(3000):
        next(it)
    state = json.loads(json.dumps(ds.state_dict()))
    expected = next(it)["__key__"]
    start = time.perf_counter()
    fresh = _pipeline(big)
    fresh.load_state_dict(state)
    first = next(iter(fresh))
    restore = time.perf_counter() - start
    assert first["__key__"] == expected, (first["__key__"], expected)
    print(f"restore at sample 5,000 of the 1 GB shard, to the first sample: {restore:.3f} s")
    start = time.perf_counter()
    again = iter(_pipeline(big))
    for _ in range(5001):
        next(again)
    print(f"reading up to sample 5,000 instead: {time.perf_counter() - start:.3f} s")
    elastic(big)


def balanced(path):
    return wds_core.WebDataset.balanced(path, seed=1, how="pad").shuffle(1000).decode(only="cls")


def as_reader(reader, readers):
    wds_core.dist.set_node_info_provider(lambda: (reader, readers))
    wds_core.dist.set_worker_info_provider(lambda: (0, 1))


def elastic(big):
    states, spent = [], 0.0
    for reader in range(4):
        as_reader(reader, 4)
        ds = balanced(big)
        it = iter(ds)
        for _ in range(1000):
            next(it)
            start = time.perf_counter()
            text = json.dumps(ds.state_dict())
            spent += time.perf_counter() - start
        states.append(json.loads(text))
    print(f"elastic: state_dict() + json.dumps with the position: {spent / 4000 * 1e3:.3f} ms per call")
    start = time.perf_counter()
    merged = wds_core.merge_states(states)
    print(f"elastic: merge_states() of 4 readers: {(time.perf_counter() - start) * 1e3:.2f} ms")
    for reader in range(2):
        as_reader(reader, 2)
        wds_core.sources.balanced._INDEXES.clear()  # as in a restarted process: the shard's index is read again
        start = time.perf_counter()
        fresh = balanced(big)
        fresh.load_state_dict(merged)
        next(iter(fresh))
        print(f"elastic: reader {reader} of 2, to its first sample of the rest: {time.perf_counter() - start:.3f} s")
    wds_core.dist.set_node_info_provider(None)
    wds_core.dist.set_worker_info_provider(None)


if __name__ == "__main__":
    harness.run(__doc__, {"indexed": indexed, "resume": resume})
