"""Local reads, writes, decoding and pipelines: wds against webdataset 1.x (and bare libraries) in the same run.

Sections (``--rows``, all by default), each one table of benchmarks/README.md:

* ``read``: raw iteration of three datasets (small samples, ~33 KB JPEG samples, 1 MiB members) by
  ``WebDataset(spec)``, wds and webdataset taking turns, with ``cat`` for the large shards and the reader's peak
  memory while streaming them;
* ``write``: 50,000 small samples (an int class, a caption, a JSON record) through each ``TarWriter``;
* ``decode``: 2,000 photo-like 256x256 JPEGs to RGB arrays: bare Pillow, webdataset ``decode("rgb8")``, wds's
  inline and with ``num_threads=2``, with Pillow and with libjpeg-turbo (the ``jpeg`` extra, simplejpeg);
* ``jpeg``: the JPEG libraries installed (Pillow, simplejpeg, PyTurboJPEG, OpenCV) on 400 500x375 JPEGs, one
  thread and two, full and 1/2 scale, their pixels against Pillow's;
* ``augment``: decode + random-resized-crop/flip (``imagenet``, 500x375) and resize + centre crop (``clip``,
  512x512) to 224: webdataset's ``decode("pil")`` with the transforms torchvision applies to PIL images (written
  with Pillow), against wds running the same script and ``crop_images(...)`` with each decoder, resize and
  thread count;
* ``pipeline``: the same two sets end to end into PyTorch batches of 128 (the ``clip`` captions tokenized),
  through a DataLoader with 0 and 2 workers, a warm-up epoch first;
* ``mixing``: ``RandomMix`` of two streams of the indexed set (harness.indexed_shards), and 2,000 MMC4 documents
  (6 sentences, 3 JPEGs each) to ``sample["interleaved"]``, wds's ``interleaved`` stage against webdataset's
  ``decode`` + a hand-written ``map``;
* ``transform``: the indexed set's 10 shards, each caption upper-cased into 10 new shards, by ``map_shards`` on
  each engine and by webdataset + ``dask.delayed``, the seed README's pattern.

Datasets are written once under ``--data`` and kept.  Systems take turns within each round (harness.turns).

    python benchmarks/bench_local.py [--rows read,write,...] [--repeats N] [--images N] [--data DIR] [--json PATH]
"""

from __future__ import annotations

import io
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor

import harness
import numpy as np
from harness import best_of, jpeg_shards, photo, photo_shards, resize_center_chw, rrc_flip_chw, times, turns
from PIL import Image

import wds_core
from wds_core.fieldcodecs.jpeg import set_jpeg_decoder
from wds_core.io.urls import expand_urls
from wds_core.tar.tarwrite import encode_member, end_of_archive

warnings.filterwarnings("ignore")


def _webdataset():
    import webdataset

    return webdataset


def _decoders(names=("pillow", "simplejpeg")):
    """The JPEG decoders of ``names`` that are installed, each set while it is yielded."""
    for choice in names:
        try:
            set_jpeg_decoder(choice)
        except wds_core.SpecError:
            print(f"({choice} is not installed: pip install 'wds[jpeg]')")
            continue
        yield choice
    set_jpeg_decoder("auto")


# ---------------------------------------------------------------- read


def _write_tar(path, samples):
    with open(path, "wb") as out:
        for key, fields in samples:
            for name, data in fields.items():
                out.write(encode_member(f"{key}.{name}", data))
        out.write(end_of_archive())


def _read_datasets(root):
    rng = random.Random(0)
    if not os.path.exists(f"{root}/small-0003.tar"):
        for s in range(4):
            samples = [
                (f"s{s}_{i:07d}", {e: os.urandom(rng.randint(10, 150)) for e in ("txt", "cls", "json")})
                for i in range(50_000)
            ]
            _write_tar(f"{root}/small-{s:04d}.tar", samples)
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
            _write_tar(f"{root}/image-{s:04d}.tar", samples)
    if not os.path.exists(f"{root}/large-0003.tar"):
        blob = os.urandom(1 << 20)
        for s in range(4):
            _write_tar(f"{root}/large-{s:04d}.tar", [(f"l{s}_{i:05d}", {"bin": blob}) for i in range(250)])
    return {
        "small": (f"{root}/small-{{0000..0003}}.tar", 200_000),
        "image": (f"{root}/image-{{0000..0003}}.tar", 20_000),
        "large": (f"{root}/large-{{0000..0003}}.tar", 1_000),
    }


