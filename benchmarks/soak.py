"""Soak: many tiny epochs with persistent workers, a shard cache under LRU pressure and checkpoints.

Each epoch reads 8 small shards through ``WebDataset(..., cache_dir=..., cache_local=True)`` with a
cache that holds about 3 of them (every epoch evicts), through the core ``Loader`` (2 persistent
workers) and, when PyTorch is installed, a ``DataLoader`` (2 persistent workers, wds_torch); every
10 epochs the loader's state is taken and a new loader restored from it.  After each epoch it
records this process's open file descriptors, its child processes, its and its children's ``wds_*``
entries of ``/dev/shm`` with the ``psm_*`` ones and its resident memory, and reports each one's least-squares slope per
epoch after a warm-up (the first 10%).

    python benchmarks/soak.py [--epochs 200] [--loaders core torch] [--json]

``--breaks`` soaks remote reading with early breaks instead (issue 43): shards on a local HTTP server shaped like
an object store (40 ms, 40 MB/s a connection; ``--shards`` of ``--shard-mb`` MB, 80 KB samples), read by 2
persistent workers, each epoch stopped halfway (``for batch in loader: ... break``, the common way to cut the
epochs of a resampled dataset).  It records, after each epoch, the workers' resident memory, threads and
descriptors (their sums) with this process's, and their slopes after the warm-up.

    python benchmarks/soak.py --breaks [--epochs 30] [--loaders core torch] [--shards 16] [--shard-mb 16] [--json]

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


def _process(pid: int) -> tuple[float, int, int]:
    """Resident MB, threads and open descriptors of process ``pid``."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"]), len(os.listdir(f"/proc/{pid}/fd"))


def measure_workers(others: set[int]) -> dict[str, float]:
    """:func:`measure`, with the resident MB, threads and descriptors of this process's children (but ``others``)
    together."""
    row = measure()
    workers = [_process(pid) for pid in _children() if pid not in others]
    row["workers_rss_mb"] = sum(rss for rss, _, _ in workers)
    row["workers_threads"] = sum(threads for _, threads, _ in workers)
    row["workers_fds"] = sum(fds for _, _, fds in workers)
    return row


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


def _remote_shards(root: str, nshards: int, shard_mb: float) -> int:
    """Shards of 80 KB samples (and a label) in ``root``, ``shard_mb`` MB each: the samples a shard has."""
    import numpy as np

    from wds_core.tar.tarwrite import encode_member, end_of_archive

    per_shard = max(1, int(shard_mb * 1e6 // 81_920))
    for s in range(nshards):
        rng = np.random.default_rng(s)
        with open(f"{root}/shard-{s:03d}.tar", "wb") as out:
            for i in range(per_shard):
                out.write(encode_member(f"s{s}-{i:05d}.bin", rng.bytes(80_000)))
                out.write(encode_member(f"s{s}-{i:05d}.cls", b"%d" % i))
            out.write(end_of_archive())
    return per_shard


def soak_breaks(epochs: int = 30, flavour: str = "core", nshards: int = 16, shard_mb: float = 16) -> dict[str, object]:
    """Remote reading with an early break every epoch (see the module doc): the per-epoch measurements (workers
    included) and each one's slope after the warm-up."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.servers import Shape, http_server_process

    with tempfile.TemporaryDirectory() as root:
        per_shard = _remote_shards(root, nshards, shard_mb)
        half = nshards * per_shard // 2
        with http_server_process(root, Shape(latency=0.04, bandwidth=40e6)) as url:
            server = set(_children())  # not a worker
            import wds_core

            module = wds_core
            if flavour == "torch":
                import wds_torch as module  # type: ignore[no-redef]
            spec = f"{url}/shard-{{000..{nshards - 1:03d}}}.tar"
            dataset = module.WebDataset(spec, shardshuffle=True, seed=1).to_tuple("bin", "cls")
            if flavour == "torch":
                import torch

                loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
            else:
                loader = wds_core.Loader(dataset, num_workers=2, persistent_workers=True)
            rows, samples = [], 0
            for _ in range(epochs):
                for count, _ in enumerate(loader, 1):
                    if count == half:
                        break
                samples += count
                rows.append(measure_workers(server))
            del loader
    warm = max(2, epochs // 5)
    slopes = {key: slope([row[key] for row in rows[warm:]]) for key in rows[0]}
    return {"rows": rows, "slopes": slopes, "samples": samples, "warm": warm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--loaders", nargs="+", default=["core", "torch"])
    parser.add_argument("--json", action="store_true", help="one JSON line per loader instead of the tables")
    parser.add_argument("--breaks", action="store_true", help="remote reading, each epoch stopped halfway")
    parser.add_argument("--shards", type=int, default=16, help="shards on the HTTP server (--breaks)")
    parser.add_argument("--shard-mb", type=float, default=16, help="MB a shard (--breaks)")
    args = parser.parse_args()
    for flavour in args.loaders:
        if flavour == "torch":
            try:  # the DataLoader (and for the plain soak, torchdata's StatefulDataLoader)
                import torch  # noqa: F401

                if not args.breaks:
                    import torchdata  # noqa: F401
            except ImportError:
                print("torch: not installed, skipped", file=sys.stderr)
                continue
        start = time.perf_counter()
        if args.breaks:
            result = soak_breaks(args.epochs, flavour, args.shards, args.shard_mb)
            keys, what, warm = ("workers_rss_mb", "workers_threads", "workers_fds", "rss_mb", "fds"), "", result["warm"]
        else:
            result = soak(args.epochs, flavour)
            keys, warm = ("fds", "children", "shm", "rss_mb"), max(1, args.epochs // 10)
            what = f"; cache entries at the end: {result['cache_files']}"
        if args.json:
            print(json.dumps({"flavour": flavour, **result}))
            continue
        rows, slopes = result["rows"], result["slopes"]
        kind = ", an early break every epoch" if args.breaks else ""
        print(f"\n{flavour}{kind}: {args.epochs} epochs, {result['samples']:,} samples in "
              f"{time.perf_counter() - start:.0f} s{what}")  # fmt: skip
        print("| measure | after warm-up | at the end | slope per epoch |\n|---|---|---|---|")
        for key in keys:
            print(f"| {key} | {rows[warm][key]:,.1f} | {rows[-1][key]:,.1f} | {slopes[key]:+.4f} |")  # type: ignore[index]


if __name__ == "__main__":
    main()
