"""An image-classification reader written against webdataset's API, the way public model-zoo training code does.

An ``IterableDataset`` that reads the split's shard names from ``_info.json``
with ``wds.gopen`` (falling back to a brace spec), expands them with
``webdataset.shardlists.expand_urls``, builds its ``DataPipeline`` lazily in
each worker: a seeded shard shuffle (a ``PipelineStage`` using ``_shuffle``),
its own node-and-worker split function, ``tarfile_to_samples``, a sample
shuffle with ``rng=random.Random(worker seed)``, a decoding ``map`` and
``rename``; each worker yields a fixed number of samples per epoch with
``with_epoch``.  Everything is seeded, so the order is a function of the seed
and torch's DataLoader seed: the same on webdataset and on wds.

    python timm_loader.py ROOT --workers 0,2 --epochs 2 [--install]

prints, as JSON, every epoch's (key, label) pairs in the order the loader gave them, for each number of workers.
"""

import io
import json
import math
import os
import random
import sys
from functools import partial
from itertools import islice

if "--install" in sys.argv:
    import wds_torch

    wds_torch.install_as_webdataset(verbose=False)

import torch  # noqa: E402
import webdataset as wds  # noqa: E402
from PIL import Image  # noqa: E402
from torch.utils.data import IterableDataset, get_worker_info  # noqa: E402
from webdataset.filters import _shuffle, getfirst  # noqa: E402
from webdataset.shardlists import expand_urls  # noqa: E402


def read_info(root):
    path = os.path.join(root, "_info.json")
    try:
        with wds.gopen(path) as stream:
            return json.load(stream)
    except Exception as exn:  # the pattern under test: a missing gopen must not hide here
        print(f"no info file: {exn!r}", file=sys.stderr)
        return {}


class EpochCounter:
    def __init__(self):
        self.value = torch.multiprocessing.Value("i", 0)


class SeededShardShuffle(wds.PipelineStage):
    def __init__(self, bufsize, seed, epoch):
        self.bufsize, self.seed, self.epoch = bufsize, seed, epoch

    def run(self, src):
        return _shuffle(src, self.bufsize, 10, random.Random(self.seed + self.epoch.value.value))


def decode_sample(sample, image_key):
    label = int(sample["cls"])
    with io.BytesIO(getfirst(sample, image_key)) as stream:
        image = Image.open(stream)
        image.load()
    return {"jpg": image.convert("RGB"), "target": label, "key": sample["__key__"]}


def skip(exn):
    if isinstance(exn, TypeError):
        raise exn
    print(f"skipped: {exn!r}", file=sys.stderr)
    return True


class Reader(IterableDataset):
    def __init__(self, root, num_samples, seed=42, input_key="jpg;png;webp"):
        self.root, self.num_samples, self.seed, self.input_key = root, num_samples, seed, input_key
        info = read_info(root)
        names = info["splits"]["train"]["filenames"] if info else expand_urls("shard-{0..7}.tar")
        self.filenames = [os.path.join(root, name) for name in names]
        self.epoch = EpochCounter()
        self.worker_seed, self.worker_id, self.num_workers = seed, 0, 1
        self.ds = None

    def set_epoch(self, epoch):
        self.epoch.value.value = epoch

    def _split(self, src):
        if self.num_workers > 1:
            yield from islice(src, self.worker_id, None, self.num_workers)
        else:
            yield from src

    def _build(self):
        info = get_worker_info()
        if info is not None:
            self.worker_id, self.num_workers, self.worker_seed = info.id, info.num_workers, info.seed
        else:  # webdataset's rank-based seed
            self.worker_seed = self.seed + wds.utils.pytorch_worker_seed()
        self.ds = wds.DataPipeline(
            wds.SimpleShardList(self.filenames),
            SeededShardShuffle(50, self.seed, self.epoch),
            self._split,
            wds.tarfile_to_samples(handler=skip),
            wds.shuffle(bufsize=30, initial=10, rng=random.Random(self.worker_seed)),
            wds.map(partial(decode_sample, image_key=self.input_key), handler=skip),
            wds.rename(image=self.input_key, target="target"),
        )

    def __iter__(self):
        if self.ds is None:
            self._build()
        per_worker = math.ceil(self.num_samples / self.num_workers)
        for sample in self.ds.with_epoch(per_worker):
            yield sample["key"], sample["target"]


def main(argv):
    args = dict(zip(argv[2::2], argv[3::2]))
    result = {"webdataset": getattr(wds, "__wds__", "webdataset"), "runs": {}}
    for workers in args.get("--workers", "0").split(","):
        torch.manual_seed(0)
        reader = Reader(argv[1], int(args.get("--samples", 80)))
        n = int(workers)
        loader = torch.utils.data.DataLoader(reader, batch_size=None, num_workers=n, persistent_workers=n > 0)
        runs = result["runs"][workers] = []
        for epoch in range(int(args.get("--epochs", 2))):
            reader.set_epoch(epoch)
            runs.append([[key, int(label)] for key, label in loader])
    print(json.dumps(result))


if __name__ == "__main__":
    main([a for a in sys.argv if a != "--install"])
