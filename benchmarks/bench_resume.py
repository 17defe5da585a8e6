"""Checkpoint cost and restore time inside a 1 GB local shard.

The shard is bench_indexed.py's ``big.tar`` (10,000 samples of ~100 KB; written when missing).
The pipeline is ``WebDataset(shard).shuffle(1000).decode(only="cls")``.

* state_dict(): mean time per call, taken after each of 2,000 samples (JSON-encoded too);
* restore: a fresh pipeline, ``load_state_dict`` of a state taken at sample 5,000, then the time
  to its first sample (the reader seeks to the saved byte offset and refills the shuffle buffer);
* for comparison, the time for a fresh pipeline to reach sample 5,000 by reading;
* elastic: the same shard read as a balanced epoch (``balanced="pad"``) by 4 readers that stop
  after 1,000 samples each; state_dict() with its position summary, ``merge_states`` of the 4
  states, and the time for each of 2 new readers to its first sample of the rest of the epoch
  (including reading the shard's offset index again, as a restarted process does).

    python benchmarks/bench_resume.py [--dir /tmp/wds-bench-indexed]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_indexed  # noqa: E402

import wds_core  # noqa: E402
import wds_core.dist  # noqa: E402
import wds_core.sources.balanced  # noqa: E402


def pipeline(path):
    return wds_core.WebDataset(path, shardshuffle=False, seed=1).shuffle(1000).decode(only="cls")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-bench-indexed")
    args = parser.parse_args()
    _, big = bench_indexed.make_data(os.path.abspath(args.dir))
    ds = pipeline(big)
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
    fresh = pipeline(big)
    fresh.load_state_dict(state)
    first = next(iter(fresh))
    restore = time.perf_counter() - start
    assert first["__key__"] == expected, (first["__key__"], expected)
    print(f"restore at sample 5,000 of the 1 GB shard, to the first sample: {restore:.3f} s")
    start = time.perf_counter()
    again = iter(pipeline(big))
    for _ in range(5001):
        next(again)
    print(f"reading up to sample 5,000 instead: {time.perf_counter() - start:.3f} s")
    elastic(big)


def balanced(path):
    return wds_core.WebDataset(path, shardshuffle=False, seed=1, balanced="pad").shuffle(1000).decode(only="cls")


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
    main()
