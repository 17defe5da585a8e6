"""``wds demo``: write a small generated dataset as shards and stream it back.

Checks that every sample arrives exactly once through shard shuffle, sample
shuffle and batching, and prints the throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

from ..fluid import WebDataset
from ..tario import encode_member, end_of_archive

__all__ = ["add_parser", "run", "write_demo_shards"]


def write_demo_shards(directory: str, nshards: int, per_shard: int, seed: int = 0) -> list[str]:
    """Write ``nshards`` shards of small classification samples; return their paths."""
    rng = random.Random(seed)
    paths = []
    for shard in range(nshards):
        path = os.path.join(directory, f"demo-{shard:06d}.tar")
        with open(path, "wb") as out:
            for i in range(per_shard):
                key = f"sample{shard * per_shard + i:08d}"
                label = rng.randrange(10)
                out.write(encode_member(f"{key}.cls", str(label).encode()))
                out.write(encode_member(f"{key}.json", json.dumps({"label": label, "shard": shard}).encode()))
                out.write(encode_member(f"{key}.txt", f"a sample of class {label}".encode()))
            out.write(end_of_archive())
        paths.append(path)
    return paths


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="wds-demo-") as directory:
        paths = write_demo_shards(directory, args.shards, args.samples_per_shard)
        spec = os.path.join(directory, f"demo-{{{0:06d}..{args.shards - 1:06d}}}.tar")
        total_bytes = sum(os.path.getsize(p) for p in paths)
        ds = WebDataset(spec, shardshuffle=True, seed=args.seed).shuffle(1000).to_tuple("__key__", "cls", "json")
        ds = ds.batched(args.batch_size)
        start = time.perf_counter()
        keys = []
        for batch_keys, _labels, _meta in ds:
            keys.extend(batch_keys)
        elapsed = time.perf_counter() - start
    expected = args.shards * args.samples_per_shard
    if len(keys) != expected or len(set(keys)) != expected:
        print(f"FAILED: expected {expected} distinct samples, got {len(keys)} ({len(set(keys))} distinct)")
        return 1
    print(f"wrote {args.shards} shards ({total_bytes / 1e6:.1f} MB), read back all {expected} samples exactly once")
    print(f"{expected / elapsed:,.0f} samples/s, {total_bytes / elapsed / 1e6:,.1f} MB/s")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("demo", help="write a generated dataset and stream it back")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples-per-shard", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(run=run)
