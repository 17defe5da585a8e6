"""An interleaved image-text (MMC4-style) loader written against webdataset's API, as public multimodal code does.

Each sample's ``.json`` holds a document: ``text_list`` (sentences),
``image_info`` (images as base64 with the sentence they belong to) and a
``key``.  The pipeline: shard list, split by node and worker, a reader rebuilt
from ``tariterators`` (with webdataset 1.x's end-of-shard markers handled by
its own grouping), a sample shuffle, ``to_tuple("json")``, a ``map`` that
decodes the images and places ``<image>`` tokens, ``batched``, ``WebLoader``.

    python mmc4_loader.py SHARDS --workers 0,2 --epochs 2 [--install]

prints, as JSON, each epoch's batches of document keys, for each number of workers.
"""

import base64
import io
import json
import sys

if "--install" in sys.argv:
    import wds_torch

    wds_torch.install_as_webdataset(verbose=False)

import webdataset as wds  # noqa: E402
from PIL import Image  # noqa: E402
from webdataset.tariterators import base_plus_ext, tar_file_expander, url_opener, valid_sample  # noqa: E402


def group(data):
    """Files to samples, for both expanders: an item without "fname" ({} in webdataset 1.x) ends a shard."""
    current = None
    for item in data:
        if "fname" not in item:
            if valid_sample(current):
                yield current
            current = None
            continue
        key, ext = base_plus_ext(item["fname"])
        if key is None:
            continue
        if current is None or key != current["__key__"]:
            if valid_sample(current):
                yield current
            current = {"__key__": key, "__url__": item["__url__"]}
        current[ext.lower()] = item["data"]
    if valid_sample(current):
        yield current


def log_and_continue(exn):
    print(f"skipped: {exn!r}", file=sys.stderr)
    return True


def documents(src):
    return group(tar_file_expander(url_opener(src, handler=log_and_continue), handler=log_and_continue))


def interleave(sample):
    (raw,) = sample
    doc = json.loads(raw)
    before = {}
    for info in doc["image_info"]:
        with Image.open(io.BytesIO(base64.b64decode(info["image_base64"]))) as image:
            image.load()
        before.setdefault(info["matched_text_index"], []).append(image.size)
    text = " ".join("<image>" * len(before.get(i, [])) + sentence for i, sentence in enumerate(doc["text_list"]))
    return doc["key"], sum(len(v) for v in before.values()), text


def make_loader(shards, workers, batch_size):
    dataset = wds.DataPipeline(
        wds.SimpleShardList(shards),
        wds.split_by_node,
        wds.split_by_worker,
        documents,
        wds.shuffle(20, initial=5),
        wds.to_tuple("json", handler=log_and_continue),
        wds.map(interleave, handler=log_and_continue),
        wds.batched(batch_size, partial=False),
    )
    return wds.WebLoader(dataset, batch_size=None, shuffle=False, num_workers=workers)


def main(argv):
    args = dict(zip(argv[2::2], argv[3::2]))
    result = {"webdataset": getattr(wds, "__wds__", "webdataset"), "runs": {}}
    for workers in args.get("--workers", "0").split(","):
        loader = make_loader(argv[1], int(workers), int(args.get("--batch", 3)))
        runs = result["runs"][workers] = []
        for _ in range(int(args.get("--epochs", 2))):
            runs.append([list(keys) for keys, _, _ in loader])
    print(json.dumps(result))


if __name__ == "__main__":
    main([a for a in sys.argv if a != "--install"])
