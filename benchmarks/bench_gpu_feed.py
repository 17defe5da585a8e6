"""Keeping a GPU fed (issue 48): ImageNet-style input into a real training step, three ways, in the same run.

The data: photo-like 500x375 JPEGs with a class (``--images``, in 16 shards, made once under ``--data`` by as many
processes as there are cores).  Each system reads them resampled (an endless stream: no epoch ends inside a
measurement) through a ``torch.utils.data.DataLoader`` with ``pin_memory=True`` and persistent workers, in batches
of ``--batch``, and ends in uint8 3x224x224 images (random-resized-crop and a random flip) with their labels on the
device:

* ``webdataset``: webdataset 1.x ``decode("pil")`` and torchvision's ``RandomResizedCrop(224)``,
  ``RandomHorizontalFlip()``, ``PILToTensor()`` in the workers (the usual recipe);
* ``wds``: ``crop_images(224, flip=0.5, layout="chw")`` in the workers (decoded at the smallest JPEG scale that
  covers the crop);
* ``wds-gpu``: ``crop_images(..., device="cuda")`` in the workers (they only read and draw the crops) and
  ``wds_torch.to_device`` in the main process: the batch decoded by nvJPEG and cut on the GPU, the next two
  prepared by a thread on a side stream while the model runs; ``wds-gpu-nvimgcodec`` the same with nvImageCodec's
  decoder (``WDS_DEVICE_DECODER=nvimgcodec``) and ``wds-gpu-nvimgcodec-hw`` with its JPEG engines first
  (``nvimgcodec-hw``), when it is installed;
* ``wds-gpu-split=S``: ``wds-gpu`` with a share ``S`` of each batch cut by the workers on the host
  (``to_device(split=S)``, for each of ``--split``: a number, or ``auto``, whose rows warm up for
  ``--split-warmup`` steps while the tuner climbs, and say the share it chose).

Sections (``--rows``, all by default):

* ``plans``: what the GPU path asks of the CPUs, on any machine: batches of planned crops (the JPEGs' bytes and
  their boxes, nothing decoded) taken from ``crop_images(..., device="cuda")`` in the workers into the main
  process, images/s and CPU cores, for each of ``--workers`` (the feed's ceiling before the GPU's decoding);
* ``decode``: the GPU's part alone, in the main process on batches of planned crops already in memory: images/s
  decoded (``wds_torch.devicecut.decode_planned``), and decoded and cut (``cut_planned``), for each GPU decoder
  (nvJPEG through torchvision; nvImageCodec when it is installed);
* ``loader``: the loader alone, images/s: batches into pinned memory (``webdataset``, ``wds``), or decoded and cut on
  the device (``wds-gpu``), for each of ``--workers``;
* ``train``: each of ``--models`` (torchvision's, random init; ``bfloat16`` autocast, ``channels_last``, SGD) trained
  for ``--steps`` steps after ``--warmup``, the step synchronised: images/s, the share of the step spent waiting for
  data, the CPU cores the process and its workers used, the share cut on the host (``split`` rows), and the same
  step on a synthetic batch already on the device (the ceiling) measured in the same run.

Without CUDA the sections but ``plans`` say so and stop, unless ``--device cpu``: the same code on the CPU
(``--models tiny``, a small CNN, for a quick check of the script itself).  Needs torch and torchvision (and
webdataset for its rows, skipped and said so when missing); nothing from the network.  On a GPU machine with torch
and torchvision but without wds's other dependencies or the network, ``bash benchmarks/gpu_feed_wheels.sh``
fetches (here) the wheels it needs into ``.whl/`` and says the one command to run there: install them into
``/tmp/site`` and run this script from the checkout with ``PYTHONPATH=/tmp/site:.`` (the compiled helpers are not
needed: their Python twins run).  The defaults take about five minutes on an H100 with 16 cores.

    python benchmarks/bench_gpu_feed.py [--rows plans,decode,loader,train] [--workers 2,4,8,16]
        [--models resnet18,resnet50] [--systems webdataset,wds,wds-gpu,wds-gpu-split] [--split 0.25,auto]
        [--batch 256] [--steps 30] [--warmup 8] [--split-warmup 160] [--images 4096] [--device cuda]
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import harness

SHARDS = 16
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _one_shard(task: tuple[str, int, int]) -> str:
    root, index, count = task
    return harness.photo_shards(root, f"gpu-feed-{index:02d}", count, 375, 500, shards=1, seed=index)


def make_shards(args) -> list[str]:
    """``--images`` photo-like JPEGs in 16 shards (made once, a process per core); their paths."""
    root = os.path.join(args.data, f"gpu-feed-{args.images}")
    per_shard = -(-args.images // SHARDS)
    tasks = [(root, index, per_shard) for index in range(SHARDS)]
    with ProcessPoolExecutor(min(SHARDS, os.cpu_count() or 1)) as pool:
        specs = list(pool.map(_one_shard, tasks))
    return [spec.replace("{0000..0000}", "0000") for spec in specs]


def _label(value: Any) -> int:
    return int(value)


def _torchvision_train() -> Any:
    """torchvision's train transform to a uint8 CHW tensor; harness's Pillow twin where torchvision is missing."""
    try:
        from torchvision import transforms
    except ImportError:
        return harness.rrc_flip_chw
    return transforms.Compose(
        [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(), transforms.PILToTensor()]
    )


def dataset(system: str, shards: list[str], batch: int, device: str) -> Any:
    """The system's endless stream of batches ``(images, labels)`` (see the module doc)."""
    if system == "webdataset":
        import webdataset

        pipeline = webdataset.WebDataset(shards, resampled=True, shardshuffle=False).shuffle(1000)
        pipeline = pipeline.decode("pil").to_tuple("jpg", "cls").map_tuple(_torchvision_train(), _label)
        return pipeline.batched(batch)
    import wds_torch

    pipeline = wds_torch.WebDataset.resampled(shards, seed=0).shuffle(1000)
    crop = {"device": device} if system.startswith("wds-gpu") else {}
    pipeline = pipeline.crop_images(224, flip=0.5, layout="chw", **crop).to_tuple("jpg", "cls")
    return pipeline.map_tuple(_identity, _label).batched(batch)


