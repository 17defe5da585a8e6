"""What a DataLoader's hand-over of batches from its workers to the main process costs, with no reading at all.

Each of two workers makes batches of 64 samples of 64 KB from memory (a fresh copy of one random payload per
sample, as a reader hands out new bytes) and the main process takes them: the ceiling a DataLoader puts on
whatever is read in its workers, on this machine.  Three ways, each in a fresh process, best of ``--repeats``:

* ``bytes, pipe``: a list of (bytes, label) per batch, pickled through the worker's queue (PyTorch's way);
* ``bytes, slot``: the same batches through wds_torch's reused shared-memory slots (what ``wds_torch``
  datasets do inside a DataLoader worker: ``wds_torch.transfer``);
* ``uint8 tensor``: one (64, 65536) tensor per batch, PyTorch's shared-memory path for tensors (a new segment
  per batch);
* ``uint8 tensor, slot``: the same tensors through wds_torch's slots.

    python benchmarks/bench_handover.py [--mb 268] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = """
import json, os, sys, time
sys.path.insert(0, {repo!r})
import torch
from wds_torch import transfer
how, batches = {how!r}, {batches}
class Batches(torch.utils.data.IterableDataset):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        payload = os.urandom(64 << 10)
        def made():
            for i in range(info.id, batches, info.num_workers):
                if how.startswith("uint8 tensor"):
                    yield (torch.frombuffer(bytearray(payload * 64), dtype=torch.uint8).view(64, -1), i)
                else:
                    yield [(bytes(bytearray(payload)), i) for _ in range(64)]
        return transfer.wrap_batches(made()) if how.endswith("slot") else made()
started = time.perf_counter()
cpu = sum(os.times()[:2])
loader = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=2)
nbytes = 0
for batch in loader:
    nbytes += batch[0].numel() if how.startswith("uint8 tensor") else sum(len(data) for data, _ in batch)
print(json.dumps({{"bytes": nbytes, "seconds": time.perf_counter() - started,
                  "cpu": sum(os.times()[:2]) - cpu}}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=268, help="megabytes handed over per run")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    batches = max(2, args.mb * 1_000_000 // (64 << 16))
    print(
        f"# {batches} batches of 64 x 64 KB from 2 DataLoader workers; {os.cpu_count()} cores; best of {args.repeats}"
    )
    print("| batches as | MB/s | main process CPU s |")
    print("|---|---|---|")
    for how in ("bytes, pipe", "bytes, slot", "uint8 tensor", "uint8 tensor, slot"):
        runs = []
        for _ in range(args.repeats):
            code = RUN.format(repo=REPO, how=how, batches=batches)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        best = min(runs, key=lambda run: run["seconds"])
        assert best["bytes"] == batches * 64 * (64 << 10), best
        print(f"| {how} | {best['bytes'] / best['seconds'] / 1e6:.0f} | {best['cpu']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
