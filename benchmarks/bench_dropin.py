"""The same training loader, unchanged, on webdataset 1.0.2 and on wds through the one-line switch.

The loader is written as public CLIP-style training code writes it (``import webdataset as wds``;
a seeded shard shuffle in a ``PipelineStage`` before ``split_by_node``/``split_by_worker``; a reader
built from ``url_opener``/``tar_file_expander`` and a grouping function of its own; a sample
``shuffle``; ``select``, ``decode("pilrgb")``, ``rename``, ``map_dict`` (resize to 64x64 and a
uint8 CHW tensor), ``to_tuple``, ``batched(64)``; ``WebLoader``).  It runs in a subprocess as
``python loader.py`` (the real webdataset) and ``python -m wds_torch.run loader.py`` (wds, no
edit), with its own reader or ``wds.tarfile_to_samples()`` (the library's), and with the images
decoded or left as bytes (the same loader without its decode and map_dict: what the data path
costs besides JPEG decoding).  Also: ``shuffle(1000)`` alone on 200,000 small items, batching (wds's, the
drop-in's and webdataset's) after a shuffle on 80,000 small samples, ``wds_torch.WebLoader`` on torchdata's
``StatefulDataLoader`` against a plain ``DataLoader``, and the import time
of ``wds_torch`` against ``webdataset``.

Data: 16 shards x 500 samples of a 256x256 JPEG (~17 KB) + caption, in /tmp/wds-bench-dropin.

    python benchmarks/bench_dropin.py [--repeats 3] [--workers 0,2] [--stages-only | --webloader-only]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np

import wds_core

ROOT = "/tmp/wds-bench-dropin"
SHARDS, PER_SHARD = 16, 500

LOADER = textwrap.dedent(
    """
    import json, random, sys, time
    import numpy as np
    import torch
    import webdataset as wds
    from webdataset.filters import _shuffle
    from webdataset.tariterators import base_plus_ext, tar_file_expander, url_opener, valid_sample


    class ShardShuffle(wds.PipelineStage):
        def __init__(self, seed):
            self.seed, self.epoch = seed, -1

        def run(self, src):
            self.epoch += 1
            return _shuffle(src, 100, 10, random.Random(self.seed + self.epoch))


    def group(data):
        sample = None
        for item in data:
            if "fname" not in item:  # webdataset 1.x marks the end of a shard with {}
                if valid_sample(sample):
                    yield sample
                sample = None
                continue
            key, ext = base_plus_ext(item["fname"])
            if key is None:
                continue
            if sample is None or key != sample["__key__"]:
                if valid_sample(sample):
                    yield sample
                sample = {"__key__": key, "__url__": item["__url__"]}
            sample[ext.lower()] = item["data"]
        if valid_sample(sample):
            yield sample


    def samples(src):
        return group(tar_file_expander(url_opener(src, handler=wds.warn_and_continue), handler=wds.warn_and_continue))


    def to_tensor(image):
        image = image.resize((64, 64))
        return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


    def main(spec, workers, reader, images):
        decoding = [wds.decode("pilrgb"), wds.rename(image="jpg", text="txt"), wds.map_dict(image=to_tensor)]
        dataset = wds.DataPipeline(
            wds.SimpleShardList(spec),
            ShardShuffle(0),
            wds.split_by_node,
            wds.split_by_worker,
            samples if reader == "pieces" else wds.tarfile_to_samples(),
            wds.shuffle(1000, initial=100),
            wds.select(lambda s: "txt" in s and "jpg" in s),
            *(decoding if images == "decoded" else [wds.rename(image="jpg", text="txt")]),
            wds.to_tuple("image", "text"),
            wds.batched(64, partial=True),
        )
        loader = wds.WebLoader(dataset, batch_size=None, num_workers=workers)
        start, count = time.perf_counter(), 0
        for images, texts in loader:
            count += len(texts)
        print(json.dumps({"samples": count, "seconds": time.perf_counter() - start}))


    if __name__ == "__main__":
        main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
    """
)


def jpeg(seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = np.linspace(0, 255, 256)[None, :, None] * rng.uniform(0.5, 1.0, (1, 1, 3))
    pixels = np.clip(base + rng.normal(0, 6, (256, 256, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=85)
    return out.getvalue()


def make_data() -> str:
    os.makedirs(ROOT, exist_ok=True)
    pattern = f"{ROOT}/pairs-%02d.tar"
    if not os.path.exists(pattern % (SHARDS - 1)):
        images = [jpeg(i) for i in range(64)]
        for s in range(SHARDS):
            with wds_core.TarWriter(pattern % s) as sink:
                for i in range(PER_SHARD):
                    sink.write({"__key__": f"s{s}-{i:05d}", "jpg": images[(s * 7 + i) % 64], "txt": f"caption {i}"})
    with open(f"{ROOT}/loader.py", "w") as stream:
        stream.write(LOADER)
    return f"{ROOT}/pairs-{{00..{SHARDS - 1:02d}}}.tar"


def run_loader(way: str, spec: str, workers: int, reader: str, images: str) -> float:
    prefix = [sys.executable] + (["-m", "wds_torch.run", "--quiet"] if way == "wds" else [])
    command = [*prefix, f"{ROOT}/loader.py", spec, str(workers), reader, images]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["samples"] == SHARDS * PER_SHARD, result
    return result["samples"] / result["seconds"]


def shuffle_rates(repeats: int) -> tuple[float, float]:
    import webdataset

    items = list(range(200_000))

    def rate(make):
        best = 0.0
        for _ in range(repeats):
            start = time.perf_counter()
            count = sum(1 for _ in make())
            best = max(best, count / (time.perf_counter() - start))
        return best

    ours = rate(lambda: wds_core.DataPipeline(lambda: iter(items), wds_core.shuffle(1000), seed=1))
    theirs = rate(lambda: webdataset.DataPipeline(lambda: iter(items), webdataset.shuffle(1000)))
    return ours, theirs


def small_shards() -> str:
    """4 shards x 20,000 samples of a few bytes (``txt``, ``cls``): what a pipeline's stages cost, not reading."""
    root = ROOT + "-small"
    spec = os.path.join(root, "small-{0..3}.tar")
    if not os.path.exists(os.path.join(root, "small-3.tar")):
        os.makedirs(root, exist_ok=True)
        for s in range(4):
            with wds_core.TarWriter(os.path.join(root, f"small-{s}.tar")) as sink:
                for i in range(20_000):
                    sink.write({"__key__": f"s{s}-{i:05d}", "txt": f"text {i}", "cls": i % 10})
    return spec


