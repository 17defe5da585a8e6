"""``wds stats | verify | bench``: what a dataset holds, whether it is intact, how fast it reads.

    wds stats "data/shard-{000..099}.tar" [--json]
    wds stats "data/shard-{000..099}.tar" --shuffle --buffer 1000 --batch-size 256   # how well an epoch mixes
    wds stats "data/shard-{000..099}.tar" --shuffle --interleave 100 --buffer 900    # ... reading 100 shards at once
    wds stats "data/shard-{000..099}.tar" --shuffle --label cls --svg shuffle.svg      # ... a label's mix, drawn
    wds verify data/dataset.json            # exit status 0: intact; 1: problems (each listed)
    wds bench "s3://bucket/shard-{000..099}.tar" --seconds 30
    wds bench "data/shard-{000..099}.tar" --seconds 10 --rows raw,decoded   # ... and beside webdataset, as a table

SPEC is shard URLs or brace specs, or a wids descriptor (``.json``) whose sample
counts and md5sums ``verify`` also checks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from ..errors import ShardNotFoundError, TarFormatError, WdsError
from ..io import files
from ..io.destinations import stale_partials
from ..io.storage import local_path
from ..sources.descriptor import load_descriptor
from ..sources.tarsamples import TarfileToSamples
from ..tar.grouping import group_members, is_meta
from ..tar.headers import BLOCK, checksum_ok
from ..tar.tario import iter_members, open_decompressed
from .common import md5_of, spec_urls, subcommand
from .progress import Progress, human_bytes

__all__ = ["add_parsers", "shard_list"]


def shard_list(specs: list[str]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Shard URLs of ``specs`` and what a descriptor states about them (``nsamples``, ``md5sum``...)."""
    urls: list[str] = []
    stated: dict[str, dict[str, Any]] = {}
    for spec in specs:
        if spec.lower().endswith(".json"):
            for entry in load_descriptor(spec)["shardlist"]:
                urls.append(entry["url"])
                stated[entry["url"]] = entry
        else:
            urls += spec_urls(spec)
    return urls, stated


def _samples(url: str) -> Any:
    return TarfileToSamples()(iter([{"url": url}]))


def _percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def run_stats(args: argparse.Namespace) -> int:
    if (args.label or args.svg) and not args.shuffle:
        raise WdsError("--label and --svg describe the epoch that --shuffle measures: add --shuffle")
    urls, _ = shard_list(args.spec)
    sizes: dict[str, list[int]] = {}
    samples = nbytes = 0
    stored: list[list[tuple[str, str]]] = []  # each shard's samples, in order: the storage order
    label_fields = [args.label] if args.label else LABEL_FIELDS
    labels: dict[str, dict[tuple[str, str], Any]] = {name: {} for name in label_fields} if args.shuffle else {}
    progress = Progress(len(urls), "shards")
    for number, url in enumerate(urls):
        stored.append([])
        for sample in _samples(url):
            stored[-1].append((url, sample["__key__"]))
            for name, by_sample in labels.items():
                if name in sample:
                    by_sample[stored[-1][-1]] = bytes(sample[name])[:MAX_LABEL]
            samples += 1
            for field, value in sample.items():
                if not is_meta(field):
                    sizes.setdefault(field, []).append(len(value))
                    nbytes += len(value)
        progress.update(number + 1, samples, nbytes)
    progress.update(len(urls), samples, nbytes, final=True)
    fields = {}
    for field, values in sorted(sizes.items()):
        values.sort()
        fields[field] = {
            "count": len(values),
            "missing": samples - len(values),
            "bytes": sum(values),
            "min": values[0],
            "median": _percentile(values, 0.5),
            "p95": _percentile(values, 0.95),
            "max": values[-1],
        }
    report: dict[str, Any] = {"shards": len(urls), "samples": samples, "bytes": nbytes, "fields": fields}
    if args.shuffle:
        label = next((name for name in label_fields if labels[name]), None)
        if args.label and label is None:
            raise WdsError(f"no sample has a {args.label!r} field, whose mix --label asks for; the fields: "
                           f"{', '.join(fields) or 'none'}")  # fmt: skip
        report["shuffle"] = _shuffle_report(urls, stored, args, label, labels.get(label or "", {}))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{len(urls)} shards, {samples:,} samples, {human_bytes(nbytes)}")
    print(f"{'field':<16}{'count':>10}{'missing':>9}{'total':>11}{'min':>10}{'median':>10}{'p95':>10}{'max':>10}")
    for field, row in fields.items():
        cells = [human_bytes(row[k]) for k in ("bytes", "min", "median", "p95", "max")]
        print(f"{field:<16}{row['count']:>10,}{row['missing']:>9,}" + "".join(f"{c:>10}" for c in cells))
    if args.shuffle:
        for line in shuffle_lines(report["shuffle"], len(urls), args):
            print(line)
    return 0


