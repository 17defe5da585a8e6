"""Soak: many tiny epochs with persistent workers, a shard cache under LRU pressure and checkpoints.

Each epoch reads 8 small shards through ``WebDataset(..., cache_dir=..., cache_local=True)`` with a
cache that holds about 3 of them (every epoch evicts), through the core ``Loader`` (2 persistent
workers) and, when PyTorch is installed, a ``DataLoader`` (2 persistent workers, wds_torch); every
10 epochs the loader's state is taken and a new loader restored from it.  After each epoch it
records this process's open file descriptors, its child processes, its and its children's ``wds_*``
entries of ``/dev/shm`` with the ``psm_*`` ones and its resident memory, and reports each one's least-squares slope per
epoch after a warm-up (the first 10%).

    python benchmarks/soak.py [--epochs 200] [--loaders core torch] [--json]

``--json`` prints each loader's result (rows, slopes, samples, cache entries) as one JSON line instead of the
tables: tests/core/test_soak.py runs the soak that way, in a process of its own, so that what earlier tests left
open in the test process (kept-alive connections to their servers) is not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time


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
    return (
        module.WebDataset(spec, shardshuffle=True, seed=1, cache_dir=cache, cache_size=3 * shard_bytes,
                          cache_local=True)
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


def soak(epochs: int = 200, flavour: str = "core", every: int = 10) -> dict[str, object]:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--loaders", nargs="+", default=["core", "torch"])
    parser.add_argument("--json", action="store_true", help="one JSON line per loader instead of the tables")
    args = parser.parse_args()
    for flavour in args.loaders:
        if flavour == "torch":
            try:
                import torchdata  # noqa: F401
            except ImportError:
                print("torch: not installed, skipped", file=sys.stderr)
                continue
        start = time.perf_counter()
        result = soak(args.epochs, flavour)
        if args.json:
            print(json.dumps({"flavour": flavour, **result}))
            continue
        rows, slopes = result["rows"], result["slopes"]
        first, last = rows[max(1, args.epochs // 10)], rows[-1]  # type: ignore[index]
        print(f"\n{flavour}: {args.epochs} epochs, {result['samples']:,} samples in "
              f"{time.perf_counter() - start:.0f} s; cache entries at the end: {result['cache_files']}")  # fmt: skip
        print("| measure | after warm-up | at the end | slope per epoch |\n|---|---|---|---|")
        for key in ("fds", "children", "shm", "rss_mb"):
            print(f"| {key} | {first[key]:,.1f} | {last[key]:,.1f} | {slopes[key]:+.4f} |")  # type: ignore[index]


if __name__ == "__main__":
    main()
