"""Decode + augment, the step a GPU waits for: wds's crop_images against webdataset 1.x with the usual transforms.

Two datasets of photo-like JPEGs (quality 90), written once under ``--dir``:

* ``imagenet``: 500x375 (ImageNet-sized), trained with random-resized-crop to
  224 + random flip, as uint8 CHW arrays;
* ``clip``: 512x512 (stored larger than the training size, as CLIP-style sets
  are), evaluated with resize-shorter-side to 224 + centre crop 224.

webdataset runs ``.decode("pil")`` and the transforms torchvision applies to
PIL images, written with Pillow here (torchvision's crop + bilinear resize
with antialiasing, flip, HWC -> CHW; torchvision itself is not required):
exactly what its users' scripts do.  wds runs the same script unchanged
(``.decode("pil")`` + the same transforms), then ``.crop_images(...)``, with
Pillow decoding and with the ``jpeg`` extra (simplejpeg), resizing with Pillow
and, with the ``cv`` extra, with OpenCV (``interpolation=``), on one thread
and with ``num_threads=2``.  Best of N on a warm page cache, images/s.

    python benchmarks/bench_augment.py [--images 1200] [--repeats 3] [--dir /tmp/wds-bench]
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
import warnings

import numpy as np
from harness import photo_shards
from PIL import Image

import wds_core
from wds_core.fieldcodecs import set_jpeg_decoder


def make_dataset(root, name, n, h, w):
    return photo_shards(root, f"augment-{name}", n, h, w)


def rrc_flip_chw(img, size=224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop + RandomHorizontalFlip + PILToTensor, on a PIL image, with Pillow."""
    width, height = img.size
    area = width * height
    for _ in range(10):
        target = area * random.uniform(*scale)
        aspect = math.exp(random.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top, left = random.randint(0, height - h), random.randint(0, width - w)
            break
    else:
        top, left, h, w = 0, 0, height, width
    out = img.crop((left, top, left + w, top + h)).resize((size, size), Image.Resampling.BILINEAR)
    if random.random() < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.ascontiguousarray(np.asarray(out).transpose(2, 0, 1))


def resize_center_chw(img, size=224):
    """torchvision's Resize(224) + CenterCrop(224) + PILToTensor, with Pillow."""
    width, height = img.size
    if width <= height:
        new = (size, int(size * height / width))
    else:
        new = (int(size * width / height), size)
    img = img.resize(new, Image.Resampling.BILINEAR)
    left, top = int(round((new[0] - size) / 2.0)), int(round((new[1] - size) / 2.0))
    return np.ascontiguousarray(np.asarray(img.crop((left, top, left + size, top + size))).transpose(2, 0, 1))


def _have_opencv():
    """Whether the ``cv`` extra (OpenCV) is installed: crop_images then also runs with its resize."""
    import importlib.util

    return importlib.util.find_spec("cv2") is not None


def best_of(repeats, make):
    best = float("inf")
    for _ in range(repeats):
        ds = make()
        start = time.perf_counter()
        count = sum(1 for image, _ in ds if image.shape == (3, 224, 224))
        best = min(best, time.perf_counter() - start)
    return count / best


def arguments(doc, images):
    """The command line shared with bench_pipeline.py: ``--images --repeats --dir --only``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--images", type=int, default=images)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/wds-bench")
    parser.add_argument("--only", choices=["imagenet", "clip"], help="run one dataset")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    warnings.filterwarnings("ignore")
    return args


def main():
    args = arguments(__doc__, 1200)
    import webdataset

    cases = {
        "imagenet": (make_dataset(args.dir, "imagenet", args.images, 375, 500), rrc_flip_chw, {"flip": 0.5}),
        "clip": (make_dataset(args.dir, "clip", args.images, 512, 512), resize_center_chw, {"policy": "center"}),
    }
    for name, (spec, transform, crop) in cases.items():
        if args.only and name != args.only:
            continue
        sizes = [len(s["jpg"]) for s in wds_core.WebDataset(spec)]
        print(f"\n{name}: {len(sizes)} JPEGs, {sum(sizes) / len(sizes) / 1e3:.0f} KB on average\n")
        rates = {}
        set_jpeg_decoder("pillow")
        rates["webdataset 1.0.2 decode('pil') + transforms"] = best_of(
            args.repeats,
            lambda spec=spec, t=transform: (
                webdataset.WebDataset(spec, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(t)
            ),
        )
        for choice in ("pillow", "simplejpeg"):
            try:
                set_jpeg_decoder(choice)
            except wds_core.SpecError:
                print(f"({choice} is not installed: pip install 'wds[jpeg]')")
                continue
            rates[f"wds decode('pil') + transforms, {choice}"] = best_of(
                args.repeats,
                lambda spec=spec, t=transform: (
                    wds_core.WebDataset(spec).decode("pil").to_tuple("jpg", "cls").map_tuple(t)
                ),
            )
            for interpolation in ("pillow", "opencv") if _have_opencv() else ("pillow",):
                for threads in (0, 2):
                    rates[f"wds crop_images(224, ...), {choice}, {interpolation} resize, num_threads={threads}"] = (
                        best_of(
                            args.repeats,
                            lambda spec=spec, crop=crop, threads=threads, interpolation=interpolation: (
                                wds_core.WebDataset(spec, seed=1)
                                .crop_images(
                                    224, layout="chw", num_threads=threads, interpolation=interpolation, **crop
                                )
                                .to_tuple("jpg", "cls")
                            ),
                        )
                    )
        set_jpeg_decoder("auto")
        theirs = rates["webdataset 1.0.2 decode('pil') + transforms"]
        print("| pipeline | images/s | vs webdataset |\n|---|---|---|")
        for label, rate in rates.items():
            print(f"| {label} | {rate:,.0f} | {rate / theirs:.2f}x |")


if __name__ == "__main__":
    main()
