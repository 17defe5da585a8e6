"""Raw iteration speed of wds_core.WebDataset against webdataset 1.x, in the same run.

Generates three synthetic datasets (small samples, ~30 KB JPEG image samples,
1 MiB members), warms the page cache, and reports the best of N repeats for
each reader (the readers take turns within each round: benchmarks/harness.py), plus `cat` for the large shards
and peak RSS while streaming them.

    python benchmarks/bench_read.py [--repeats 3] [--data /tmp/wds-bench] [--json PATH]
"""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
import warnings

import numpy as np
from harness import arguments, report, turns
from PIL import Image

from wds_core.io.urls import expand_urls
from wds_core.tar.tarwrite import encode_member, end_of_archive


def write(path, samples):
    with open(path, "wb") as out:
        for key, fields in samples:
            for field, data in fields.items():
                out.write(encode_member(f"{key}.{field}", data))
        out.write(end_of_archive())


def make_datasets(root):
    rng = random.Random(0)
    os.makedirs(root, exist_ok=True)
    specs = {}
    if not os.path.exists(f"{root}/small-0003.tar"):
        for s in range(4):
            samples = [
                (f"s{s}_{i:07d}", {e: os.urandom(rng.randint(10, 150)) for e in ("txt", "cls", "json")})
                for i in range(50_000)
            ]
            write(f"{root}/small-{s:04d}.tar", samples)
    specs["small"] = (f"{root}/small-{{0000..0003}}.tar", 200_000)
    if not os.path.exists(f"{root}/image-0003.tar"):
        noise = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)
        jpegs = []
        for q in range(8):
            buf = io.BytesIO()
            Image.fromarray(np.roll(noise, q * 7, axis=0)).save(buf, "JPEG", quality=60)
            jpegs.append(buf.getvalue())
        for s in range(4):
            samples = [
                (f"i{s}_{i:06d}", {"jpg": jpegs[i % 8], "cls": b"%d" % (i % 10), "json": b'{"w": 256, "h": 256}'})
                for i in range(5_000)
            ]
            write(f"{root}/image-{s:04d}.tar", samples)
    specs["image"] = (f"{root}/image-{{0000..0003}}.tar", 20_000)
    if not os.path.exists(f"{root}/large-0003.tar"):
        blob = os.urandom(1 << 20)
        for s in range(4):
            write(f"{root}/large-{s:04d}.tar", [(f"l{s}_{i:05d}", {"bin": blob}) for i in range(250)])
    specs["large"] = (f"{root}/large-{{0000..0003}}.tar", 1_000)
    return specs


def read_ours(spec):
    import wds_core

    return sum(1 for _ in wds_core.WebDataset(spec))


def read_theirs(spec):
    import webdataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum(1 for _ in webdataset.WebDataset(spec, shardshuffle=False))


RSS_CODE = """
import resource, sys
import wds_core
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = sum(1 for _ in wds_core.WebDataset(sys.argv[1]))
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, n)
"""


def main():
    parser = arguments(__doc__)
    args = parser.parse_args()
    specs = make_datasets(args.data)
    rows = []
    for name, (spec, expected) in specs.items():
        files = expand_urls(spec)
        nbytes = sum(os.path.getsize(f) for f in files)
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        systems = {"wds": lambda spec=spec: read_ours(spec), "webdataset": lambda spec=spec: read_theirs(spec)}
        if name == "large":  # cat's rate, in samples/s of the same bytes
            systems["cat"] = lambda files=files, n=expected: (
                subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True) and n
            )
        rates = turns(systems, args.repeats)
        ours, theirs = rates["wds"], rates["webdataset"]
        row = {
            "dataset": name,
            "samples": expected,
            "MB": round(nbytes / 1e6),
            "wds samples/s (best, median)": f"{ours.best:,.0f}, {ours.median:,.0f}",
            "webdataset samples/s": f"{theirs.best:,.0f}, {theirs.median:,.0f}",
            "speedup": f"**{ours.best / theirs.best:.1f}×**",
            "wds GB/s": round(nbytes / expected * ours.best / 1e9, 2),
        }
        if name == "large":
            row["of cat"] = f"{ours.best / rates['cat'].best:.0%}"
            out = subprocess.run([sys.executable, "-c", RSS_CODE, spec], capture_output=True, text=True, check=True)
            base, peak, _ = map(int, out.stdout.split())
            row["peak RSS above import (MB)"] = round((peak - base) / 1024, 1)
        rows.append(row)
    report(rows, args)
    return rows


if __name__ == "__main__":
    main()