def _identity(value: Any) -> Any:
    return value


def loader(system: str, shards: list[str], args, workers: int) -> Any:
    import torch

    data = dataset(system, shards, args.batch, args.device)
    return torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers, pin_memory=True,
                                       persistent_workers=True, prefetch_factor=4)  # fmt: skip


def feed(system: str, batches: Any, device: Any, seen: dict | None = None) -> Any:
    """Batches ``(uint8 images, int64 labels)`` on ``device`` (``seen["moved"]``: what ``to_device`` gave)."""
    import torch

    import wds_torch

    if system.startswith("wds-gpu"):
        split = system.split("=", 1)[1] if "=" in system else None
        moved = wds_torch.to_device(batches, device, split=split if split in (None, "auto") else float(split))
        if seen is not None:
            seen["moved"] = moved
        for images, labels in moved:
            yield images, labels.long()
        return
    for images, labels in batches:
        images = torch.as_tensor(images).to(device, non_blocking=True)
        yield images, torch.as_tensor(labels).to(device, non_blocking=True).long()


def _cpu_seconds() -> float:
    """CPU seconds of this process and its children (the DataLoader's workers), alive or not (Linux)."""
    total = 0.0
    pids = ["self"]
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as listed:
                pids += listed.read().split()
        except OSError:
            pass
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError):
            pass
    return total


def _synchronize(device: Any) -> None:
    import torch

    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def _with_nvimgcodec(args) -> bool:
    """Whether nvImageCodec's rows run: on a GPU, where it is installed."""
    return args.device != "cpu" and importlib.util.find_spec("nvidia.nvimgcodec") is not None


def _systems(args) -> list[str]:
    chosen = args.systems.split(",")
    if "wds-gpu" in chosen and _with_nvimgcodec(args) and args.decoder == "torchvision":
        chosen += ["wds-gpu-nvimgcodec", "wds-gpu-nvimgcodec-hw"]
    if "wds-gpu-split" in chosen:
        chosen.remove("wds-gpu-split")
        chosen += [f"wds-gpu-split={share}" for share in args.split]
    kept = []
    for system in chosen:
        if system == "webdataset" and importlib.util.find_spec("webdataset") is None:
            print("(webdataset is not installed: its rows are skipped; pip install webdataset==1.0.2)")
            continue
        kept.append(system)
    return kept


def _decoder(system: str, args) -> None:
    """The GPU decoder of ``system``'s rows: the one its name ends with, else ``--decoder`` (where nvImageCodec is
    missing, ``torchvision``'s nvJPEG, said once)."""
    for name in ("nvimgcodec-hw", "nvimgcodec"):
        if system.endswith(name):
            os.environ["WDS_DEVICE_DECODER"] = name
            return
    chosen = args.decoder
    if chosen.startswith("nvimgcodec") and not _with_nvimgcodec(args):
        if not getattr(args, "said_missing", False):
            print(f"(nvImageCodec is not installed here: the rows of --decoder {chosen} decode with torchvision)")
            args.said_missing = True
        chosen = "torchvision"
    os.environ["WDS_DEVICE_DECODER"] = chosen