_RSS = """
import resource, sys
import wds_core
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = sum(1 for _ in wds_core.WebDataset(sys.argv[1]))
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, n)
"""


def read(args):
    webdataset = _webdataset()
    rows = []
    for name, (spec, expected) in _read_datasets(args.data).items():
        files = expand_urls(spec)
        nbytes = sum(os.path.getsize(f) for f in files)
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        systems = {
            "wds": lambda spec=spec: sum(1 for _ in wds_core.WebDataset(spec)),
            "webdataset": lambda spec=spec: sum(1 for _ in webdataset.WebDataset(spec, shardshuffle=False)),
        }
        if name == "large":  # cat's rate, in samples/s of the same bytes
            systems["cat"] = lambda files=files, n=expected: (
                subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True) and n
            )
        rates = turns(systems, harness.repeats(args, 3))
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
            out = subprocess.run([sys.executable, "-c", _RSS, spec], capture_output=True, text=True, check=True)
            base, peak, _ = map(int, out.stdout.split())
            row["peak RSS above import (MB)"] = round((peak - base) / 1024, 1)
        rows.append(row)
    return rows


# ---------------------------------------------------------------- write


def write(args):
    webdataset = _webdataset()
    n = args.samples
    samples = [
        {
            "__key__": f"sample{i:08d}",
            "cls": i % 1000,
            "txt": f"a photo of thing number {i}",
            "json": {"i": i, "w": 256},
        }
        for i in range(n)
    ]
    writers = {
        "wds TarWriter": wds_core.TarWriter,
        "webdataset 1.0.2 TarWriter": lambda p: webdataset.TarWriter(p, mtime=0),
    }

    def timed(make, path):
        def work():
            with make(path) as sink:
                for sample in samples:
                    sink.write(sample)
            return n

        return work

    paths = {name: f"{args.data}/write-{k}.tar" for k, name in enumerate(writers)}
    rates = turns({name: timed(make, paths[name]) for name, make in writers.items()}, harness.repeats(args, 3))
    ours, theirs = (rates[name].best for name in writers)
    return [
        {
            "writer": name,
            "samples/s": rates[name].best,
            "shard MB": round(os.path.getsize(paths[name]) / 1e6, 1),
            "speedup": f"**{ours / theirs:.1f}×**" if name.startswith("wds") else "",
        }
        for name in writers
    ]


# ---------------------------------------------------------------- decode


def _pillow_rgb8(data):
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img)  # these JPEGs are RGB already


