"""Side by side on local disk: wds, webdataset 1.0.2, LitData, mosaic-streaming, Megatron-Energon, SPDL, Hugging Face.

The same photo-like JPEGs (``harness.photo``, quality 90) with a label and a caption are written from the
same bytes into each system's own format: webdataset tars (read by wds and webdataset), LitData ``optimize``
chunks, mosaic-streaming MDS shards (``bytes``, ``int`` and ``str`` columns); Megatron-Energon reads the same
tars after ``energon prepare`` (``ImageClassificationSample``, ``image: jpg, label: cls``) through
``get_val_dataset`` (every sample once, in order) with a task encoder, batches of 64 made by the dataset as it
does, and ``get_loader`` (workers in its ``WorkerConfig``); SPDL runs a ``PipelineBuilder`` pipeline over the tars
(``spdl.io.iter_tarfile``, members grouped by key, ``aggregate(64)``, the work a batch per task in a stage of its
thread pool, ``load_image`` to decode;
its image loader needs FFmpeg's shared libraries, Debian's ``libavformat59 libavfilter8 libavdevice59``); Hugging Face
``datasets`` reads the webdataset tars with its own ``webdataset`` loader
(``load_dataset("webdataset", data_files=..., streaming=True)``, then ``.map``; the raw row casts the image column
to ``Image(decode=False)``).  Two sets: ``imagenet`` (500x375) and ``clip`` (512x512).  Each system then reads
them the way its documentation shows, in a fresh process per run (best of ``--repeats`` rounds in which the
systems take turns), and every run checks that it got every sample once with its label:

* ``raw``: every sample's JPEG bytes and label, nothing decoded (the set read ten times in the process); LitData
  hands out memoryviews of its chunks, and wds here too (``zero_copy=True``: views of the mapped shard);
* ``rawbytes``: the same as ``bytes`` objects, what webdataset, mosaic and Hugging Face hand out and wds by
  default (LitData's views copied with ``bytes()`` in the loop);
* ``decode``: the JPEG as a uint8 HxWx3 array (wds and webdataset: ``.decode("rgb8")``; LitData and mosaic
  have no decoder for bytes: Pillow in the loop, as their examples do);
* ``train``: the ImageNet-style train transform to a 3x224x224 uint8 array: random-resized-crop 224 and a
  random flip (webdataset, LitData, mosaic: ``decode("pil")`` or ``Image.open`` and the transform torchvision
  applies to PIL images, written with Pillow -- ``harness.rrc_flip_chw``; wds: ``crop_images(224,
  flip=0.5)``, its documented path, with the ``jpeg`` and ``cv`` extras when installed: simplejpeg decodes,
  OpenCV resizes -- the header line says which);
* ``clip``: the CLIP-style one on the ``clip`` set: resize the shorter side to 224 and cut the centre (wds:
  ``crop_images(224, policy="center")``), with the caption;
* ``threads``: the train transform on two threads of one process, the other way to use two cores (wds:
  ``crop_images(..., num_threads=2)``; SPDL: its stage with ``concurrency=2``; the others have no such option);
* ``loader``: the train transform in a PyTorch ``DataLoader(num_workers=2)``, batches of
  64 (LitData: its ``StreamingDataLoader``; Energon: ``get_loader`` with ``num_workers=2`` in its config; SPDL
  replaces the DataLoader with its threads: not run).

Reported: samples/s; the time from making the dataset to the first sample; CPU seconds per 1,000 samples (the
reading process and its workers); the peak growth of the memory of the reading process and its worker processes
(their PSS: pages shared between them counted once, split).  For object stores see
``bench_store.py --rows objectstore`` (the same systems against a shaped S3 server).

**Profile** (section ``profile``): what leaving :class:`wds_core.Profile` on costs, on the same ``imagenet`` set
read by wds in one process, profile off and on in turns (``--rounds`` of each, the order alternating): best and
median of the rates, the median CPU seconds a sample (steadier than the rates on a shared machine), and the share
of the wall time the profile's looks cover.  *raw* reads with ``zero_copy`` and ``to_tuple`` (over 150,000
samples/s here), *bytes* as ``bytes`` (the default), *decode* to uint8 arrays, each as many times as fill
``--seconds``.  A profile looks every 5 ms for its first two seconds, every 20 ms after: ``--seconds 0.2`` measures
the first regime (what ``wds profile`` runs), ``--seconds 8`` mostly the second (a profile left on).

    python benchmarks/bench_peers.py [--images 2000] [--repeats 3] [--data /tmp/wds-bench]
        [--rows raw,rawbytes,decode,train,clip,threads,loader,profile] [--only webdataset,wds,litdata,...]
        [--svg FILE] [--rounds 24] [--seconds 0.2]

The peers are not wds's dependencies: ``pip install litdata mosaicml-streaming webdataset==1.0.2 datasets
megatron-energon spdl``; a
system that is missing is skipped and said so.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEMS = (
    "webdataset",
    "wds",
    "litdata",
    "mosaic",
    "energon",
    "spdl",
    "hf",
)  # webdataset first: the others are compared with it
ROWS = {
    "raw": "raw",
    "rawbytes": "raw, as bytes",
    "decode": "decode",
    "train": "train",
    "clip": "clip",
    "threads": "train, 2 threads in one process",
    "loader": "train, DataLoader 2 workers",
}
RAW_EPOCHS = 10  # the raw row reads the set this many times in one process (one pass takes a few ms)
RUN_TIMEOUT = 600


def write_sets(root: str, images: int) -> dict[str, dict[str, str]]:
    """Each set in each system's format under ``root`` (written once): {set: {format: where}}."""
    import wds_core

    made: dict[str, dict[str, str]] = {}
    for name, (h, w) in {"imagenet": (375, 500), "clip": (512, 512)}.items():
        spec = harness.captioned_photo_shards(root, name, images, h, w)
        samples = [(s["jpg"], int(s["cls"]), s["txt"].decode()) for s in wds_core.WebDataset(spec)]
        made[name] = {"tar": spec}
        try:
            import litdata

            where = f"{root}/{name}-{images}-litdata"
            if not os.path.exists(f"{where}/index.json"):
                litdata.optimize(fn=_LitItem(samples), inputs=list(range(len(samples))), output_dir=where,
                                 chunk_bytes="64MB", num_workers=1, mode="overwrite")  # fmt: skip
            made[name]["litdata"] = where
        except ImportError:
            print("# litdata is not installed: skipped")
        try:
            from streaming import MDSWriter

            where = f"{root}/{name}-{images}-mds"
            if not os.path.exists(f"{where}/index.json"):
                columns = {"jpg": "bytes", "cls": "int", "txt": "str"}
                with MDSWriter(out=where, columns=columns, size_limit=64 << 20) as writer:
                    for jpg, label, text in samples:
                        writer.write({"jpg": jpg, "cls": label, "txt": text})
            made[name]["mosaic"] = where
        except ImportError:
            print("# mosaicml-streaming is not installed: skipped")
        energon = shutil.which("energon", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
        if energon is None:
            print("# megatron-energon is not installed: skipped")
            continue
        where = f"{root}/{name}-{images}-energon"  # its format: the same tars, with its .nv-meta beside them
        if not os.path.exists(f"{where}/.nv-meta/split.yaml"):
            os.makedirs(where, exist_ok=True)
            for i in range(4):
                target = f"{where}/shard-{i:04d}.tar"
                if not os.path.exists(target):
                    os.link(f"{root}/{name}-{images}-{i:04d}.tar", target)
            subprocess.run([energon, "prepare", where, "--non-interactive", "--no-progress",
                            "--split-parts", "train:shard-{0000..0003}.tar", "--sample-type",
                            "ImageClassificationSample", "--field-map", '{"image": "jpg", "label": "cls"}'],
                           check=True, capture_output=True)  # fmt: skip
        made[name]["energon"] = where
    return made


class _LitItem:
    def __init__(self, samples: list) -> None:
        self.samples = samples

    def __call__(self, i: int) -> dict:
        jpg, label, text = self.samples[i]
        return {"jpg": jpg, "cls": label, "txt": text}


READ = r"""
import io, json, os, random, sys, time, warnings
warnings.simplefilter("ignore")
sys.path[:0] = [{here!r}]
system, row, where, cache = {system!r}, {row!r}, {where!r}, {cache!r}
workers = 2 if row == "loader" else 0
epochs = {raw_epochs} if row.startswith("raw") else 1
import numpy as np
from PIL import Image
from harness import resize_center_chw, rrc_flip_chw
def pss(pid):
    try:
        with open(f"/proc/{{pid}}/smaps_rollup") as rollup:
            return next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0
def children():
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{{task}}/children") as listed:
            found += listed.read().split()
    return found
last_sample = [0.0]
def rss(force=False):  # the reading process and its worker processes, shared pages split between them (PSS)
    now = time.perf_counter()
    if not force and now - last_sample[0] < 0.5:  # at most twice a second: reading smaps costs milliseconds
        return 0
    last_sample[0] = now
    return pss("self") + sum(pss(child) for child in children())
if workers:
    import torch
transform = resize_center_chw if row == "clip" else rrc_flip_chw
def decoded(data):
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
def user(sample):  # what a LitData or mosaic user writes for the row
    data = sample["jpg"]  # LitData hands out a memoryview
    if row == "raw":
        return data, sample["cls"]
    if row == "rawbytes":
        return bytes(data), sample["cls"]
    if row == "decode":
        return decoded(data), sample["cls"]
    return transform(Image.open(io.BytesIO(data)).convert("RGB")), sample["cls"]
if system == "wds":  # imports first: what is timed starts at making the dataset
    import wds_torch as wds
elif system == "webdataset":
    import webdataset as wds
elif system == "litdata":
    import litdata
elif system == "hf":
    import datasets
elif system == "energon":
    from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset
    from megatron.energon.flavors.webdataset.sample_decoder import SampleDecoder
elif system == "spdl":
    import glob
    import spdl.io
    from spdl.pipeline import PipelineBuilder
else:
    import streaming
    from streaming.base.util import clean_stale_shared_memory
rss0 = peak = rss(force=True)
started = time.perf_counter()
cpu0 = os.times()
if system in ("wds", "webdataset"):
    views = {{"zero_copy": True}} if system == "wds" and row == "raw" else {{}}
    dataset = wds.WebDataset(where, shardshuffle=False, **views)
    if row.startswith("raw"):
        dataset = dataset.to_tuple("jpg", "cls")
    elif row == "decode":
        dataset = dataset.decode("rgb8").to_tuple("jpg", "cls")
    elif system == "wds":
        crop = {{"policy": "center"}} if row == "clip" else {{"flip": 0.5}}
        threads = 2 if row == "threads" else 0
        dataset = dataset.crop_images(224, layout="chw", num_threads=threads, **crop).to_tuple("jpg", "cls")
    else:
        dataset = dataset.decode("pil").to_tuple("jpg", "cls").map_tuple(transform, int)
elif system == "litdata":  # their docs: subclass the dataset, transform in __getitem__
    class Transformed(litdata.StreamingDataset):
        def __getitem__(self, index):
            return user(super().__getitem__(index))
    dataset = Transformed(where)
elif system == "hf":  # their docs: load_dataset("webdataset", data_files=..., streaming=True), then map
    import glob
    files = sorted(glob.glob(where.split("{{")[0] + "*.tar"))
    dataset = datasets.load_dataset("webdataset", data_files={{"train": files}}, split="train", streaming=True)
    if row.startswith("raw"):  # the bytes as stored, not a PIL image
        dataset = dataset.cast_column("jpg", datasets.Image(decode=False))
    def hf_user(sample):
        image = sample["jpg"]
        if row.startswith("raw"):
            return {{"image": image["bytes"], "label": sample["cls"]}}
        image = image.convert("RGB")
        return {{"image": np.asarray(image) if row == "decode" else transform(image), "label": sample["cls"]}}
    dataset = dataset.map(hf_user, remove_columns=["jpg", "cls", "txt", "__key__", "__url__"])
    if not workers:
        dataset = map(lambda s: (s["image"], s["label"]), dataset) if epochs == 1 else dataset
elif system == "energon":  # its docs: a task encoder, batches made by the dataset, get_loader (workers in its config)
    class Encoder(DefaultTaskEncoder):
        decoder = None if row.startswith("raw") else SampleDecoder(image_decode="rgb8" if row == "decode" else "pil")
        def encode_sample(self, sample):
            if row == "rawbytes":
                sample.image = bytes(sample.image)
            elif row not in ("raw", "decode"):
                sample.image = transform(sample.image.convert("RGB"))
            return sample
    config = WorkerConfig(rank=0, world_size=1, num_workers=workers)
    dataset = get_val_dataset(where, split_part="train", worker_config=config, batch_size=64, task_encoder=Encoder())
    loader = get_loader(dataset)
    items = ((image, label) for _ in range(epochs) for b in loader for image, label in zip(b.image, b.label))
elif system == "spdl":  # its docs: a PipelineBuilder, tars read by spdl.io.iter_tarfile, work in its thread stages
    files = sorted(glob.glob(where.split("{{")[0] + "*.tar"))
    def shard_samples(path):
        with open(path, "rb") as shard:
            data = shard.read()
        key, sample = None, {{}}
        for name, value in spdl.io.iter_tarfile(data):  # views of data
            k, _, ext = name.partition(".")
            if k != key and sample:
                yield sample
                sample = {{}}
            key, sample[ext] = k, value
        if sample:
            yield sample
    def spdl_user(sample):
        data, label = sample["jpg"], int(bytes(sample["cls"]))
        if row.startswith("raw"):
            return (bytes(data) if row == "rawbytes" else data), label
        if row == "decode":  # its image loader (FFmpeg), RGB by default
            return spdl.io.to_numpy(spdl.io.load_image(bytes(data))), label
        return transform(Image.open(io.BytesIO(data)).convert("RGB")), label
    def spdl_batch(samples):  # its docs: aggregate, then work on a batch per task
        return [spdl_user(sample) for sample in samples]
    threads = 2 if row == "threads" else 1
    def spdl_epoch():
        pipeline = (PipelineBuilder().add_source(files).pipe(shard_samples).aggregate(64)
                    .pipe(spdl_batch, concurrency=threads, output_order="input").add_sink(4).build(num_threads=threads))
        with pipeline.auto_stop():
            for batch in pipeline:
                yield from batch
    items = (item for _ in range(epochs) for item in spdl_epoch())
else:
    clean_stale_shared_memory()
    class Transformed(streaming.StreamingDataset):
        def __getitem__(self, index):
            return user(super().__getitem__(index))
    dataset = Transformed(local=where, shuffle=False, batch_size=64)
if system in ("energon", "spdl"):
    pass  # their own loaders, above
elif workers:
    def collate(batch):
        return np.stack([image for image, _ in batch]), [int(label) for _, label in batch]
    if system == "litdata":
        loader = litdata.StreamingDataLoader(dataset, batch_size=64, num_workers=2, collate_fn=collate)
    elif system in ("wds", "webdataset"):
        loader = torch.utils.data.DataLoader(dataset.batched(64, collation_fn=collate), batch_size=None,
                                             num_workers=2)
    elif system == "hf":
        loader = torch.utils.data.DataLoader(dataset, batch_size=64, num_workers=2,
                                             collate_fn=lambda b: collate([(s["image"], s["label"]) for s in b]))
    else:
        loader = torch.utils.data.DataLoader(dataset, batch_size=64, num_workers=2, collate_fn=collate)
    items = ((image, label) for images, labels in loader for image, label in zip(images, labels))
elif system == "hf" and epochs > 1:
    items = ((s["image"], s["label"]) for _ in range(epochs) for s in dataset)
else:
    items = (item for _ in range(epochs) for item in dataset)
first = None
n = labels = 0
for image, label in items:
    if first is None:
        first = time.perf_counter() - started
    n += 1
    labels += int(label)
    if row == "decode":
        assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8, image.shape
    elif not row.startswith("raw"):
        assert tuple(image.shape) == (3, 224, 224), image.shape
    if n % 256 == 0:
        peak = max(peak, rss())
seconds = time.perf_counter() - started
cpu1 = os.times()
cpu = (cpu1.user + cpu1.system + cpu1.children_user + cpu1.children_system) - sum(cpu0[:4])
print(json.dumps({{"n": n, "labels": labels, "seconds": seconds, "first": first, "cpu": cpu,
                  "rss_mb": (max(peak, rss(force=True)) - rss0) / 1e6}}))
"""


def run(system: str, row: str, where: str) -> dict:
    cache = tempfile.mkdtemp(prefix=f"bench-peers-{system}-")
    try:
        code = READ.format(here=HERE, system=system, row=row, where=where, cache=cache,
                           raw_epochs=RAW_EPOCHS)  # fmt: skip
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT)
        if out.returncode:
            raise RuntimeError(f"{system} failed:\n{out.stderr.strip()[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def peers(args: argparse.Namespace, row: str) -> list[dict]:
    """One row of the comparison: every system chosen, in turns, a fresh process a run."""
    made = write_sets(os.path.join(args.data, "peers"), args.images)
    expected = sum(i % 10 for i in range(args.images))
    label = ROWS[row]
    formats = made["clip" if row == "clip" else "imagenet"]
    chosen = [s for s in SYSTEMS if s in args.only.split(",")]
    skipped: dict[str, str] = {}
    places: dict[str, str] = {}
    for system in chosen:
        where = formats.get("tar" if system in ("wds", "webdataset", "hf", "spdl") else system)
        if importlib.util.find_spec({"hf": "datasets", "spdl": "spdl"}.get(system, "json")) is None:
            where = None
        if row == "threads" and system not in ("wds", "spdl") or row == "loader" and system == "spdl":
            skipped[system] = "no such option"
        elif where is None:
            skipped[system] = "not installed"
        else:
            places[system] = where
    # the systems take turns, round after round, each round in another order: this machine's speed drifts by
    # 20-40% over minutes, which would otherwise favour whichever system ran in a fast spell (a fresh process a
    # run, with its first-sample time, CPU and memory: more than harness.turns keeps)
    results: dict[str, list[dict]] = {system: [] for system in places}
    for round_number in range(harness.repeats(args, 3)):
        shift = round_number % max(len(places), 1)
        for system in list(places)[shift:] + list(places)[:shift]:
            if system in skipped:
                continue
            try:
                results[system].append(run(system, row, places[system]))
            except (RuntimeError, subprocess.TimeoutExpired) as exn:
                said = str(exn).strip().splitlines()[-1][:150] if str(exn).strip() else type(exn).__name__
                skipped[system] = f"failed: {said}"
    rates: dict[str, float] = {}
    rows = []
    for system in chosen:
        if system in skipped:
            rows.append({"row": label, "system": system, "samples/s": skipped[system]})
            continue
        runs = results[system]
        samples = args.images * (RAW_EPOCHS if row.startswith("raw") else 1)
        wrong = [r for r in runs if r["n"] != samples or r["labels"] != expected * samples // args.images]
        if wrong:  # a system that dropped samples (SPDL's pipeline logs a failing stage and goes on) has no rate
            rows.append({"row": label, "system": system,
                         "samples/s": f"failed: {wrong[0]['n']} samples of {samples}, or wrong labels"})  # fmt: skip
            continue
        best = min(runs, key=lambda r: r["seconds"])
        rates[system] = samples / best["seconds"]
        rows.append({
            "row": label, "system": system, "samples/s": rates[system],
            "vs webdataset": harness.times(rates[system], rates["webdataset"]) if "webdataset" in rates else "",
            "first sample": f"{min(r['first'] for r in runs):.3f} s",
            "CPU s / 1,000 samples": f"{1000 * best['cpu'] / samples:.2f}",
            "peak memory growth": f"{best['rss_mb']:.0f} MB",
        })  # fmt: skip
    DRAWN[label] = rates
    return rows


DRAWN: dict[str, dict[str, float]] = {}  # samples/s by row and system, for --svg


def _profiled_pipeline(where: str, row: str):
    import wds_core as wds

    if row == "raw":
        return wds.WebDataset(where, reading=wds.ShardReadOptions(zero_copy=True)).to_tuple("jpg", "cls")
    if row == "bytes":
        return wds.WebDataset(where).to_tuple("jpg", "cls")
    return wds.WebDataset(where).decode("rgb8").to_tuple("jpg", "cls")


def _profiled_run(where: str, row: str, epochs: int, profiled: bool) -> tuple[float, float, dict | None]:
    """Samples/s, CPU seconds of this process a sample, and the profile's report."""
    import wds_core as wds

    dataset = _profiled_pipeline(where, row)
    count = 0
    started, cpu = time.perf_counter(), time.process_time()
    profile = wds.Profile(dataset).start() if profiled else None
    for _ in range(epochs):
        for _item in dataset:
            count += 1
    if profile is not None:
        profile.stop()
    rate = count / (time.perf_counter() - started)
    return rate, (time.process_time() - cpu) / count, profile.report() if profile is not None else None


def profile(args: argparse.Namespace) -> list[dict]:
    where = harness.captioned_photo_shards(os.path.join(args.data, "peers"), "imagenet", args.images, 375, 500)
    print(f"{where}, runs of about {args.seconds:g} s, {args.rounds} runs each way")
    rows = []
    for row in ("raw", "bytes", "decode"):
        _profiled_run(where, row, 1, False)  # warm: imports, page cache
        rate = _profiled_run(where, row, 1, False)[0]
        epochs = max(1, round(args.seconds * rate / args.images))
        off, on, sums = [], [], []
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(args.rounds):
            for profiled in (False, True) if round_ % 2 == 0 else (True, False):
                rate, seconds, report = _profiled_run(where, row, epochs, profiled)
                (on if profiled else off).append(rate)
                cpu[profiled].append(seconds)
                if report is not None:  # the wall time the looks cover (the stages' times are scaled to all of it)
                    sums.append(report["sampled_seconds"] / report["wall_seconds"])
        cost = 1 - statistics.median(on) / statistics.median(off)
        cpu_cost = statistics.median(cpu[True]) / statistics.median(cpu[False]) - 1
        rows.append({
            "row": row, "off: best / median samples/s": f"{max(off):,.0f} / {statistics.median(off):,.0f}",
            "on: best / median samples/s": f"{max(on):,.0f} / {statistics.median(on):,.0f}",
            "rate lost (medians)": f"{100 * cost:.1f}%", "CPU a sample added (medians)": f"{100 * cpu_cost:.1f}%",
            "sampled / wall": f"{min(sums):.3f}-{max(sums):.3f}",
        })  # fmt: skip
    return rows


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", type=int, default=2000, help="JPEGs a set")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated systems")
    parser.add_argument("--svg", default="", help="also draw the rates as bars into this SVG file")
    parser.add_argument("--rounds", type=int, default=24, help="runs each way (profile)")
    parser.add_argument("--seconds", type=float, default=0.2, help="how long a run lasts, about (profile)")


def main() -> None:
    sections = {row: (lambda args, row=row: peers(args, row)) for row in ROWS}
    extras = [name for name, module in (("jpeg", "simplejpeg"), ("cv", "cv2")) if importlib.util.find_spec(module)]
    print(f"# JPEGs per set: imagenet 500x375, clip 512x512, quality 90, with a label and a caption; local disk, warm "
          f"page cache; best of --repeats rounds taken in turns, a fresh process each; wds extras: "
          f"{', '.join(extras) or 'none'}")  # fmt: skip
    args, _ = harness.run(__doc__, {**sections, "profile": profile}, options)
    if args.svg and DRAWN:
        write_svg(args.svg, {label: rates for label, rates in DRAWN.items() if rates}, args.images)


def write_svg(path: str, rows: dict[str, dict[str, float]], images: int) -> None:
    """One group of bars per row, one bar per system, as long as its samples/s within the row (no plotting
    library); each bar says its samples/s and how many times webdataset's."""
    bar, gap, label_w, panel_w = 16, 3, 110, 420
    colours = {
        "wds": "#2b7bb9",
        "webdataset": "#888888",
        "litdata": "#c9a227",
        "mosaic": "#b0b0b0",
        "hf": "#d9822b",
        "energon": "#76b900",
        "spdl": "#7e57c2",
    }
    height = 50 + sum(len(rates) * (bar + gap) + 28 for rates in rows.values())
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + panel_w + 230}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="8" y="18" font-weight="bold">Samples/s on local disk, {images} JPEGs per set (more is better; '
        "bench_peers.py)</text>",
    ]
    y = 40
    for label, rates in rows.items():
        parts.append(f'<text x="8" y="{y + 10}" font-weight="bold">{label}</text>')
        y += 16
        most = max(rates.values())
        for system, rate in rates.items():
            width = panel_w * rate / most
            parts.append(f'<text x="16" y="{y + 12}">{system}</text>')
            parts.append(f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar}" '
                         f'fill="{colours.get(system, "#aaaaaa")}"/>')  # fmt: skip
            versus = f" ({rate / rates['webdataset']:.2f}x webdataset)" if "webdataset" in rates else ""
            parts.append(f'<text x="{label_w + width + 4:.1f}" y="{y + 12}">{rate:,.0f}{versus}</text>')
            y += bar + gap
        y += 12
    parts.append("</svg>")
    with open(path, "w") as out:
        out.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
