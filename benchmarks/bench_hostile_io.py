"""Hostile servers and rough endings (issue 43), wds against webdataset 1.x in the same run.

* ``slow drip``: a local HTTP server answers a shard's first request and sends its body (or, ``drip headers``,
  its status line and headers too) one byte every 0.2 s.  wds reads with ``RetryPolicy(attempts=3,
  budget=3)``; webdataset reads the URL with its ``curl`` pipe.  Each reader runs in a child process, stopped
  after ``--guard`` seconds: the seconds until it gave up (or the guard), and what it said.
* ``redirect``: the shard's URL answers 302 to the same files on another host (``localhost`` instead of
  ``127.0.0.1``, another port), the reader given an ``Authorization`` header (wds: ``storage_options``;
  webdataset: ``pipe:curl -s -L -H ...``): whether the other host received it, and whether the samples came.
* ``teardown``: ``--rounds`` DataLoaders over decoded batches (``--workers``, 4, persistent; ``--batch``
  images of 320x240 a batch, 32) dropped after 3 batches: how many worker processes died of a signal (their
  exit code), and what ``/dev/shm`` kept.

    python benchmarks/bench_hostile_io.py [--dir /tmp/wds-hostile-io] [--only slow,redirect,teardown]
        [--rounds 20] [--guard 30]

Early breaks over a remote server (memory, threads and descriptors per epoch) are ``benchmarks/soak.py --breaks``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READERS = ["wds", "webdataset"]
sys.path.insert(0, REPO)

READ = r"""
import json, sys, time
which, url, header = sys.argv[1], sys.argv[2], sys.argv[3]
started, keys = time.monotonic(), []
try:
    if which == "wds":
        import wds_core as wds
        from wds_core.io.remote import RetryPolicy
        options = {"headers": {"Authorization": header}} if header else {}
        dataset = wds.WebDataset(url, storage_options=options, retry=RetryPolicy(attempts=3, budget=3.0))
    else:
        import webdataset as wds
        command = f"pipe:curl -s -S -f -L {'-H ' + repr('Authorization: ' + header) if header else ''} {url}"
        dataset = wds.WebDataset(command, shardshuffle=False)
    for sample in dataset:
        keys.append(sample["__key__"])
    said = "read"
except BaseException as exn:
    said = f"{type(exn).__name__}: {str(exn)[:160]}"
print(json.dumps({"seconds": time.monotonic() - started, "samples": len(keys), "said": said}))
"""


def read(which: str, url: str, guard: float, header: str = "") -> dict:
    """One reader in a child process, stopped after ``guard`` seconds."""
    try:
        done = subprocess.run([sys.executable, "-c", READ, which, url, header], capture_output=True, text=True,
                              timeout=guard, cwd=REPO)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"seconds": guard, "samples": 0, "said": f"still reading after {guard:g} s (stopped)"}
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {"seconds": 0, "samples": 0, "said": done.stderr[-200:]}


def shard(root: str, name: str = "shard-000.tar", samples: int = 40) -> str:
    from tests.conftest import make_samples, write_shard

    os.makedirs(root, exist_ok=True)
    return write_shard(os.path.join(root, name), make_samples("k", samples))


def slow_drip(root: str, guard: float) -> list[tuple[str, str, dict]]:
    from tests.servers import HttpServer

    shard(root)
    server = HttpServer(root)
    rows = []
    try:
        for case, head in (("slow drip", False), ("drip headers", True)):
            for which in READERS:
                server.faults.clear()
                server.faults.drip(50, 0.2, head=head)
                rows.append((case, which, read(which, server.url + "/shard-000.tar", guard)))
    finally:
        server.stop()
    return rows


def redirect(root: str, guard: float) -> list[tuple[str, str, dict]]:
    from tests.servers import HttpServer

    shard(os.path.join(root, "front"))
    shard(os.path.join(root, "other"))
    front, other = HttpServer(os.path.join(root, "front")), HttpServer(os.path.join(root, "other"))
    front.redirect_to = f"http://localhost:{other.port}"
    rows = []
    try:
        for which in READERS:
            other.headers.clear()
            result = read(which, front.url + "/moved/shard-000.tar", guard, "Bearer TOPSECRET")
            result["other host got the credential"] = any("Authorization" in seen for seen in other.headers)
            rows.append(("redirect", which, result))
    finally:
        front.stop()
        other.stop()
    return rows


TEARDOWN = r"""
import gc, io, json, os, sys
import numpy as np, torch
from PIL import Image
which, root, rounds, batch, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if which == "wds":
    import wds_torch as wds
else:
    import webdataset as wds
spec = os.path.join(root, "s-{0..3}.tar")
if not os.path.exists(os.path.join(root, "s-3.tar")):
    rng = np.random.default_rng(0)
    for s in range(4):
        with wds.TarWriter(os.path.join(root, f"s-{s}.tar")) as sink:
            for i in range(200):
                image = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(image, format="JPEG")
                sink.write({"__key__": f"k{s}-{i}", "jpg": image.getvalue(), "cls": i % 10})
died = 0
for _ in range(rounds):
    dataset = wds.WebDataset(spec, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls").batched(batch)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=True)
    items = iter(loader)
    for _ in range(3):
        next(items)
    procs = list(items._workers)
    del items, loader
    gc.collect()
    for worker in procs:
        worker.join(10)
        died += worker.exitcode is not None and worker.exitcode < 0
shm = [name for name in os.listdir("/dev/shm") if name.startswith("wds_")]
print(json.dumps({"rounds": rounds, "workers died of a signal": died, "/dev/shm left": len(shm)}))
"""


def teardown(root: str, rounds: int, batch: int, workers: int) -> list[tuple[str, str, dict]]:
    os.makedirs(root, exist_ok=True)
    rows = []
    for which in READERS:
        command = [sys.executable, "-c", TEARDOWN, which, root, str(rounds), str(batch), str(workers)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {"failed": done.stderr[-300:]}
        result["segfault messages"] = done.stderr.lower().count("segmentation fault")
        rows.append(("teardown", which, result))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-hostile-io")
    parser.add_argument("--only", default="slow,redirect,teardown")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32, help="images a batch (teardown)")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers (teardown)")
    parser.add_argument("--readers", default="wds,webdataset", help="which readers run")
    parser.add_argument("--guard", type=float, default=30.0)
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    READERS[:] = args.readers.split(",")
    rows: list[tuple[str, str, dict]] = []
    started = time.monotonic()
    if "slow" in wanted:
        rows += slow_drip(os.path.join(args.dir, "slow"), args.guard)
    if "redirect" in wanted:
        rows += redirect(os.path.join(args.dir, "redirect"), args.guard)
    if "teardown" in wanted:
        rows += teardown(os.path.join(args.dir, "teardown"), args.rounds, args.batch, args.workers)
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.monotonic() - started:.0f} s in all")
    print("| case | reader | result |\n|---|---|---|")
    for case, which, result in rows:
        if "seconds" in result:
            result = {**result, "seconds": round(result["seconds"], 1)}
        print(f"| {case} | {which} | {json.dumps(result)} |")


if __name__ == "__main__":
    main()
