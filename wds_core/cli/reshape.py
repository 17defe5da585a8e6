"""``wds reshard | transform``: rewrite a dataset as new shards, or run a function over every shard.

    wds reshard "in/shard-{000..099}.tar" -o "out/shard-%06d.tar" --maxcount 5000 --shuffle --seed 1
    wds transform mymodule:fix_caption "in/shard-{000..099}.tar" -o "out/shard-%06d.tar" --engine dask
    wds transform mymodule:fix_caption SPEC -o out/ --engine dask --scheduler tcp://10.0.0.5:8786

``transform`` calls ``FUNC(sample)`` (``--per shard``: ``FUNC(samples)``, an
iterator) for every sample, in a local process pool (``--engine process``,
default) or on Dask; outputs that exist are complete and are skipped, failing
shards are retried then listed; the exit status is 1 when any failed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

from ..errors import SpecError
from ..sources.shardlists import SimpleShardList
from ..sources.tarsamples import TarfileToSamples
from ..stages.shuffle import Shuffle
from ..tools.parallel import map_shards
from ..writer import ShardWriter, brace_spec, refuse_existing
from .common import byte_size, subcommand
from .inspect_shards import shard_list
from .progress import Progress

__all__ = ["add_parsers", "load_function"]


def load_function(name: str) -> Any:
    """``module:function`` (the current folder is importable, as for ``python -m``)."""
    module, _, attr = name.partition(":")
    if not module or not attr:
        raise SpecError(f"name the function as MODULE:FUNCTION, got {name!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    fn = importlib.import_module(module)
    for part in attr.split("."):
        fn = getattr(fn, part)
    if not callable(fn):
        raise SpecError(f"{name} is not callable")
    return fn


def run_reshard(args: argparse.Namespace) -> int:
    urls, _ = shard_list(args.spec)
    stream: Any = TarfileToSamples()(iter(SimpleShardList(urls)))
    if args.shuffle:
        stream = Shuffle(args.buffer, initial=args.buffer, seed=args.seed)(stream)
    progress = Progress(0, "samples")
    count = nbytes = 0
    if not args.overwrite:
        refuse_existing(args.output, 0, "--overwrite")  # said with the command's own option
    with ShardWriter(args.output, maxcount=args.maxcount, maxsize=args.maxsize, encoder=False,
                     overwrite=args.overwrite) as sink:  # fmt: skip
        for sample in stream:
            sink.write({k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")})
            count += 1
            nbytes += sum(len(v) for k, v in sample.items() if not k.startswith("__"))
            progress.update(0, count, nbytes)
    progress.update(0, count, nbytes, final=True)
    written = f": {brace_spec(args.output, 0, len(sink.shards) - 1)}" if sink.shards else ""
    print(f"{count:,} samples from {len(urls)} shards into {len(sink.shards)} shards{written}", file=sys.stderr)
    if sink.shards:  # alone on standard output, for the next command
        print(brace_spec(args.output, 0, len(sink.shards) - 1))
    return 0


def run_transform(args: argparse.Namespace) -> int:
    fn = load_function(args.function)
    urls, _ = shard_list(args.spec)
    progress = Progress(len(urls), "shards", every=args.progress_every)
    failures = 0

    def report(summary: Any) -> None:
        nonlocal failures
        for url, error in summary.failures[failures:]:  # said as they happen, not only at the end
            print(f"{chr(10) if progress.redraw else ''}FAILED {url}: {error}", file=sys.stderr)
        failures = len(summary.failures)
        progress.update(len(summary.written) + len(summary.skipped) + failures, summary.samples_out, 0)

    summary = map_shards(
        fn,
        urls,
        args.output,
        per=args.per,
        engine=args.engine,
        workers=args.workers,
        scheduler=args.scheduler,
        retries=args.retries,
        overwrite=args.overwrite,
        progress=report,
        log=args.log,
        memory_limit=args.memory_limit,
    )
    progress.update(len(urls), summary.samples_out, 0, final=True)
    print(summary, file=sys.stderr)
    if summary.ok and urls and "%" in args.output and not args.output.endswith("/"):  # what the next command reads
        print(brace_spec(args.output, 0, len(urls) - 1))
    return 0 if summary.ok else 1


def add_parsers(commands: argparse._SubParsersAction) -> None:
    def command(name: str, help: str, run: Any) -> argparse.ArgumentParser:
        return subcommand(commands, name, help, run, __doc__ or "")

    reshard = command("reshard", "rewrite samples into new shards, optionally shuffled", run_reshard)
    reshard.add_argument("spec", nargs="+", help="shard URLs, brace specs or a descriptor (.json)")
    reshard.add_argument("-o", "--output", required=True, help="shard name pattern, e.g. 'out-%%06d.tar'")
    reshard.add_argument("--maxcount", type=int, default=100000, help="samples per shard at most")
    reshard.add_argument("--maxsize", type=byte_size, default=3e9, help="bytes per shard at most (3e9, 64MB, 1GiB...)")
    reshard.add_argument("--shuffle", action="store_true", help="shuffle samples through a buffer")
    reshard.add_argument("--buffer", type=int, default=10000, help="shuffle buffer size (samples)")
    reshard.add_argument("--seed", type=int, default=0, help="shuffle seed (the output is a function of it)")
    reshard.add_argument(
        "--overwrite", action="store_true",
        help="replace the shards of the pattern an earlier run wrote (those this run does not write are removed)",
    )  # fmt: skip
    transform = command(
        "transform", "run MODULE:FUNCTION over every sample (or shard), writing new shards", run_transform
    )
    transform.add_argument("function", help="MODULE:FUNCTION, importable from the current folder")
    transform.add_argument("spec", nargs="+", help="shard URLs, brace specs or a descriptor (.json)")
    transform.add_argument("-o", "--output", required=True, help="'%%d' pattern, brace pattern, or folder ending in /")
    transform.add_argument("--per", choices=["sample", "shard"], default="sample")
    transform.add_argument("--engine", choices=["process", "dask", "serial"], default="process")
    transform.add_argument("--scheduler", default=None, help="address of a Dask scheduler (default: a LocalCluster)")
    transform.add_argument("--workers", type=int, default=None, help="processes (default: one per CPU)")
    transform.add_argument("--retries", type=int, default=2, help="tries again for a failing shard")
    transform.add_argument(
        "--overwrite", action="store_true",
        help="redo outputs that exist, and remove the shards of the output pattern or folder this run does not write",
    )  # fmt: skip
    transform.add_argument(
        "--log", default=None, help="the job's record (JSON lines): a rerun skips what it lists as done"
    )
    transform.add_argument(
        "--memory-limit", type=byte_size, default=None, help="what a worker may allocate for a shard, e.g. 4GB"
    )
    transform.add_argument(
        "--progress-every", type=float, default=None, help="when stderr is not a terminal, a progress line every N s"
    )