def batching_rates(repeats: int) -> dict[str, float]:
    """``shuffle(1000).to_tuple("txt", "cls").batched(32)`` on 80,000 small samples: wds's own batching (a batch
    handed on when full), the drop-in's (webdataset's: handed on once the next item has come; its checkpoint
    needs a snapshot of the upstream's state every 1,024 items, or every 64, or every batch) and webdataset's."""
    import webdataset

    from wds_core import dropin
    from wds_core.stages import batching as buffers

    spec = small_shards()

    def rate(module):
        best = 0.0
        for _ in range(repeats):
            dataset = module.WebDataset(spec, shardshuffle=False).shuffle(1000).to_tuple("txt", "cls")
            start = time.perf_counter()
            count = sum(len(batch) for batch in dataset.batched(32, collation_fn=None))
            best = max(best, count / (time.perf_counter() - start))
        return best

    rates = {"wds": rate(wds_core)}
    default = buffers._READ_AHEAD_SNAPSHOT_EVERY
    try:
        for every in (default, 64, 1):
            buffers._READ_AHEAD_SNAPSHOT_EVERY = every
            rates[f"drop-in (a snapshot every {every})"] = rate(dropin)
    finally:
        buffers._READ_AHEAD_SNAPSHOT_EVERY = default
    rates["webdataset"] = rate(webdataset)
    return rates


def webloader_rates(spec: str, repeats: int) -> dict[str, float]:
    """wds_torch's own ``WebLoader`` (2 workers) over a checkpointable pipeline of the JPEG shards, images left
    as bytes, batches of 64 made in the workers: on torchdata's ``StatefulDataLoader`` (what it uses, its
    workers' states taken at every step) and on a plain ``DataLoader`` (what it used before issue 45)."""
    import wds_torch
    from wds_torch import datasets

    def rate(**kw: Any) -> float:
        best = 0.0
        for _ in range(repeats):
            dataset = wds_torch.WebDataset(spec, shardshuffle=True, seed=0).shuffle(1000).to_tuple("jpg", "txt")
            loader = wds_torch.WebLoader(dataset.batched(64), batch_size=None, num_workers=2, **kw)
            start = time.perf_counter()
            count = sum(len(texts) for _, texts in loader)
            best = max(best, count / (time.perf_counter() - start))
        return best

    stateful = datasets._Stateful
    rates = {
        "StatefulDataLoader, workers' states every 16 steps (WebLoader's default)": rate(),
        "StatefulDataLoader, workers' states every step": rate(snapshot_every_n_steps=1),
    }
    try:
        datasets._Stateful = None
        rates["plain DataLoader"] = rate()
    finally:
        datasets._Stateful = stateful
    return rates


def import_seconds(module: str) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    times = [
        float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout) for _ in range(3)
    ]
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--stages-only", action="store_true", help="only the shuffle and batching figures")
    parser.add_argument("--webloader-only", action="store_true", help="only wds_torch.WebLoader's figures")
    args = parser.parse_args()
    if args.webloader_only:
        for name, rate in webloader_rates(make_data(), args.repeats).items():
            print(f"wds_torch.WebLoader, 2 workers, bytes, on a {name}: {rate:,.0f} samples/s")
        return
    for name, rate in batching_rates(args.repeats).items():
        print(f"shuffle(1000).to_tuple().batched(32), 80,000 small samples, {name}: {rate:,.0f} samples/s")
    ours, theirs = shuffle_rates(args.repeats)
    print(f"shuffle(1000) on 200,000 ints: wds {ours:,.0f} items/s  webdataset {theirs:,.0f}  {ours / theirs:.2f}x")
    if args.stages_only:
        return
    spec = make_data()
    print(f"{SHARDS * PER_SHARD} samples; best of {args.repeats}")
    for name, rate in webloader_rates(spec, args.repeats).items():
        print(f"wds_torch.WebLoader, 2 workers, bytes, on a {name}: {rate:,.0f} samples/s")
    for images in ("decoded", "bytes"):
        for workers in [int(w) for w in args.workers.split(",")]:
            for reader in ("pieces", "library"):
                rates = {
                    way: max(run_loader(way, spec, workers, reader, images) for _ in range(args.repeats))
                    for way in ("webdataset", "wds")
                }
                ratio = rates["wds"] / rates["webdataset"]
                print(
                    f"loader, images {images:7s}, {workers} workers, {reader:7s} reader: "
                    f"wds {rates['wds']:8,.0f} samples/s  webdataset {rates['webdataset']:8,.0f}  {ratio:.2f}x"
                )
    print(f"import: wds_torch {import_seconds('wds_torch'):.2f} s, webdataset {import_seconds('webdataset'):.2f} s")


if __name__ == "__main__":
    main()
