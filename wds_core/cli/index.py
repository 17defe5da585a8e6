"""``wds index create|info|sample``: wids v1 descriptors and per-shard offset indexes.

    wds index create 'data/shard-{000..099}.tar' -o data/dataset.json --name mydata
    wds index info data/dataset.json
    wds index sample data/dataset.json 1234 [--field jpg > x.jpg]

``create`` walks each shard's headers (no member data is read), counts its
samples, writes ``<shard>.idx`` next to each local shard (``--no-sidecar`` to
skip) and a descriptor whose local URLs are relative to its folder, as
``widsindex create`` does; ``--md5`` also records each shard's md5sum (reads
every byte).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..descriptor import load_descriptor
from ..indexed import ShardListDataset
from ..io.storage import local_path
from ..io.urls import expand_urls
from ..tar.tarindex import index_shard
from ..writer import write_descriptor
from .common import md5_of
from .progress import Progress, human_bytes

__all__ = ["add_parser"]


def run_create(args: argparse.Namespace) -> int:
    urls = [url for spec in args.shards for url in expand_urls(spec)]
    if args.shards == ["-"]:
        urls = [line.strip() for line in sys.stdin if line.strip()]
    progress = Progress(len(urls), "indexed")
    entries: list[dict[str, Any]] = []
    samples = nbytes = 0
    for number, url in enumerate(urls):
        index = index_shard(url, fresh=True)
        path = local_path(url)
        if path is not None and args.sidecar:
            index.save(path + ".idx")
        entry = {"url": url, "nsamples": len(index), "filesize": index.size}
        if args.md5:
            entry["md5sum"] = md5_of(url)
        entries.append(entry)
        samples, nbytes = samples + len(index), nbytes + index.size
        progress.update(number + 1, samples, nbytes)
    progress.update(len(urls), samples, nbytes, final=True)
    info = args.info
    if info is not None and info.startswith("@"):
        with open(info[1:]) as handle:
            info = handle.read()
    name = args.name if args.name is not None else os.path.splitext(os.path.basename(urls[0]))[0]
    write_descriptor(args.output, sorted(entries, key=lambda e: e["url"]), name=name, base=args.base, info=info)
    print(f"{args.output}: {len(entries)} shards, {samples:,} samples, {human_bytes(nbytes)}", file=sys.stderr)
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
