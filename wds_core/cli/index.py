"""``wds index create|info|sample``: wids v1 descriptors and per-shard offset indexes.

    wds index create 'data/shard-{000..099}.tar' -o data/dataset.json --name mydata
    wds index info data/dataset.json
    wds index sample data/dataset.json 1234 [--field jpg > x.jpg]

``create`` walks each shard's headers (no member data is read), counts its
samples, writes ``<shard>.idx`` next to each shard, local or remote
(``--no-sidecar`` to skip; a balanced reader then needs one request for a
shard's offsets), a descriptor whose local URLs are relative to its folder, as
``widsindex create`` does, and beside it ``<descriptor>.counts.npz``: the same
counts and sizes by position in the spec, 12 bytes a shard, which a balanced
reader of a million shards reads instead of the descriptor's JSON
(:mod:`wds_core.sources.counts`; ``--no-counts`` to skip).  ``--md5`` also records
each shard's md5sum (reads every byte).  ``--workers N`` indexes N shards at
once in processes, ``--engine dask [--scheduler ADDRESS]`` on a Dask cluster.
A shard that cannot be indexed is reported with its error and the others go
on; the descriptor is written (atomically) only when every shard was indexed,
and ``--resume`` then takes the sidecars already written instead of walking
those shards again.  The descriptor (or the counts file) is what
``balanced=..., sample_counts=`` reads.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ShardOpenError, WdsError
from ..indexed.dataset import ShardListDataset
from ..io import files
from ..io.shardnames import shard_names
from ..io.storage import Storage, local_path
from ..io.urls import expand_urls
from ..sources.counts import write_counts
from ..sources.descriptor import load_descriptor, write_descriptor
from ..tar.tarindex import index_shard, stored_index
from ..tools.jobs import run_jobs
from .common import md5_of
from .progress import Progress, human_bytes

__all__ = ["add_parser"]

_CHUNK = 16  # shards per task: one hand-over per small shard cost more than indexing it


def _size(url: str, storage: Storage) -> int:
    path = local_path(url)
    if path is not None:
        return files.getsize(path)
    shard = storage.random_access(url)
    shard.close()
    return shard.size


def index_entry(
    url: str, sidecar: bool = True, md5: bool = False, resume: bool = False, storage: Storage | None = None
) -> dict[str, Any]:
    """One shard's descriptor entry; its ``<shard>.idx`` sidecar written (atomically) beside it, local or remote.

    With ``resume``, an up-to-date sidecar (same size) is taken instead of walking the shard again.  Everything
    is read and written through ``storage`` (default: the options the command registered).
    """
    storage = storage or Storage()
    stored = None
    if resume:
        stored = stored_index(url, _size(url, storage), storage)
    index = stored if stored is not None else index_shard(url, storage, fresh=True)
    if sidecar and stored is None:
        try:
            index.save(url + ".idx", storage)
        except (OSError, WdsError) as exn:
            raise ShardOpenError(
                f"cannot write its sidecar {url}.idx (--no-sidecar writes none): {exn}", url=url
            ) from None
    entry: dict[str, Any] = {"url": url, "nsamples": len(index), "filesize": index.size}
    if md5:
        entry["md5sum"] = md5_of(url, storage)
    return entry


def _index_chunk(urls: list[str], **options: Any) -> list[tuple[str, dict[str, Any] | Exception]]:
    """``(url, entry or the error indexing it)`` for each of ``urls``."""
    out: list[tuple[str, dict[str, Any] | Exception]] = []
    for url in urls:
        try:
            out.append((url, index_entry(url, **options)))
        except Exception as exn:  # noqa: BLE001 - reported with its shard, the others go on
            out.append((url, exn))
    return out


def _chunks(urls: Sequence[str], workers: int) -> list[list[str]]:
    """Shards per task: 16 or more (one hand-over per small shard cost more than indexing it), ~32 tasks a worker."""
    size = min(1_000, max(_CHUNK, len(urls) // (32 * max(workers, 1))))
    return [list(urls[i : i + size]) for i in range(0, len(urls), size)]


def run_create(args: argparse.Namespace) -> int:
    if args.shards == ["-"]:
        urls: Sequence[str] = [line.strip() for line in sys.stdin if line.strip()]
    else:
        urls = shard_names(args.shards)  # a range of a million shards stays a range
    progress = Progress(len(urls), "indexed", every=args.progress_every)
    entries: list[dict[str, Any]] = []
    failed: list[tuple[str, str]] = []
    totals = [0, 0]  # samples, bytes
    first: list[float] = []  # when the first task ended, and its shards: the rate after it leaves start-up out

    def report(url: str, error: str) -> None:
        failed.append((url, error))
        print(f"wds index create: {url}: {error}", file=sys.stderr)

    def done(job: tuple, results: list[tuple[str, dict[str, Any] | Exception]], attempts: int) -> None:
        if not first:
            first.extend((time.perf_counter(), len(results)))
        for url, entry in results:
            if isinstance(entry, Exception):
                report(url, f"{type(entry).__name__}: {entry}")
                continue
            entries.append(entry)
            totals[0] += entry["nsamples"]
            totals[1] += entry["filesize"]
        progress.update(len(entries) + len(failed), totals[0], totals[1])

    def lost(job: tuple, error: str, attempts: int) -> None:  # the task itself failed: its worker died
        for url in job[0]:
            report(url, error)

    engine = args.engine or ("process" if args.workers > 1 else "serial")
    workers = args.workers if args.workers > 1 or args.engine is None else None
    work = functools.partial(_index_chunk, sidecar=args.sidecar, md5=args.md5, resume=args.resume)
    chunks = _chunks(urls, 1 if engine == "serial" else workers or os.cpu_count() or 1)
    started = time.perf_counter()
    run_jobs(
        [(chunk,) for chunk in chunks],
        work,
        done,
        lost,
        engine=engine,
        workers=workers,
        scheduler=args.scheduler,
        retries=1,
    )
    seconds = time.perf_counter() - started
    samples, nbytes = totals
    progress.update(len(urls), samples, nbytes, final=True)
    if failed:
        print(
            f"wds index create: {len(failed)} of {len(urls)} shards could not be indexed; no descriptor written "
            "(the sidecars of the others are; rerun with --resume to index only what is missing)",
            file=sys.stderr,
        )
        return 1
    info = args.info
    if info is not None and info.startswith("@"):
        info = files.read_file(info[1:]).decode("utf-8")
    name = args.name if args.name is not None else os.path.splitext(os.path.basename(urls[0]))[0]
    write_descriptor(args.output, sorted(entries, key=lambda e: e["url"]), name=name, base=args.base, info=info)
    if args.counts:
        by_url = {entry["url"]: entry for entry in entries}
        counts = np.fromiter((by_url[url]["nsamples"] for url in urls), np.int64, len(urls))
        sizes = np.fromiter((by_url[url]["filesize"] for url in urls), np.int64, len(urls))
        path = args.counts_path or os.path.splitext(args.output)[0] + ".counts.npz"
        write_counts(path, urls, counts, sizes)
        print(f"{path}: the counts by position in {' '.join(args.shards)}", file=sys.stderr)
    rate = f"indexed in {seconds:.1f} s"
    if first and len(urls) > first[1]:
        steady = (len(urls) - first[1]) / max(started + seconds - first[0], 1e-9)
        rate += f", {steady:,.0f} shards/s after the first task"
    print(f"{args.output}: {len(entries)} shards, {samples:,} samples, {human_bytes(nbytes)}; {rate}", file=sys.stderr)
    return 0


def run_info(args: argparse.Namespace) -> int:
    reports = []
    for source in args.descriptors:
        body = load_descriptor(source)
        shards = body["shardlist"]
        known = [s["nsamples"] for s in shards if s.get("nsamples") is not None]
        sizes = [s["filesize"] for s in shards if s.get("filesize") is not None]
        reports.append(
            {
                "descriptor": source,
                "name": body.get("name"),
                "shards": len(shards),
                "samples": sum(known) if len(known) == len(shards) else None,
                "bytes": sum(sizes) if len(sizes) == len(shards) else None,
                "info": body.get("info"),
            }
        )
    if args.json:
        print(json.dumps(reports if len(reports) > 1 else reports[0], indent=1))
        return 0
    for report in reports:
        samples = "unknown" if report["samples"] is None else f"{report['samples']:,}"
        size = "unknown" if report["bytes"] is None else human_bytes(report["bytes"])
        print(f"{report['descriptor']}: {report['name'] or '(no name)'}")
        print(f"  shards   {report['shards']:,}\n  samples  {samples}\n  size     {size}")
        if report["info"]:
            print(f"  info     {report['info'].strip()}")
    return 0


def run_sample(args: argparse.Namespace) -> int:
    source = args.descriptor
    dataset = ShardListDataset(source if source.endswith(".json") else expand_urls(source))
    sample = dataset[args.index]
    if args.field is not None:
        if args.field not in sample:
            fields = ", ".join(k for k in sample if not k.startswith("__"))
            print(f"wds index sample: no field {args.field!r}; the sample has {fields}", file=sys.stderr)
            return 1
        value = sample[args.field]
        sys.stdout.buffer.write(value if isinstance(value, bytes) else str(value).encode())
        return 0
    width = max(len(k) for k in sample)
    for key, value in sample.items():
        text = repr(value)
        print(f"{key.ljust(width)}  {text[: args.width]}{'...' if len(text) > args.width else ''}")
    return 0


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "index",
        help="create and read dataset descriptors and offset indexes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    create = verbs.add_parser("create", help="index shards and write a wids v1 descriptor")
    create.add_argument("shards", nargs="+", help="shard URLs or brace specs ('-': read URLs from stdin)")
    create.add_argument("-o", "--output", default="shardindex.json", help="descriptor to write")
    create.add_argument("-n", "--name", default=None, help="dataset name (default: the first shard's stem)")
    create.add_argument("-i", "--info", default=None, help="description text, or @FILE")
    create.add_argument("-b", "--base", default=None, help="base URL recorded in the descriptor")
    create.add_argument("--md5", action="store_true", help="record each shard's md5sum (reads every byte)")
    create.add_argument("--no-sidecar", dest="sidecar", action="store_false", help="do not write <shard>.idx files")
    create.add_argument("-w", "--workers", type=int, default=1, help="index this many shards at once (processes)")
    create.add_argument(
        "--engine",
        choices=["serial", "process", "dask"],
        default=None,
        help="where: this process, a local process pool (the default with --workers > 1) or Dask",
    )
    create.add_argument("--scheduler", default=None, help="a Dask scheduler's address (default: a LocalCluster)")
    create.add_argument(
        "--progress-every", type=float, default=None, help="when stderr is not a terminal, a progress line every N s"
    )
    create.add_argument(
        "--counts",
        dest="counts_path",
        default=None,
        help="the counts file to write (default: the descriptor's name with .counts.npz)",
    )
    create.add_argument(
        "--no-counts", dest="counts", action="store_false", help="write no counts file beside the descriptor"
    )
    create.add_argument(
        "--resume", action="store_true", help="take up-to-date <shard>.idx sidecars instead of walking those shards"
    )
    create.set_defaults(run=run_create)
    info = verbs.add_parser("info", help="summarise descriptors")
    info.add_argument("descriptors", nargs="+")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(run=run_info)
    sample = verbs.add_parser("sample", help="show one sample by its global index")
    sample.add_argument("descriptor", help="a descriptor (.json) or shard URLs")
    sample.add_argument("index", type=int)
    sample.add_argument("-f", "--field", default=None, help="write this field's raw bytes to stdout")
    sample.add_argument("-w", "--width", type=int, default=100, help="characters of each value shown")
    sample.set_defaults(run=run_sample)