def _ready(args) -> Any:
    import torch

    if args.device != "cpu" and not torch.cuda.is_available():
        print("no CUDA device here: nothing measured (--device cpu runs the same code on the CPU, as a check)")
        return None
    return torch.device(args.device)


def _run_row(rows: list[dict], row: dict, measure: Any) -> None:
    """``row`` with what ``measure()`` gives, or with the error it raised: one system that fails on a machine
    this script has not met (a decoder's version, a driver) costs its own rows, not the run's."""
    try:
        row.update(measure())
    except Exception as exn:  # the loader and its workers go with the frames of the traceback, dropped here
        row["error"] = f"{type(exn).__name__}: {exn}"[:400]
    rows.append(row)
    print(row, flush=True)


def plans_rows(args) -> list[dict]:
    shards = make_shards(args)
    rows: list[dict] = []
    for workers in args.workers:
        row = {"system": "wds planned crops", "workers": workers}
        _run_row(rows, row, functools.partial(_plans_taken, shards, args, workers))
    return rows


def _plans_taken(shards: list[str], args, workers: int) -> dict:
    rate, cores = _taken(iter(loader("wds-gpu", shards, args, workers)), args, None)  # planned crops: nothing decoded
    return {"images/s": rate, "CPU cores used": cores}


def decode_rows(args) -> list[dict] | None:
    device = _ready(args)
    if device is None:
        return None
    source = iter(dataset("wds-gpu", make_shards(args), args.batch, args.device))
    batches = [next(source)[0] for _ in range(min(args.steps, 8))]  # planned crops, in memory
    decoders = ["torchvision"] + (["nvimgcodec", "nvimgcodec-hw"] if _with_nvimgcodec(args) else [])
    rows: list[dict] = []
    for decoder in decoders if device.type == "cuda" else ["wds (the CPU twin)"]:
        os.environ["WDS_DEVICE_DECODER"] = decoder if device.type == "cuda" else "torchvision"
        _run_row(rows, {"decoder": decoder}, functools.partial(_decoding, batches, device, args))
    return rows


def _decoding(batches: list[Any], device: Any, args) -> dict:
    from wds_torch.devicecut import cut_planned, decode_planned

    rates = {}
    for name, work in (("decoded", decode_planned), ("decoded and cut", cut_planned)):
        for batch in batches[:2]:
            work(batch, device)
        _synchronize(device)
        started, images = time.perf_counter(), 0
        for step in range(args.steps):
            batch = batches[step % len(batches)]
            work(batch, device)
            images += len(batch)
        _synchronize(device)
        rates[f"{name}, images/s"] = images / (time.perf_counter() - started)
    return rates


def loader_rows(args) -> list[dict] | None:
    device = _ready(args)
    if device is None:
        return None
    shards = make_shards(args)
    rows: list[dict] = []
    for system in _systems(args):
        _decoder(system, args)
        for workers in args.workers:
            row = {"system": system, "workers": workers}
            _run_row(rows, row, functools.partial(_loader_alone, system, shards, args, workers, device))
    return rows


def _loader_alone(system: str, shards: list[str], args, workers: int, device: Any) -> dict:
    batches = loader(system, shards, args, workers)
    seen: dict = {}
    source = feed(system, batches, device, seen) if system.startswith("wds-gpu") else iter(batches)
    rate, cores = _taken(source, args, device)
    row = {"images/s": rate, "into": "the device" if system.startswith("wds-gpu") else "pinned memory",
           "CPU cores used": cores}  # fmt: skip
    return {**row, **_prepared(seen)}


def _prepared(seen: dict) -> dict:
    """Where the thread preparing wds-gpu's batches spent its time (``to_device``'s ``feed_report``): waiting for
    the loader, preparing (and the share of that on a CPU), waiting for the loop to take them."""
    if "moved" not in seen:
        return {}
    said = seen["moved"].feed_report()
    wall = said["wall_seconds"] or 1e-9
    preparing = said["preparing_seconds"] or 1e-9
    return {"prep: loader / preparing (on a CPU) / loop": f"{said['loader_seconds'] / wall:.0%} / "
            f"{said['preparing_seconds'] / wall:.0%} ({said['preparing_cpu_seconds'] / preparing:.0%}) / "
            f"{said['consumer_seconds'] / wall:.0%}"}  # fmt: skip


def _taken(source: Any, args, device: Any) -> tuple[float, float]:
    """Images/s and CPU cores (this process and its workers) of ``--steps`` batches ``(images, ...)`` taken from
    ``source`` after ``--warmup``, the device's work included."""
    for _ in range(args.warmup):
        next(source)
    _synchronize(device)
    started, cpu = time.perf_counter(), _cpu_seconds()
    images = sum(len(next(source)[0]) for _ in range(args.steps))
    _synchronize(device)
    seconds = time.perf_counter() - started
    return images / seconds, round((_cpu_seconds() - cpu) / seconds, 1)