def decode(args):
    webdataset = _webdataset()
    spec = photo_shards(args.data, "decode-v3", args.images or 2000, 256, 256, quality=85)
    jpegs = [s["jpg"] for s in wds_core.WebDataset(spec)]
    pool = ThreadPoolExecutor(2)

    def count(make):
        return lambda: sum(1 for image, cls in make() if image.shape == (256, 256, 3))

    def with_decoder(choice, work):
        def run():
            set_jpeg_decoder(choice)
            return work()

        return run

    systems = {
        "Pillow alone, 1 thread": lambda: sum(1 for _ in map(_pillow_rgb8, jpegs)),
        "Pillow alone, 2 threads": lambda: sum(1 for _ in pool.map(_pillow_rgb8, jpegs)),
        "webdataset decode('rgb8')": with_decoder("pillow", count(
            lambda: webdataset.WebDataset(spec, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls")
        )),
    }  # fmt: skip
    for choice in _decoders():
        for threads in (0, 2):
            label = f"wds decode('rgb8', num_threads=2), {choice}" if threads else f"wds decode('rgb8'), {choice}"
            systems[label] = with_decoder(choice, count(
                lambda t=threads: wds_core.WebDataset(spec).decode("rgb8", num_threads=t).to_tuple("jpg", "cls")
            ))  # fmt: skip
    rates = turns(systems, harness.repeats(args, 3))
    set_jpeg_decoder("auto")
    theirs, pillow = rates["webdataset decode('rgb8')"].best, rates["Pillow alone, 1 thread"].best
    print(f"{len(jpegs)} JPEGs of 256x256, {sum(map(len, jpegs)) / len(jpegs) / 1e3:.1f} KB on average")
    return [
        {"pipeline": name, "images/s": r.best, "vs webdataset": times(r.best, theirs),
         "vs Pillow, 1 thread": f"{r.best / pillow:.0%}"}
        for name, r in rates.items()
    ]  # fmt: skip


# ---------------------------------------------------------------- jpeg


def _pillow_decoders():
    def full(data):
        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(img.convert("RGB"))

    def half(data):
        with Image.open(io.BytesIO(data)) as img:
            img.draft("RGB", (img.width // 2, img.height // 2))
            return np.asarray(img.convert("RGB"))

    return full, half


def _simplejpeg_decoders():
    import simplejpeg

    def full(data):
        return simplejpeg.decode_jpeg(data, colorspace="RGB")

    def half(data):
        h, w = simplejpeg.decode_jpeg_header(data)[:2]
        return simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=h // 2, min_width=w // 2)

    return full, half


def _turbojpeg_decoders():
    from turbojpeg import TJPF_RGB, TurboJPEG

    jpeg = TurboJPEG()
    return (
        lambda data: jpeg.decode(data, pixel_format=TJPF_RGB),
        lambda data: jpeg.decode(data, pixel_format=TJPF_RGB, scaling_factor=(1, 2)),
    )


def _opencv_decoders():
    import cv2

    def full(data):
        return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    def half(data):
        return cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_REDUCED_COLOR_2), cv2.COLOR_BGR2RGB)

    return full, half


JPEG_LIBRARIES = {
    "Pillow": ("PIL", _pillow_decoders),
    "simplejpeg": ("simplejpeg", _simplejpeg_decoders),
    "PyTurboJPEG": ("turbojpeg", _turbojpeg_decoders),
    "OpenCV": ("cv2", _opencv_decoders),
}


def jpeg(args):
    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(args.images or 400):
        out = io.BytesIO()
        Image.fromarray(photo(rng, 375, 500)).save(out, format="JPEG", quality=90)
        jpegs.append(out.getvalue())
    reference = [_pillow_decoders()[0](data) for data in jpegs[:20]]
    print(f"{len(jpegs)} JPEGs of 500x375, {sum(map(len, jpegs)) / len(jpegs) / 1e3:.0f} KB on average")
    pool = ThreadPoolExecutor(2)
    systems, rows = {}, {}
    for name, (module, make) in JPEG_LIBRARIES.items():
        try:
            full, half = make()
        except (ImportError, RuntimeError, OSError) as exn:
            rows[name] = {"library": name, "version": f"not available here: {type(exn).__name__}"}
            continue
        diff = max(int(np.abs(full(d).astype(int) - ref).max()) for d, ref in zip(jpegs, reference))
        rows[name] = {
            "library": name,
            "version": getattr(__import__(module), "__version__", "?"),
            "max diff vs Pillow": diff,
        }
        systems[f"{name} 1"] = lambda full=full: sum(1 for _ in map(full, jpegs))
        systems[f"{name} 2"] = lambda full=full: sum(1 for _ in pool.map(full, jpegs))
        systems[f"{name} half"] = lambda half=half: sum(1 for _ in map(half, jpegs))
    rates = turns(systems, harness.repeats(args, 5))
    base = rates["Pillow 1"].best
    for name, row in rows.items():
        if f"{name} 1" in rates:
            one, two = rates[f"{name} 1"].best, rates[f"{name} 2"].best
            half = rates[f"{name} half"].best
            row.update({"1 thread": f"{one:,.0f} ({times(one, base)})", "2 threads": two,
                        "2 threads / 1": times(two, one), "1/2 scale, 1 thread": half})  # fmt: skip
    order = [
        "library",
        "version",
        "1 thread",
        "2 threads",
        "2 threads / 1",
        "1/2 scale, 1 thread",
        "max diff vs Pillow",
    ]
    return [{key: row.get(key, "") for key in order} for row in rows.values()]


# ---------------------------------------------------------------- augment


def _interpolations():
    import importlib.util

    return ("pillow", "opencv") if importlib.util.find_spec("cv2") else ("pillow",)


SETS = {  # name: (height, width, the webdataset user's transform, crop_images' options)
    "imagenet": (375, 500, rrc_flip_chw, {"flip": 0.5}),
    "clip": (512, 512, resize_center_chw, {"policy": "center"}),
}
WEBDATASET_AUGMENT = "webdataset 1.0.2 decode('pil') + transforms"


def augment(args):
    webdataset = _webdataset()
    columns: dict[str, dict[str, float]] = {}
    for name, (height, width, transform, crop) in SETS.items():
        if args.only and name != args.only:
            continue
        spec = photo_shards(args.data, f"augment-{name}", args.images or 1200, height, width)

        def count(make, choice):
            def work():
                set_jpeg_decoder(choice)
                return sum(1 for image, _ in make() if image.shape == (3, 224, 224))

            return work

        systems = {WEBDATASET_AUGMENT: count(lambda spec=spec, t=transform: (
            webdataset.WebDataset(spec, shardshuffle=False).decode("pil").to_tuple("jpg", "cls").map_tuple(t)
        ), "pillow")}  # fmt: skip
        for choice in _decoders():
            systems[f"wds decode('pil') + transforms, {choice}"] = count(
                lambda spec=spec, t=transform: (
                    wds_core.WebDataset(spec).decode("pil").to_tuple("jpg", "cls").map_tuple(t)
                ),
                choice,
            )  # fmt: skip
            for interpolation in _interpolations():
                for threads in (0, 2):
                    label = f"wds crop_images(224, ...), {choice}, {interpolation} resize, num_threads={threads}"
                    systems[label] = count(
                        lambda spec=spec, crop=crop, threads=threads, interpolation=interpolation: (
                            wds_core.WebDataset(spec, seed=1)
                            .crop_images(224, layout="chw", num_threads=threads, interpolation=interpolation, **crop)
                            .to_tuple("jpg", "cls")
                        ),
                        choice,
                    )
        columns[name] = {label: r.best for label, r in turns(systems, harness.repeats(args, 3)).items()}
        set_jpeg_decoder("auto")
    rows = []
    for label in next(iter(columns.values())):
        row = {"pipeline": label}
        for name, rates in columns.items():
            row[f"{name} images/s"] = rates[label]
            row["vs webdataset" + " " * list(columns).index(name)] = times(rates[label], rates[WEBDATASET_AUGMENT])
        rows.append(row)
    return rows


# ---------------------------------------------------------------- pipeline

BATCH, CONTEXT, VOCAB = 128, 77, 49408
WORDS = "a photo of the small large red green blue dog cat car tree house on in with near at sunset beach".split()


def tokens(caption):
    """A caption as ``CONTEXT`` int64 token ids: start, words hashed into the vocabulary, end, zero padding."""
    ids = [VOCAB - 2] + [zlib.crc32(w.encode()) % (VOCAB - 2) for w in caption.lower().split()][: CONTEXT - 2]
    ids.append(VOCAB - 1)
    out = np.zeros(CONTEXT, np.int64)
    out[: len(ids)] = ids
    return out


def _label(value):
    return value


def _webdataset_pipeline(spec, name):
    webdataset = _webdataset()
    dataset = webdataset.WebDataset(spec, shardshuffle=False, nodesplitter=webdataset.split_by_node)
    if name == "imagenet":
        dataset = dataset.decode("pil").to_tuple("jpg", "cls").map_tuple(rrc_flip_chw, _label)
    else:
        dataset = dataset.decode("pil").to_tuple("jpg", "txt").map_tuple(resize_center_chw, tokens)
    return dataset.batched(BATCH)


def _wds_pipeline(spec, name):
    import wds_torch

    dataset = wds_torch.WebDataset(spec, seed=1)
    if name == "imagenet":
        dataset = dataset.crop_images(224, flip=0.5, layout="chw").to_tuple("jpg", "cls")
    else:
        dataset = dataset.crop_images(224, "center", layout="chw").decode(only="txt").to_tuple("jpg", "txt")
        dataset = dataset.map_tuple(_label, tokens)
    return dataset.batched(BATCH)


def _epochs_rate(make, spec, name, workers, repeats):
    """Best images/s over ``repeats`` epochs after a warm-up one, through a DataLoader (persistent workers)."""
    import torch

    options = {"num_workers": workers, "persistent_workers": workers > 0}
    loader = torch.utils.data.DataLoader(make(spec, name), batch_size=None, **options)
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


def pipeline(args):
    def fields(rng, i):
        return {"cls": i % 1000, "txt": " ".join(rng.choice(WORDS, int(rng.integers(5, 30))))}

    rows = []
    for name, (height, width, _, _) in SETS.items():
        if args.only and name != args.only:
            continue
        image = lambda rng, h=height, w=width: photo(rng, h, w)  # noqa: E731
        spec = jpeg_shards(f"{args.data}/pipeline-{name}", args.images or 2560, image, shards=4, seed=1, fields=fields)
        # each DataLoader runs its epochs in a row (its workers persist), so the systems do not take turns here
        measured = {}
        set_jpeg_decoder("pillow")
        measured[WEBDATASET_AUGMENT] = [
            _epochs_rate(_webdataset_pipeline, spec, name, w, harness.repeats(args, 3)) for w in (0, 2)
        ]
        for choice in _decoders():  # fork: the workers inherit the choice
            measured[f"wds crop_images, {choice}"] = [
                _epochs_rate(_wds_pipeline, spec, name, w, harness.repeats(args, 3)) for w in (0, 2)
            ]
        theirs = measured[WEBDATASET_AUGMENT]
        for label, rates in measured.items():
            rows.append({"pipeline": label, "set": name,
                         "images/s, 1 process": rates[0], "vs webdataset": times(rates[0], theirs[0]),
                         "images/s, 2 workers": rates[1], "vs webdataset ": times(rates[1], theirs[1])})  # fmt: skip
    return rows


# ---------------------------------------------------------------- mixing

DOCS, DOC_IMAGES, SENTENCES = 2000, 3, 6


def _small_jpeg(value):
    buf = io.BytesIO()
    pixels = (np.arange(64 * 64 * 3).reshape(64, 64, 3) + value) % 256
    Image.fromarray(pixels.astype(np.uint8)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _documents(root):
    pattern = f"{root}/mmc4-%02d.tar"
    if not os.path.exists(pattern % 0):
        images = [_small_jpeg(v) for v in range(16)]
        with wds_core.ShardWriter(pattern, maxcount=500) as sink:
            for d in range(DOCS):
                items = []
                for s in range(SENTENCES):
                    if s % 2 == 0 and s // 2 < DOC_IMAGES:
                        items.append(images[(d + s) % 16])
                    items.append(f"Sentence {s} of document {d}, long enough to look like text.")
                sink.write(wds_core.interleaved_sample(f"doc{d:05d}", items))
    return [pattern % i for i in range(DOCS // 500)]


def _hand_placed(sample):
    doc = sample["json"]
    before = {}
    for j, info in enumerate(doc["image_info"]):
        before.setdefault(info["matched_text_index"], []).append(sample[f"{j}.jpg"])
    out = []
    for i, text in enumerate(doc["text_list"]):
        out += before.get(i, []) + [text]
    return {"__key__": sample["__key__"], "interleaved": out + before.get(len(doc["text_list"]), [])}


def mixing(args):
    webdataset = _webdataset()
    shards, _ = harness.indexed_shards(args.data)

    def ours():
        a, b = wds_core.WebDataset(shards, seed=1), wds_core.WebDataset(shards, seed=2)
        return sum(1 for _ in wds_core.RandomMix([a, b], probs=[0.7, 0.3], seed=3, longest=True))

    def theirs():
        a = webdataset.WebDataset(shards, shardshuffle=False, empty_check=False)
        b = webdataset.WebDataset(shards, shardshuffle=False, empty_check=False)
        return sum(1 for _ in webdataset.RandomMix([a, b], probs=[0.7, 0.3], longest=True))

    # the two mixes draw different counts (each its own random stream), so each is a rate of its own
    mixed = {"wds": best_of(harness.repeats(args, 3), ours), "webdataset": best_of(harness.repeats(args, 3), theirs)}
    docs = _documents(os.path.join(args.data, "indexed"))
    check = next(iter(wds_core.WebDataset(docs).interleaved(decode="rgb8")))["interleaved"]
    assert [type(x).__name__ for x in check][:2] == ["ndarray", "str"], check[:2]
    rates = turns({
        "decoded": lambda: sum(1 for _ in wds_core.WebDataset(docs).interleaved(decode="rgb8")),
        "parsed": lambda: sum(1 for _ in wds_core.WebDataset(docs).interleaved(decode=None)),
        "webdataset": lambda: sum(
            1 for _ in webdataset.WebDataset(docs, shardshuffle=False).decode("rgb8").map(_hand_placed)
        ),
    }, harness.repeats(args, 3))  # fmt: skip
    decoded, parsed, theirs_docs = (rates[k].best for k in ("decoded", "parsed", "webdataset"))
    return [
        {"": "a mix of two sources (samples/s)", "wds": mixed["wds"], "webdataset 1.0.2": mixed["webdataset"],
         "ratio": f"**{times(mixed['wds'], mixed['webdataset'])}**"},
        {"": f"interleaved documents, {DOC_IMAGES} images each, decoded (documents/s)",
         "wds": f"{decoded:,.0f} ({parsed:,.0f} parsed only)", "webdataset 1.0.2": f"{theirs_docs:,.0f} (with a `map`)",
         "ratio": f"**{times(decoded, theirs_docs)}**"},
    ]  # fmt: skip


# ---------------------------------------------------------------- transform


def _shout(sample):
    if "txt" in sample:
        sample["txt"] = sample["txt"].upper()
    return sample


def _augment_shard(src, dst):
    webdataset = _webdataset()
    with webdataset.TarWriter(dst) as sink:
        for sample in webdataset.WebDataset(src, shardshuffle=False, empty_check=False):
            sink.write({k: v for k, v in _shout(sample).items() if k == "__key__" or not k.startswith("__")})


def _webdataset_dask(shards, out):
    import dask
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster):
            dask.compute(*[dask.delayed(_augment_shard)(src, f"{out}/w-{i:02d}.tar") for i, src in enumerate(shards)])


def transform(args):
    shards, _ = harness.indexed_shards(args.data)
    samples = harness.INDEXED_SHARDS * harness.INDEXED_PER_SHARD

    def timed(job):
        def work():
            out = tempfile.mkdtemp(prefix="wds-bench-transform-")
            try:
                job(out)
            finally:
                shutil.rmtree(out)
            return samples

        return work

    def ours(engine):
        def job(out):
            summary = wds_core.map_shards(_shout, shards, out + "/", engine=engine, workers=2)
            assert summary.ok and summary.samples_out == samples, summary

        return job

    seed = "webdataset 1.0.2 + dask.delayed (the seed's pattern)"
    systems = {f"wds map_shards engine={engine!r}": timed(ours(engine)) for engine in ("serial", "process", "dask")}
    systems[seed] = timed(lambda out: _webdataset_dask(shards, out))
    rates = turns(systems, harness.repeats(args, 3))
    return [
        {"engine": name, "time": f"{samples / r.best:.2f} s", "samples/s": r.best,
         "ratio": times(r.best, rates[seed].best) if name != seed else ""}
        for name, r in rates.items()
    ]  # fmt: skip


def options(parser):
    parser.add_argument(
        "--images", type=int, help="images a set (decode 2,000, jpeg 400, augment 1,200, pipeline 2,560)"
    )
    parser.add_argument("--samples", type=int, default=50_000, help="samples written (write)")
    parser.add_argument("--only", choices=list(SETS), help="one of the two sets (augment, pipeline)")


SECTIONS = {
    "read": read, "write": write, "decode": decode, "jpeg": jpeg, "augment": augment, "pipeline": pipeline,
    "mixing": mixing, "transform": transform,
}  # fmt: skip

if __name__ == "__main__":
    harness.run(__doc__, SECTIONS, options)
