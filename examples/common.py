"""Shared by the examples: the ``wds demo`` dataset (JPEGs whose hue gives the class), written once."""

from __future__ import annotations

import argparse
import os

from wds_core.cli.demo import CLASSES, write_demo_shards

__all__ = ["CLASSES", "arguments", "demo_spec"]


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", default="/tmp/wds-demo-data", help="where the demo shards are (written if absent)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--samples-per-shard", type=int, default=250)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    return parser.parse_args()


def demo_spec(args: argparse.Namespace) -> str:
    """The brace spec of the demo shards in ``args.data``, writing them first when they are not there."""
    last = os.path.join(args.data, f"demo-{args.shards - 1:06d}.tar")
    if not os.path.exists(last):
        os.makedirs(args.data, exist_ok=True)
        write_demo_shards(args.data, args.shards, args.samples_per_shard, size=32)
    return os.path.join(args.data, f"demo-{{000000..{args.shards - 1:06d}}}.tar")


def mean_colour(image):
    """The feature the examples learn from: the image's mean colour in [0, 1] (the class is a hue)."""
    return image.reshape(-1, 3).mean(0) / 255.0