def _model(name: str, device: Any) -> Any:
    import torch

    if name == "tiny":
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 7, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(16, 1000),
        )  # fmt: skip
    else:
        import torchvision

        model = getattr(torchvision.models, name)()
    return model.to(device, memory_format=torch.channels_last)


def _trainer(name: str, device: Any) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    model = _model(name, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1) * 255
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)

    def step(images: Any, labels: Any) -> None:
        x = ((images.float() - mean) / std).contiguous(memory_format=torch.channels_last)
        with autocast:
            loss = F.cross_entropy(model(x), labels % 1000)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def _ceiling(name: str, args, device: Any) -> float:
    import torch

    step = _trainer(name, device)
    images = torch.randint(0, 256, (args.batch, 3, 224, 224), dtype=torch.uint8, device=device)
    labels = torch.randint(0, 1000, (args.batch,), device=device)
    for _ in range(args.warmup):
        step(images, labels)
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(args.steps):
        step(images, labels)
        _synchronize(device)
    return args.steps * args.batch / (time.perf_counter() - started)


def train_rows(args) -> list[dict] | None:
    device = _ready(args)
    if device is None:
        return None
    shards = make_shards(args)
    rows: list[dict] = []
    for name in args.models:
        ceiling = _ceiling(name, args, device)
        rows.append({"model": name, "system": "ceiling: a synthetic batch on the device", "workers": "",
                     "images/s": ceiling, "of the ceiling": "100%"})  # fmt: skip
        print(rows[-1], flush=True)
        for system in _systems(args):
            _decoder(system, args)
            for workers in args.workers:
                row = {"model": name, "system": system, "workers": workers}
                measure = functools.partial(_training, name, system, shards, args, workers, device, ceiling)
                _run_row(rows, row, measure)
    return rows


def _training(name: str, system: str, shards: list[str], args, workers: int, device: Any, ceiling: float) -> dict:
    step = _trainer(name, device)
    seen: dict = {}
    source = feed(system, loader(system, shards, args, workers), device, seen)
    for _ in range(args.split_warmup if system.endswith("=auto") else args.warmup):
        step(*next(source))
    _synchronize(device)
    waited = 0.0
    started, cpu = time.perf_counter(), _cpu_seconds()
    for _ in range(args.steps):
        asked = time.perf_counter()
        images, labels = next(source)
        waited += time.perf_counter() - asked
        step(images, labels)
        _synchronize(device)
    seconds = time.perf_counter() - started
    rate = args.steps * args.batch / seconds
    row = {"images/s": rate, "of the ceiling": f"{rate / ceiling:.0%}", "waiting for data": f"{waited / seconds:.0%}",
           "CPU cores used": round((_cpu_seconds() - cpu) / seconds, 1)}  # fmt: skip
    split = seen["moved"].split_report() if "moved" in seen else None
    if split is not None:
        row["split"] = f"{split['share']:.2f}" + (" (auto)" if split["mode"] == "auto" else "")
    return {**row, **_prepared(seen)}


def options(parser) -> None:
    parser.add_argument("--workers", type=lambda text: [int(w) for w in text.split(",")], default=[2, 4, 8, 16])
    parser.add_argument("--models", type=lambda text: text.split(","), default=["resnet18", "resnet50"])
    parser.add_argument("--systems", default="webdataset,wds,wds-gpu,wds-gpu-split",
                        help="of webdataset, wds, wds-gpu, wds-gpu-split")  # fmt: skip
    parser.add_argument("--split", type=lambda text: text.split(","), default=["0.25", "auto"],
                        help="the shares of the wds-gpu-split rows: numbers, or auto")  # fmt: skip
    parser.add_argument("--split-warmup", type=int, default=160, help="steps before measuring a split=auto row")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=30, help="measured steps (batches) a run")
    parser.add_argument("--warmup", type=int, default=8, help="steps before measuring (workers start, caches fill)")
    parser.add_argument("--images", type=int, default=4096, help="JPEGs in the data set (read resampled)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--decoder", default="torchvision", choices=["torchvision", "nvimgcodec", "nvimgcodec-hw"],
                        help="the GPU decoder of every wds-gpu row (torchvision: with rows for nvImageCodec's too, "
                        "where it is installed)")  # fmt: skip


if __name__ == "__main__":
    sections = {"plans": plans_rows, "decode": decode_rows, "loader": loader_rows, "train": train_rows}
    harness.run(__doc__, sections, options)
