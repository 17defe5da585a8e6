"""A CLIP-style training loader written against webdataset's API, the way public CLIP training code writes it.

Shard list -> a seeded shard shuffle done by a ``PipelineStage`` subclass
*before* the node/worker split (its epoch shared with the workers through a
multiprocessing value) -> split by node and worker -> samples through a
reader rebuilt from ``tariterators`` pieces with a grouping function of its
own (webdataset 0.2.x style: it reads ``item["fname"]`` of every item) or
webdataset's ``tarfile_to_samples`` -> sample shuffle -> select / decode
("pilrgb") / rename / map_dict / to_tuple / batched -> ``with_epoch`` ->
``WebLoader``.

Run as a script it prints, as JSON, the keys of every batch of every epoch, for each number of workers:

    python clip_loader.py SHARDS --workers 0,2 --epochs 2 --batch 4 [--grouping nothrow|builtin] [--install]

``--install`` is the one-line switch (``wds_torch.install_as_webdataset()``
before ``import webdataset``); without it, whatever ``import webdataset``
finds is used (the real package, or wds under ``python -m wds_torch.run``).
"""

import json
import math
import random
import sys
from multiprocessing import Value

if "--install" in sys.argv:
    import wds_torch

    wds_torch.install_as_webdataset(verbose=False)

import webdataset as wds  # noqa: E402
from webdataset.filters import _shuffle  # noqa: E402
from webdataset.tariterators import base_plus_ext, tar_file_expander, url_opener, valid_sample  # noqa: E402


class SharedEpoch:
    """The epoch, readable by DataLoader workers (a shared integer)."""

    def __init__(self, epoch=0):
        self.value = Value("i", epoch)

    def set_value(self, epoch):
        self.value.value = epoch

    def get_value(self):
        return self.value.value


class ShardShuffle(wds.PipelineStage):
    """A shard shuffle that every rank and worker performs identically: seeded by seed + epoch."""

    def __init__(self, bufsize, initial, seed, epoch):
        self.bufsize, self.initial, self.seed, self.epoch = bufsize, initial, seed, epoch

    def run(self, src):
        rng = random.Random(self.seed + self.epoch.get_value())
        return _shuffle(src, self.bufsize, self.initial, rng)


def group_files(data, keys=base_plus_ext, lcase=True):
    """Files to samples; every item is a file (webdataset 0.2.x's expander yields no end-of-shard marker)."""
    sample = None
    for item in data:
        name, value = item["fname"], item["data"]
        key, ext = keys(name)
        if key is None:
            continue
        ext = ext.lower() if lcase else ext
        if sample is None or key != sample["__key__"] or ext in sample:
            if valid_sample(sample):
                yield sample
            sample = {"__key__": key, "__url__": item["__url__"]}
        sample[ext] = value
    if valid_sample(sample):
        yield sample


def skip_errors(exn):
    print(f"skipped: {exn!r}", file=sys.stderr)
    return True


def samples_nothrow(src, handler=skip_errors):
    return group_files(tar_file_expander(url_opener(src, handler=handler), handler=handler))


def has_image_and_caption(sample):
    return "txt" in sample and any(k in sample for k in ("jpg", "png", "jpeg", "webp"))


def tokenize(text):
    return [ord(c) % 97 for c in text[:16]]


def image_size(image):
    return image.size


def make_loader(shards, workers, batch_size, num_samples, seed=0, grouping="nothrow"):
    epoch = SharedEpoch(0)
    reader = samples_nothrow if grouping == "nothrow" else wds.tarfile_to_samples(handler=skip_errors)
    pipeline = [
        wds.SimpleShardList(shards),
        ShardShuffle(100, 10, seed, epoch),
        wds.split_by_node,
        wds.split_by_worker,
        reader,
        wds.shuffle(50, initial=10),
        wds.select(has_image_and_caption),
        wds.decode("pilrgb", handler=skip_errors),
        wds.rename(image="jpg;png;jpeg;webp", text="txt", key="__key__"),
        wds.map_dict(image=image_size, text=tokenize),
        wds.to_tuple("key", "image", "text"),
        wds.batched(batch_size, partial=False),
    ]
    dataset = wds.DataPipeline(*pipeline)
    batches_per_worker = math.ceil(num_samples / (batch_size * max(1, workers)))
    dataset = dataset.with_epoch(batches_per_worker)
    loader = wds.WebLoader(dataset, batch_size=None, shuffle=False, num_workers=workers, persistent_workers=workers > 0)
    return loader, epoch


def main(argv):
    args = dict(zip(argv[2::2], argv[3::2])) if len(argv) > 2 else {}
    shards, epochs = argv[1], int(args.get("--epochs", 2))
    batch, samples = int(args.get("--batch", 4)), int(args.get("--samples", 72))
    result = {"webdataset": getattr(wds, "__wds__", "webdataset"), "runs": {}}
    for workers in args.get("--workers", "0").split(","):
        loader, epoch = make_loader(shards, int(workers), batch, samples, grouping=args.get("--grouping", "nothrow"))
        runs = result["runs"][workers] = []
        for e in range(epochs):
            epoch.set_value(e)
            runs.append([list(keys) for keys, _, _ in loader])
    print(json.dumps(result))


if __name__ == "__main__":
    main([a for a in sys.argv if a != "--install"])
