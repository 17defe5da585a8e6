"""What every benchmark shares: datasets made once and kept, systems timed in turns, a stamp of the run, JSON.

A script run as ``python benchmarks/SCRIPT.py`` imports this as ``harness`` (its folder is on ``sys.path``).

* **Datasets** -- :func:`photo` draws the photo-like images every image benchmark uses (smooth colour fields
  with a fine texture, which JPEG compresses as it does photographs, unlike noise or flat colour);
  :func:`jpeg_shards` writes ``n`` of them as JPEG samples once under ``--data`` (default ``/tmp/wds-bench``,
  or ``WDS_BENCH_DATA``) and reuses them afterwards, whichever script asks.
* **Timing** -- :func:`turns` runs each system once per round, in an order that rotates from round to round, so
  that a slow spell of the machine falls on all of them; each system's rates are kept, and :class:`Rates` gives
  the best and the median.
* **Stamp** -- :func:`stamp`: the date, the commit (``+`` when the tree differs from it), the machine, its cores
  and memory, Python, and the installed version of wds and of every peer (read from the installed metadata,
  nothing imported).
* **Output** -- :func:`report` prints a Markdown table (the form of ``benchmarks/README.md``) and the stamp, and
  writes both to ``--json PATH`` when asked.
* **Families** -- each script is a family of sections (``--rows a,b``; all by default), one per table of the
  results page: :func:`run` parses the command line, runs the sections chosen, prints each one's table under its
  name, then the stamp; with ``--json`` every section's rows and the stamp.
* **Shared data and servers** -- :func:`indexed_shards` (the 10 shards of ~10 KB samples and the 1 GB shard the
  indexed, resume, mixing and scale-out sections read); :func:`servers` gives ``tests/servers.py`` (the shaped
  HTTP, S3 and misbehaving servers the tests use), the one place a benchmark reaches outside this folder.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np
from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("WDS_BENCH_DATA", "/tmp/wds-bench")
#: the packages whose versions a stamp records (the peers are measured by bench_peers.py and bench_store.py)
PACKAGES = (
    "wds", "webdataset", "wids", "litdata", "mosaicml-streaming", "megatron-energon", "spdl", "datasets",
    "torch", "torchvision", "torchdata", "jax", "tensorflow-cpu", "numpy", "pillow", "simplejpeg",
    "opencv-python-headless", "fsspec", "s3fs",
)  # fmt: skip


def arguments(doc: str, repeats: int | None = 3) -> argparse.ArgumentParser:
    """A parser with the options every benchmark takes: ``--repeats``, ``--data``, ``--json``; add your own.
    ``repeats=None``: each section has its own default (:func:`repeats`)."""
    parser = argparse.ArgumentParser(
        description=doc.strip().splitlines()[0], epilog=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=repeats, help="rounds; each system runs once a round")
    parser.add_argument("--data", "--dir", default=DATA, help="where datasets are written once and kept")
    parser.add_argument("--json", metavar="PATH", help="also write the results and the stamp here")
    return parser


def repeats(args: argparse.Namespace, default: int) -> int:
    """``--repeats`` when given, else the section's own ``default``."""
    return args.repeats if args.repeats is not None else default


Section = Callable[[argparse.Namespace], "list[dict[str, Any]] | None"]


