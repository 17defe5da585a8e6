"""``wds demo``: write a small image-classification dataset as shards and stream it back.

The images are real JPEGs (coloured patterns, one hue per class), written with
:class:`~wds_core.writer.ShardWriter`; they come back through shard shuffle,
sample shuffle, ``decode("rgb8")``, ``to_tuple`` and batching.  The demo checks
that every sample arrives exactly once with its label and image shape, and
prints the throughput.
"""

from __future__ import annotations

import argparse
import colorsys
import os
import time

import numpy as np

from ..dataset import WebDataset
from ..io import files
from ..writer import ShardWriter

__all__ = ["add_parser", "make_image", "run", "write_demo_shards"]

CLASSES = 10


def make_image(label: int, index: int, size: int) -> np.ndarray:
    """A ``size`` x ``size`` RGB image: stripes in the class's hue, shifted per sample."""
    red, green, blue = colorsys.hsv_to_rgb(label / CLASSES, 0.8, 0.9)
    y, x = np.mgrid[0:size, 0:size]
    stripes = 0.5 + 0.5 * np.sin((x + 2 * y + index) * (0.1 + 0.02 * label))
    colour = np.array([red, green, blue], dtype=np.float32) * 255.0
    return (stripes[:, :, None] * colour).astype(np.uint8)


def write_demo_shards(directory: str, nshards: int, per_shard: int, size: int = 64, seed: int = 0) -> list[str]:
    """Write ``nshards`` shards of ``per_shard`` JPEG samples each; return their paths."""
    rng = np.random.default_rng(seed)
    pattern = os.path.join(directory, "demo-%06d.tar")
    with ShardWriter(pattern, maxcount=per_shard) as sink:
        for index in range(nshards * per_shard):
            label = int(rng.integers(CLASSES))
            sink.write({"__key__": f"sample{index:08d}", "jpg": make_image(label, index, size), "cls": label})
    return sorted(files.glob("demo-*.tar", directory))


def run(args: argparse.Namespace) -> int:
    with files.temporary_directory(prefix="wds-demo-") as directory:
        start = time.perf_counter()
        paths = write_demo_shards(directory, args.shards, args.samples_per_shard, args.image_size, args.seed)
        write_time = time.perf_counter() - start
        total_bytes = sum(files.getsize(p) for p in paths)
        spec = os.path.join(directory, f"demo-{{{0:06d}..{len(paths) - 1:06d}}}.tar")
        ds = WebDataset(spec, shuffle=True, seed=args.seed).shuffle(1000)
        ds = ds.decode("rgb8", num_threads=args.threads).to_tuple("__key__", "jpg", "cls").batched(args.batch_size)
        expected_shape = (args.image_size, args.image_size, 3)
        start = time.perf_counter()
        labels: dict[str, int] = {}
        repeated = bad_images = 0
        for keys, images, classes in ds:
            if images.shape[1:] != expected_shape or images.dtype != np.uint8:
                bad_images += len(keys)
            for key, label in zip(keys, classes.tolist()):
                repeated += key in labels
                labels[key] = label
        elapsed = time.perf_counter() - start
    expected = args.shards * args.samples_per_shard
    if len(labels) != expected or repeated or bad_images:
        print(
            f"FAILED: expected {expected} distinct samples, got {len(labels)} distinct, "
            f"{repeated} repeated, {bad_images} with a wrong image shape"
        )
        return 1
    print(
        f"wrote {len(paths)} shards of {args.image_size}x{args.image_size} JPEGs ({total_bytes / 1e6:.1f} MB) "
        f"in {write_time:.2f} s; read back all {expected} samples exactly once, decoded to rgb8"
    )
    print(f"{expected / elapsed:,.0f} samples/s, {total_bytes / elapsed / 1e6:,.1f} MB/s")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="write a generated JPEG dataset and stream it back",
        description="Write a small image-classification dataset with real JPEGs as shards, stream it back "
        "through shard shuffle, shuffle, decode('rgb8'), to_tuple and batched, and check every sample "
        "arrives exactly once.  Example: wds demo --shards 4 --threads 2",
    )
    parser.add_argument("--shards", type=int, default=8, help="number of shards (default 8)")
    parser.add_argument("--samples-per-shard", type=int, default=500, help="samples per shard (default 500)")
    parser.add_argument("--image-size", type=int, default=64, help="image side in pixels (default 64)")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size (default 64)")
    parser.add_argument("--threads", type=int, default=0, help="decode threads (default 0: decode inline)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the data and the shuffles")
    parser.set_defaults(run=run)