LABEL_FIELDS = ("cls", "class", "label")  # what --shuffle measures the mix of, the first present, unless --label
MAX_LABEL = 256  # bytes of a label value kept (a label is short; a long field is compared by its start)


def shuffle_lines(shuffled: dict[str, Any], shards: int, args: argparse.Namespace) -> list[str]:
    """What ``wds stats --shuffle`` says: the measures, then advice on what the user cares about (a label's
    mix when there is one; the shards a batch holds otherwise, which says little of shards already shuffled)."""
    lines = []
    if "batch_size_asked" in shuffled:
        lines.append(f"batches of {shuffled['batch_size_asked']} would hold more than 1/{BATCHES_TO_TELL} of the "
                     f"{shuffled['samples']:,} samples, which mixes any order alike: measured with batches of "
                     f"{shuffled['batch_size']} instead (--batch-size)")  # fmt: skip
    lines += [f"an epoch of {shuffled['pipeline']}, batches of {shuffled['batch_size']}: "
             f"{shuffled['distinct_per_batch']:.1f} distinct shards a batch against "
             f"{shuffled['global_distinct_per_batch']:.1f} for a global shuffle "
             f"(diversity {shuffled['diversity_ratio']:.2f}); displacement {shuffled['displacement']:.3f} "
             f"against {shuffled['global_displacement']:.3f}; {shuffled['samples_held']:,} samples held"]  # fmt: skip
    lanes = min(shards, max(args.buffer // 5, 1))
    interleave = (f"read {lanes} shards at once with as many samples held: --interleave {lanes} "
                  f"--buffer {max(args.buffer - lanes, 1)} (WebDataset(..., interleave={lanes}))")  # fmt: skip
    mixing = shuffled.get("labels")
    unusable = None if mixing is None else _no_label_mix(mixing, shuffled["samples"])
    if unusable is not None:
        lines.append(unusable)
        mixing = None
    if mixing is None:
        if args.interleave is None and shuffled["diversity_ratio"] < 0.8:
            lines.append(f"to mix more shards into a batch, {interleave}.  This counts shards, not what they hold: "
                         "shards already shuffled as a whole (wds reshard --shuffle) need no more mixing; "
                         "--label FIELD measures the mix of a label")  # fmt: skip
        return lines
    lines.append(f"labels ({mixing['field']}, {mixing['labels']:,} values): {mixing['effective_per_batch']:.1f} "
                 f"effective labels a batch against {mixing['global_effective_per_batch']:.1f} for a global shuffle "
                 f"(mixing {mixing['ratio']:.2f}); read in storage order, {mixing['storage_effective_per_batch']:.1f}"
                 f" (mixing {mixing['storage_ratio']:.2f})")  # fmt: skip
    if mixing["storage_ratio"] >= 0.9:
        lines.append(f"the shards are already shuffled: read in storage order a batch holds as mixed a set of "
                     f"{mixing['field']} values as a global shuffle gives, so the few shards a batch holds cost "
                     "nothing; no need for more interleave or buffer")  # fmt: skip
    elif mixing["ratio"] < 0.9 and args.interleave is None:
        lines.append(f"to mix {mixing['field']} more, {interleave}")
    elif mixing["ratio"] < 0.9:
        lines.append(f"to mix {mixing['field']} more, read more shards at once (--interleave) or hold more samples "
                     "(--buffer)")  # fmt: skip
    else:
        lines.append(f"{mixing['field']} mixes as in a global shuffle")
    return lines


def _no_label_mix(mixing: dict[str, Any], samples: int) -> str | None:
    """Why a label field's mix says nothing (one value, or a value for about every sample), else ``None``."""
    if mixing["labels"] < 2:
        return f"{mixing['field']} has one value in every sample: there is no label mix to measure"
    if 2 * mixing["labels"] > samples:
        return (f"{mixing['field']} has {mixing['labels']:,} values in {samples:,} samples: not a label whose mix "
                "says anything")  # fmt: skip
    return None


BATCHES_TO_TELL = 8  # an epoch of fewer batches than this holds too much of the data in each to say how it mixes


def telling_batch(asked: int, samples: int) -> int:
    """The batch size whose mix can say how an epoch of ``samples`` is ordered: ``asked``, unless a batch of it
    would hold so much of the data (more than 1/8) that any order mixes it; then the largest that holds 1/8."""
    return asked if samples >= BATCHES_TO_TELL * asked else max(2, samples // BATCHES_TO_TELL)


def _shuffle_report(
    urls: list[str],
    stored: list[list[tuple[str, str]]],
    args: argparse.Namespace,
    label: str | None,
    labels: dict[tuple[str, str], Any],
) -> dict:
    """How well an epoch of the common shuffled pipeline mixes the storage order and the ``label`` field
    (:mod:`wds_core.observe.shufflestats`); ``labels``: the field's value by sample."""
    from ..dataset import WebDataset
    from ..observe.shufflestats import label_mixing, shuffle_quality, storage_order

    lanes = args.interleave
    dataset = WebDataset(urls, shuffle=True, seed=args.seed, interleave=lanes).shuffle(args.buffer)
    order = [(sample["__url__"], sample["__key__"]) for sample in dataset]
    batch = telling_batch(args.batch_size, len(order))
    quality = shuffle_quality(order, storage_order(stored), batch_size=batch)
    reading = "" if lanes is None else f", interleave={lanes}"
    report = {
        "pipeline": f"WebDataset(..., shuffle=True{reading}).shuffle({args.buffer})",
        "samples_held": args.buffer + (lanes or 0),
        **quality.as_dict(),
    }
    if batch != args.batch_size:
        report["batch_size_asked"] = args.batch_size
    mixing = None
    if label is not None:
        in_storage = [labels.get(sample) for shard in stored for sample in shard]
        mixing = label_mixing(label, [labels.get(sample) for sample in order], in_storage, batch, seed=args.seed)
        report["labels"] = mixing.as_dict()
    if args.svg:
        from .shufflechart import shuffle_svg

        drawn = mixing if mixing is not None and _no_label_mix(report["labels"], quality.samples) is None else None
        files.write_atomic(args.svg, shuffle_svg(report, quality.distinct_by_batch, drawn))
        print(f"wrote the chart of the epoch's batches to {os.path.abspath(args.svg)}", file=sys.stderr)
    return report


def _next_header(stream: Any, offset: int) -> int | None:
    """The offset of the next block at or after ``offset`` that is a valid tar header, if any."""
    stream.seek(offset)
    while len(block := stream.read(BLOCK)) == BLOCK:
        if block.strip(b"\0") and checksum_ok(block):
            return offset
        offset += BLOCK
    return None


def _check_shard(url: str) -> tuple[int, list[str]]:
    """``(samples, problems)`` of one shard; in an uncompressed local shard, reading resumes after each bad header.
    A shard that is not there is a :class:`ShardNotFoundError`."""
    path = local_path(url)
    if path is None:
        count = 0
        try:
            for _ in _samples(url):
                count += 1
        except ShardNotFoundError:
            raise
        except WdsError as exn:
            return count, [str(exn)]
        return count, []
    problems: list[str] = []
    count, offset = 0, 0
    try:
        raw = files.open_file(path, "rb")
    except FileNotFoundError:
        raise ShardNotFoundError("no such shard", url=url) from None
    with raw:
        stream, compressed = open_decompressed(raw)
        if not compressed:
            raw.seek(0)
            stream = raw  # seekable, so reading can resume after a bad header
        while True:
            try:
                if offset:
                    stream.seek(offset)
                for _ in group_members(iter_members(stream, url, start_offset=offset), url):
                    count += 1  # grouped as streaming groups them, so a field given twice is a problem here too
                break
            except WdsError as exn:
                problems.append(str(exn))
                resume = None
                if isinstance(exn, TarFormatError) and not compressed and exn.offset is not None:
                    resume = _next_header(stream, exn.offset + BLOCK)
                if resume is None:
                    break
                offset = resume
    return count, problems


def _clean(urls: list[str]) -> int:
    """Remove the temporary files of dead writers in the folders of the local shards ``urls``; how many."""
    folders = sorted({os.path.dirname(os.path.abspath(path)) for url in urls if (path := local_path(url))})
    removed = 0
    for folder in folders:
        for stale in stale_partials(folder):
            files.remove(stale)
            print(f"REMOVED {stale}")
            removed += 1
    return removed


def run_verify(args: argparse.Namespace) -> int:
    urls, stated = shard_list(args.spec)
    if getattr(args, "clean", False):
        removed = _clean(urls)
        print(f"{removed} temporary file{'s' if removed != 1 else ''} of killed writers removed", file=sys.stderr)
    problems = samples = 0
    progress = Progress(len(urls), "verified")
    for number, url in enumerate(urls):
        try:
            count, errors = _check_shard(url)
        except ShardNotFoundError:  # one problem, as a damaged shard is: the others are verified all the same
            problems += 1
            print(f"MISSING {url}: no such shard")
            progress.update(number + 1, samples, 0)
            continue
        for error in errors:
            problems += 1
            print(f"CORRUPT {url}: {error}")
        entry = stated.get(url, {})
        if not errors and entry.get("nsamples") is not None and int(entry["nsamples"]) != count:
            problems += 1
            print(f"COUNT {url}: the descriptor says {entry['nsamples']} samples, the shard has {count}")
        if entry.get("md5sum") and (digest := md5_of(url)) != entry["md5sum"]:
            problems += 1
            print(f"MD5 {url}: the descriptor says {entry['md5sum']}, the shard's md5sum is {digest}")
        samples += count
        progress.update(number + 1, samples, 0)
    progress.update(len(urls), samples, 0, final=True)
    verdict = "OK" if not problems else f"{problems} problem{'s' if problems > 1 else ''}"
    print(f"{verdict}: {len(urls)} shards, {samples:,} samples read", file=sys.stderr)
    return 1 if problems else 0


def run_bench(args: argparse.Namespace) -> int:
    urls, _ = shard_list(args.spec)
    samples = nbytes = done = 0
    start = time.perf_counter()
    progress = Progress(len(urls), "shards")
    for number, url in enumerate(urls):
        done = number + 1
        for sample in _samples(url):
            samples += 1
            nbytes += sum(len(v) for k, v in sample.items() if not is_meta(k))
            if args.seconds and time.perf_counter() - start > args.seconds:
                break
        progress.update(number + 1, samples, nbytes)
        if args.seconds and time.perf_counter() - start > args.seconds:
            break
    progress.update(done, samples, nbytes, final=True)
    elapsed = max(time.perf_counter() - start, 1e-9)
    print(f"{samples:,} samples, {human_bytes(nbytes)} in {elapsed:.2f} s: "
          f"{samples / elapsed:,.0f} samples/s, {human_bytes(nbytes / elapsed)}/s")  # fmt: skip
    if args.rows:
        print()
        print(_bench_table(urls, args))
    return 0


BENCH_ROWS = ("raw", "decoded")


def _bench_rows(text: str) -> list[str]:
    rows = [row.strip() for row in text.split(",") if row.strip()]
    unknown = sorted(set(rows) - set(BENCH_ROWS))
    if unknown:
        raise argparse.ArgumentTypeError(f"no row {', '.join(unknown)}; the rows are {', '.join(BENCH_ROWS)}")
    return rows


def _bench_table(urls: list[str], args: argparse.Namespace) -> str:
    """The local rows of benchmarks/bench_local.py ("raw": its read section, samples as bytes; "decoded": its decode
    section, images to RGB arrays, the rest by extension) on these shards, each system in turn over the same
    shards: wds, and webdataset 1.x where it is installed; a Markdown table as benchmarks/README.md writes them."""
    import warnings

    import wds_core

    systems: dict[str, Any] = {"wds": wds_core}
    try:
        import webdataset

        systems["webdataset"] = webdataset
    except ImportError:
        pass
    lines = ["| row | system | samples/s | MB/s | vs webdataset |", "|---|---|---|---|---|"]
    for row in args.rows:
        rates: dict[str, tuple[float, float]] = {}
        for name, package in systems.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dataset = package.WebDataset(urls, shardshuffle=False)
                rates[name] = _rate(dataset.decode("rgb8") if row == "decoded" else dataset, args.seconds)
        for name, (per_second, bytes_per_second) in rates.items():
            ratio = f"{per_second / rates['webdataset'][0]:.2f}x" if "webdataset" in rates else "not installed"
            lines.append(f"| {row} | {name} | {per_second:,.0f} | {bytes_per_second / 1e6:,.1f} | {ratio} |")
    return "\n".join(lines)


def _size(value: Any) -> int:
    """Bytes of a field as read or decoded (an array's buffer, a string's or bytes' length); 0 for a number."""
    if hasattr(value, "nbytes"):
        return int(value.nbytes)
    return len(value) if isinstance(value, (bytes, bytearray, memoryview, str)) else 0


def _rate(dataset: Any, seconds: float) -> tuple[float, float]:
    """Samples and bytes a second over ``dataset`` (all of it, or what ``seconds`` allow)."""
    samples = nbytes = 0
    start = time.perf_counter()
    for sample in dataset:
        samples += 1
        nbytes += sum(_size(value) for key, value in sample.items() if not is_meta(key))
        if seconds and time.perf_counter() - start > seconds:
            break
    elapsed = max(time.perf_counter() - start, 1e-9)
    return samples / elapsed, nbytes / elapsed


def add_parsers(commands: argparse._SubParsersAction) -> None:
    def command(name: str, help: str, run: Any) -> argparse.ArgumentParser:
        parser = subcommand(commands, name, help, run, __doc__ or "")
        parser.add_argument("spec", nargs="+", help="shard URLs, brace specs or a descriptor (.json)")
        return parser

    stats = command("stats", "count samples and fields, with size distributions per field", run_stats)
    stats.add_argument("--json", action="store_true", help="machine-readable output")
    stats.add_argument("--shuffle", action="store_true",
                       help="also measure how well an epoch of WebDataset(..., shuffle=True).shuffle(BUFFER) "
                       "mixes the storage order: distinct shards a batch and displacement, against a global "
                       "shuffle's")  # fmt: skip
    stats.add_argument("--buffer", type=int, default=1000, help="the sample shuffle's buffer (default 1000)")
    stats.add_argument("--interleave", type=int, default=None, metavar="K",
                       help="measure WebDataset(..., interleave=K) instead: K shards read at once, each next sample "
                       "from one of them at random")  # fmt: skip
    stats.add_argument("--batch-size", type=int, default=256, help="the batch the diversity is counted in (256)")
    stats.add_argument("--seed", type=int, default=0, help="the shuffles' seed (default 0)")
    stats.add_argument("--label", default="", metavar="FIELD",
                       help="with --shuffle, the label field whose mix in a batch is measured (default: the first "
                       f"of {', '.join(LABEL_FIELDS)} the samples have): what the advice is about")  # fmt: skip
    stats.add_argument("--svg", default="", metavar="FILE",
                       help="with --shuffle, draw the shards (and labels) of each batch of the epoch, against a "
                       "global shuffle's, into this SVG file")  # fmt: skip
    verify = command(
        "verify", "read every shard; report corrupt members (URL, offset), wrong counts and md5sums", run_verify
    )
    verify.add_argument(
        "--clean",
        action="store_true",
        help="also list and remove the temporary files (.NAME.PID.RAND.partial) that writers killed mid-shard "
        "left in the shards' folders (only those whose process is gone)",
    )
    bench = command("bench", "measure how fast your shards read (no decoding)", run_bench)
    bench.add_argument("--seconds", type=float, default=0, help="stop after this long (default: read everything)")
    bench.add_argument("--rows", type=_bench_rows, default=[], metavar="raw,decoded",
                       help="also the table of benchmarks/README.md's local rows on these shards: raw samples, "
                       "and decoded ones (images to RGB arrays), through wds and, where it is installed, "
                       "webdataset 1.x, each for --seconds")  # fmt: skip