def run(
    doc: str,
    sections: dict[str, Section],
    options: Callable[[argparse.ArgumentParser], None] | None = None,
    default: Iterable[str] | None = None,
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """A family's command line: ``--rows`` picks sections (``default``, else all), ``options`` adds the family's
    own; each section runs in turn and returns its table's rows (or prints its own table and returns ``None``).
    The arguments and ``{section: rows}``."""
    parser = arguments(doc, repeats=None)
    rows = ",".join(default if default is not None else sections)
    parser.add_argument("--rows", default=rows, help=f"sections to run (default {rows}), of: {', '.join(sections)}")
    if options is not None:
        options(parser)
    args = parser.parse_args()
    chosen = [name.strip() for name in args.rows.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in sections]
    if unknown:
        parser.error(f"no section {', '.join(unknown)}; there are: {', '.join(sections)}")
    os.makedirs(args.data, exist_ok=True)
    results: dict[str, Any] = {}
    for name in chosen:
        print(f"\n## {name}\n", flush=True)
        started = time.perf_counter()
        rows = sections[name](args)
        if rows is not None:
            print(table(rows), flush=True)
            results[name] = rows
        print(f"\n({name}: {time.perf_counter() - started:.0f} s)", flush=True)
    report([], args, sections=results)
    return args, results


def servers() -> Any:
    """``tests/servers.py``: the shaped and misbehaving HTTP/S3 servers the tests start, for the benchmarks."""
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from tests import servers as module

    return module


# ---------------------------------------------------------------- datasets


def photo(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A ``height x width`` RGB image that JPEG compresses as it does a photograph: smooth colour fields, a texture."""
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    phase = rng.uniform(0, 6, 3)
    base = np.stack([np.sin(9 * x + phase[0]), np.cos(7 * y + phase[1]), np.sin(5 * (x + y) + phase[2])], -1)
    texture = rng.normal(0, 0.035, (height, width, 3))
    return (np.clip(0.5 + 0.4 * base + texture, 0, 1) * 255).astype(np.uint8)


def jpeg_shards(
    prefix: str,
    n: int,
    image: Callable[[np.random.Generator], np.ndarray],
    *,
    shards: int = 2,
    quality: int = 90,
    seed: int = 0,
    fields: Callable[[np.random.Generator, int], dict[str, Any]] | None = None,
) -> str:
    """``n`` samples of a JPEG of ``image(rng)`` and a ``cls`` (and ``fields(rng, i)``) in ``shards`` shards
    ``prefix-0000.tar``...: written once, then reused by whichever benchmark asks; returns the brace spec."""
    import wds_core

    pattern = f"{prefix}-%04d.tar"
    if not os.path.exists(pattern % (shards - 1)):
        os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
        rng = np.random.default_rng(seed)
        with wds_core.ShardWriter(pattern, maxcount=-(-n // shards)) as sink:
            for i in range(n):
                out = io.BytesIO()
                Image.fromarray(image(rng)).save(out, format="JPEG", quality=quality)
                sample = {"__key__": f"img{i:06d}", "jpg": out.getvalue(), "cls": i % 10}
                sink.write({**sample, **(fields(rng, i) if fields else {})})
    return f"{prefix}-{{0000..{shards - 1:04d}}}.tar"


def photo_shards(root: str, name: str, n: int, height: int, width: int, **options: Any) -> str:
    """``n`` photo-like JPEGs of ``height x width`` as ``root/name-NNNN.tar`` (made once); the brace spec."""
    return jpeg_shards(f"{root}/{name}", n, lambda rng: photo(rng, height, width), **options)


def captioned_photo_shards(root: str, name: str, images: int, height: int, width: int) -> str:
    """bench_peers.py's sets: ``images`` photo-like JPEGs with a class and a caption, in 4 shards
    ``root/name-images-NNNN.tar`` (made once, by whichever script asks first); the brace spec."""
    return jpeg_shards(
        f"{root}/{name}-{images}", images, lambda rng: photo(rng, height, width), shards=4,
        fields=lambda rng, i: {"txt": f"a photo of pattern {i} in class {i % 10}"},
    )  # fmt: skip


INDEXED_SHARDS, INDEXED_PER_SHARD = 10, 1000


def _random_shard(path: str, count: int, size: int, seed: int) -> None:
    from wds_core.tar.tarwrite import encode_member, end_of_archive

    rng = random.Random(seed)
    with open(path + ".tmp", "wb") as out:
        for i in range(count):
            key = f"s{seed:03d}-{i:06d}"
            out.write(encode_member(f"{key}.jpg", rng.randbytes(size)))
            out.write(encode_member(f"{key}.cls", b"%d" % (i % 10)))
            out.write(encode_member(f"{key}.json", b'{"i": %d}' % i))
        out.write(end_of_archive())
    os.replace(path + ".tmp", path)


def indexed_shards(root: str) -> tuple[list[str], str]:
    """Under ``root/indexed`` (made once): 10 shards x 1,000 samples (a ~10 KB ``jpg`` of random bytes, a ``cls``,
    a ``json``) and ``big.tar``, 10,000 samples of ~100 KB (1 GB); the 10 paths and the big one."""
    folder = os.path.join(os.path.abspath(root), "indexed")
    os.makedirs(folder, exist_ok=True)
    for s in range(INDEXED_SHARDS):
        path = f"{folder}/shard-{s:03d}.tar"
        if not os.path.exists(path):
            _random_shard(path, INDEXED_PER_SHARD, 10_000, s)
    big = f"{folder}/big.tar"
    if not os.path.exists(big):
        _random_shard(big, 10_000, 100_000, 999)
    return [f"{folder}/shard-{s:03d}.tar" for s in range(INDEXED_SHARDS)], big


# ---------------------------------------------------------------- the transforms webdataset users write


def rrc_flip_chw(img, size=224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop + RandomHorizontalFlip + PILToTensor, on a PIL image, with Pillow (the
    train transform webdataset's users apply after ``decode("pil")``; torchvision's wheels do not load against
    this machine's CPU build of torch)."""
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
    new = (size, int(size * height / width)) if width <= height else (int(size * width / height), size)
    img = img.resize(new, Image.Resampling.BILINEAR)
    left, top = int(round((new[0] - size) / 2.0)), int(round((new[1] - size) / 2.0))
    return np.ascontiguousarray(np.asarray(img.crop((left, top, left + size, top + size))).transpose(2, 0, 1))


# ---------------------------------------------------------------- timing


@dataclass
class Rates:
    """One system's rates (items per second), one a round."""

    values: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return max(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)


def turns(systems: dict[str, Callable[[], int]], repeats: int) -> dict[str, Rates]:
    """Each of ``systems`` (a name: a call that does the work and returns how many items it did) once a round, for
    ``repeats`` rounds, the order rotating each round; ``{name: Rates}``.  Every system's counts must agree."""
    names = list(systems)
    rates = {name: Rates() for name in names}
    counts: dict[str, int] = {}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            start = time.perf_counter()
            counts[name] = systems[name]()
            rates[name].values.append(counts[name] / (time.perf_counter() - start))
    if len(set(counts.values())) > 1:
        raise AssertionError(f"the systems did different amounts of work: {counts}")
    return rates


# ---------------------------------------------------------------- stamp and output


def _commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def stamp() -> dict[str, Any]:
    """When, where and with what a run was made."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        memory = float("nan")
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {
        "date": datetime.date.today().isoformat(),
        "commit": _commit(),
        "machine": f"{_cpu()}, {platform.system()} {platform.machine()}",
        "cores": os.cpu_count(),
        "memory_GiB": round(memory, 1),
        "python": platform.python_version(),
        "versions": versions,
        "command": " ".join(["python", os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]]),
    }


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def table(rows: Iterable[dict[str, Any]]) -> str:
    """The rows (dicts) as a Markdown table: a column for every key, in the order the keys first come."""
    rows = list(rows)
    if not rows:
        return ""
    headers = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(row.get(h, "")) for h in headers) + " |" for row in rows]
    return "\n".join(lines)


def best_of(repeats: int, work: Callable[[], int]) -> float:
    """The best rate (items a second) of ``repeats`` calls of ``work`` (which returns how many items it did): for a
    system measured alone, or against a figure of its own (a ceiling, a bare read)."""
    return turns({"": work}, repeats)[""].best


def times(rate: float, base: float) -> str:
    """A ratio as the results page writes it (``2.37×``)."""
    return f"{rate / base:.2f}×"


def report(rows: list[dict[str, Any]], args: argparse.Namespace | None = None, **extra: Any) -> dict[str, Any]:
    """Print the rows as a table and the run's stamp; with ``--json PATH``, write both there too."""
    run = {**stamp(), **extra}
    if rows:
        print(table(rows))
    print(
        f"\n{run['date']}, commit {run['commit']}, {run['machine']}, {run['cores']} cores, "
        f"{run['memory_GiB']} GiB, Python {run['python']}; "
        + ", ".join(f"{name} {version}" for name, version in run["versions"].items())
    )
    if args is not None and getattr(args, "json", None):
        with open(args.json, "w") as out:
            json.dump({**run, "rows": rows}, out, indent=1)
    return run
