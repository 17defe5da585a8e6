"""The training input pipelines people run, end to end into PyTorch batches: wds against webdataset 1.x.

Two datasets of photo-like JPEGs (quality 90) with a class and a caption, written once under ``--dir``
(4 shards, so two DataLoader workers get two each):

* ``imagenet``: 500x375 (ImageNet-sized), random-resized-crop to 224 + random flip;
* ``clip``: 512x512 (stored larger than the training size, as CLIP-style sets are), resize the
  shorter side to 224 + centre crop, the caption turned into a fixed-length list of 77 token ids.

Every pipeline ends in batches of 128: a uint8 3x224x224 image tensor per sample and the class
(ImageNet) or the token ids (CLIP).  webdataset runs what its users run: ``.decode("pil")``, then
torchvision's transforms on PIL images (written with Pillow here, as torchvision does them: crop +
bilinear antialiased resize, flip, HWC -> CHW; torchvision's wheels do not load against this
machine's CPU build of torch), ``.batched(128)``.  wds runs ``.crop_images(...)`` (decode at the
size trained at) and the same tokenizer and batching, with Pillow decoding (``WDS_JPEG=pillow``)
and with the ``jpeg`` extra (libjpeg-turbo through simplejpeg).

Each pipeline is read in one process (``DataLoader(num_workers=0)``) and with two workers
(``DataLoader(num_workers=2, persistent_workers=True)``, fork), a warm-up epoch and then best of
``--repeats`` epochs, images/s that reached the training loop.

    python benchmarks/bench_pipeline.py [--images 2560] [--repeats 3] [--dir /tmp/wds-bench] [--only clip]
"""

from __future__ import annotations

import os
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_augment import arguments, resize_center_chw, rrc_flip_chw  # noqa: E402
from harness import jpeg_shards, photo  # noqa: E402

import wds_core  # noqa: E402

BATCH, CONTEXT, VOCAB = 128, 77, 49408
WORDS = "a photo of the small large red green blue dog cat car tree house on in with near at sunset beach".split()


def tokens(caption):
    """A caption as ``CONTEXT`` int64 token ids: start, words hashed into the vocabulary, end, zero padding."""
    ids = [VOCAB - 2] + [zlib.crc32(w.encode()) % (VOCAB - 2) for w in caption.lower().split()][: CONTEXT - 2]
    ids.append(VOCAB - 1)
    out = np.zeros(CONTEXT, np.int64)
    out[: len(ids)] = ids
    return out


def make_dataset(root, name, n, h, w):
    def fields(rng, i):
        return {"cls": i % 1000, "txt": " ".join(rng.choice(WORDS, int(rng.integers(5, 30))))}

    return jpeg_shards(f"{root}/pipeline-{name}", n, lambda rng: photo(rng, h, w), shards=4, seed=1, fields=fields)


def label(value):
    return value


def webdataset_pipeline(spec, name):
    import webdataset

    dataset = webdataset.WebDataset(spec, shardshuffle=False, nodesplitter=webdataset.split_by_node)
    if name == "imagenet":
        dataset = dataset.decode("pil").to_tuple("jpg", "cls").map_tuple(rrc_flip_chw, label)
    else:
        dataset = dataset.decode("pil").to_tuple("jpg", "txt").map_tuple(resize_center_chw, tokens)
    return dataset.batched(BATCH)


def wds_pipeline(spec, name):
    import wds_torch

    dataset = wds_torch.WebDataset(spec, shardshuffle=False, seed=1)
    if name == "imagenet":
        dataset = dataset.crop_images(224, flip=0.5, layout="chw").to_tuple("jpg", "cls")
    else:
        dataset = dataset.crop_images(224, "center", layout="chw").decode(only="txt").to_tuple("jpg", "txt")
        dataset = dataset.map_tuple(label, tokens)
    return dataset.batched(BATCH)


def rate(pipeline, spec, name, workers, repeats):
    """Best images/s over ``repeats`` epochs after a warm-up one, through a DataLoader."""
    import torch

    options = {"num_workers": workers, "persistent_workers": workers > 0}
    loader = torch.utils.data.DataLoader(pipeline(spec, name), batch_size=None, **options)
    best = float("inf")
    for epoch in range(repeats + 1):
        start = time.perf_counter()
        count = 0
        for images, _ in loader:
            assert images.shape[1:] == (3, 224, 224) and images.dtype == torch.uint8
            count += len(images)
        if epoch:
            best = min(best, time.perf_counter() - start)
    del loader
    return count / best


def main():
    args = arguments(__doc__, 2560)
    from wds_core.fieldcodecs import set_jpeg_decoder

    cases = {
        "imagenet": make_dataset(args.dir, "imagenet", args.images, 375, 500),
        "clip": make_dataset(args.dir, "clip", args.images, 512, 512),
    }
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, batches of {BATCH}, images/s")
    for name, spec in cases.items():
        if args.only and name != args.only:
            continue
        sizes = [len(s["jpg"]) for s in wds_core.WebDataset(spec)]
        print(f"\n{name}: {len(sizes)} JPEGs, {sum(sizes) / len(sizes) / 1e3:.0f} KB on average\n")
        print("| pipeline | 1 process | vs webdataset | 2 workers | vs webdataset |\n|---|---|---|---|---|")
        rows = {}
        set_jpeg_decoder("pillow")
        rows["webdataset 1.0.2 decode('pil') + transforms"] = [
            rate(webdataset_pipeline, spec, name, workers, args.repeats) for workers in (0, 2)
        ]
        for choice in ("pillow", "simplejpeg"):
            try:
                set_jpeg_decoder(choice)  # fork: the workers inherit the choice
            except wds_core.SpecError:
                print(f"({choice} is not installed: pip install 'wds[jpeg]')")
                continue
            rows[f"wds crop_images, {choice}"] = [
                rate(wds_pipeline, spec, name, workers, args.repeats) for workers in (0, 2)
            ]
        set_jpeg_decoder("auto")
        theirs = rows["webdataset 1.0.2 decode('pil') + transforms"]
        for row, rates in rows.items():
            cells = " | ".join(f"{r:,.0f} | {r / t:.2f}x" for r, t in zip(rates, theirs))
            print(f"| {row} | {cells} |")


if __name__ == "__main__":
    main()
