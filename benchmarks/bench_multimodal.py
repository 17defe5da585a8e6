"""Mixing and interleaved documents, against webdataset 1.x doing the same in the same run.

* mix: ``RandomMix`` of two streams of bench_indexed.py's 10 shards (10,000 samples of ~10 KB
  each), probabilities 0.7/0.3, ``longest=True``: samples per second, wds vs webdataset's
  ``RandomMix`` over two ``WebDataset``s.
* interleaved: 2,000 MMC4 documents (6 sentences, 3 JPEG images of 64x64 each, as image members),
  written with ``interleaved_sample``; documents per second to ``sample["interleaved"]`` with
  decoded RGB arrays: wds ``.interleaved(decode="rgb8")`` vs webdataset reading the same shards
  with ``.decode("rgb8")`` and a hand-written ``map`` that places the images (what its users
  write today; webdataset has no interleaved stage), and wds with ``decode=None`` (parsing only).

    python benchmarks/bench_multimodal.py [--dir /tmp/wds-bench-indexed] [--repeats 3]
"""

from __future__ import annotations

import io
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_indexed  # noqa: E402
import numpy as np  # noqa: E402

import wds_core  # noqa: E402

DOCS, IMAGES, SENTENCES = 2000, 3, 6


def jpeg(value):
    from PIL import Image

    buf = io.BytesIO()
    pixels = (np.arange(64 * 64 * 3).reshape(64, 64, 3) + value) % 256
    Image.fromarray(pixels.astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def make_documents(root):
    pattern = f"{root}/mmc4-%02d.tar"
    if not os.path.exists(pattern % 0):
        images = [jpeg(v) for v in range(16)]
        with wds_core.ShardWriter(pattern, maxcount=500) as sink:
            for d in range(DOCS):
                items = []
                for s in range(SENTENCES):
                    if s % 2 == 0 and s // 2 < IMAGES:
                        items.append(images[(d + s) % 16])
                    items.append(f"Sentence {s} of document {d}, long enough to look like text.")
                sink.write(wds_core.interleaved_sample(f"doc{d:05d}", items))
    return [pattern % i for i in range(DOCS // 500)]


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - start)
    return count, min(times)


def hand_placed(sample):
    doc = sample["json"]
    before = {}
    for j, info in enumerate(doc["image_info"]):
        before.setdefault(info["matched_text_index"], []).append(sample[f"{j}.jpg"])
    out = []
    for i, text in enumerate(doc["text_list"]):
        out += before.get(i, []) + [text]
    return {"__key__": sample["__key__"], "interleaved": out + before.get(len(doc["text_list"]), [])}


def main():
    import webdataset

    args, shards, _ = bench_indexed.arguments_and_data(__doc__)

    def ours():
        a, b = wds_core.WebDataset(shards, seed=1), wds_core.WebDataset(shards, seed=2)
        return sum(1 for _ in wds_core.RandomMix([a, b], probs=[0.7, 0.3], seed=3, longest=True))

    def theirs():
        a = webdataset.WebDataset(shards, shardshuffle=False, empty_check=False)
        b = webdataset.WebDataset(shards, shardshuffle=False, empty_check=False)
        return sum(1 for _ in webdataset.RandomMix([a, b], probs=[0.7, 0.3], longest=True))

    n, ours_t = best(ours, args.repeats)
    m, theirs_t = best(theirs, args.repeats)
    print(
        f"mix: wds {n / ours_t:,.0f} samples/s, webdataset {webdataset.__version__} {m / theirs_t:,.0f} samples/s"
        f" -> {theirs_t / ours_t * n / m:.2f}x ({n} and {m} samples)"
    )

    docs = make_documents(os.path.abspath(args.dir))

    def ours_docs(decode):
        return lambda: sum(1 for _ in wds_core.WebDataset(docs).interleaved(decode=decode))

    def theirs_docs():
        ds = webdataset.WebDataset(docs, shardshuffle=False).decode("rgb8").map(hand_placed)
        return sum(1 for _ in ds)

    n, decoded = best(ours_docs("rgb8"), args.repeats)
    _, parsed = best(ours_docs(None), args.repeats)
    m, theirs_t = best(theirs_docs, args.repeats)
    check = next(iter(wds_core.WebDataset(docs).interleaved(decode="rgb8")))["interleaved"]
    assert [type(x).__name__ for x in check][:2] == ["ndarray", "str"], check[:2]
    print(
        f"interleaved ({IMAGES} images each): wds {n / decoded:,.0f} documents/s decoded, {n / parsed:,.0f} parsed"
        f" only; webdataset + map {m / theirs_t:,.0f} documents/s -> {theirs_t / decoded:.2f}x"
    )


if __name__ == "__main__":
    main()
