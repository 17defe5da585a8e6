"""``wds create | ls | cat | extract | cp``: make, look into, unpack and copy shards.

wds create photos/ -o "photos-%06d.tar" --maxcount 1000
wds create train/ -o "train-%06d.tar" --label-from-dir   # train/<class>/*.jpg: a cls field, classes.json
wds ls s3://bucket/shard-000000.tar
wds cat shard.tar --key img017 --field jpg > img017.jpg
wds extract shard.tar -C unpacked/
wds cp "data/shard-{000..009}.tar" s3://bucket/data/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import ShardNotFoundError, SpecError
from ..io import files
from ..io.storage import Storage, create_shard, local_path, open_shard
from ..tar.grouping import split_key
from ..tar.tarindex import index_shard
from ..tar.tario import iter_members, open_decompressed
from ..writer import ShardWriter, brace_spec, refuse_existing
from .common import byte_size, spec_urls, subcommand
from .progress import Progress, human_bytes

__all__ = ["add_parsers", "copy_plan", "files_by_sample", "safe_member_path"]


def files_by_sample(root: str) -> list[tuple[str, dict[str, str]]]:
    """``[(key, {field: path})]`` for the files below ``root``, sorted: files sharing a basename form a sample.

    Linked folders are not entered; a linked file is read where it leads (in secure mode, refused when that is
    outside the allowed roots, as every file the gate opens)."""
    samples: dict[str, dict[str, str]] = {}
    for folder, dirs, names in files.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith("."):
                continue
            relative = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            key, field = split_key(relative)
            if key is None or field is None:
                raise SpecError(f"{relative!r} has no extension: every file needs one to become a field")
            samples.setdefault(key, {})[field] = os.path.join(folder, name)
    return sorted(samples.items())


def class_folders(samples: list[tuple[str, dict[str, str]]], root: str) -> list[str]:
    """The class names of an ImageNet-style tree (``root/<class>/<file>``): its first-level folders, sorted; a
    file outside one is an error."""
    outside = [key for key, _ in samples if "/" not in key]
    if outside:
        raise SpecError(
            f"--label-from-dir takes each label from a folder under {root}; {outside[0]!r} is not in one "
            f"({len(outside)} such samples)"
        )
    return sorted({key.split("/", 1)[0] for key, _ in samples})


def run_create(args: argparse.Namespace) -> int:
    samples = files_by_sample(args.source)
    if not samples:
        raise SpecError(f"no files below {args.source}")
    classes = class_folders(samples, args.source) if args.label_from_dir else []
    number_of = {name: i for i, name in enumerate(classes)}
    progress = Progress(len(samples), "samples")
    nbytes = 0
    if not args.overwrite:
        refuse_existing(args.output, 0, "--overwrite")  # said with the command's own option
    with ShardWriter(args.output, maxcount=args.maxcount, maxsize=args.maxsize, encoder=False,
                     overwrite=args.overwrite) as sink:  # fmt: skip
        for number, (key, fields) in enumerate(samples):
            sample: dict[str, Any] = {"__key__": key}
            for field, path in sorted(fields.items()):
                sample[field] = files.read_file(path)
                nbytes += len(sample[field])
            if classes:
                if "cls" in sample:
                    raise SpecError(f"--label-from-dir adds a cls field, and {key!r} has a .cls file already")
                sample["cls"] = b"%d" % number_of[key.split("/", 1)[0]]
            sink.write(sample)
            progress.update(number + 1, number + 1, nbytes)
    progress.update(len(samples), len(samples), nbytes, final=True)
    said = f"{len(samples)} samples, {human_bytes(nbytes)} in {len(sink.shards)} shards"
    if sink.shards:  # the spec of what was written: what the next command reads
        said += f": {brace_spec(args.output, 0, len(sink.shards) - 1)}"
    if classes:
        names = os.path.join(os.path.dirname(args.output), "classes.json")
        out = create_shard(names)
        try:
            out.write(json.dumps(classes, indent=1).encode())
            out.commit()
        except BaseException:
            out.abort()
            raise
        said += f"; {len(classes)} classes, cls = their number in {names}"
    print(said, file=sys.stderr)
    if sink.shards:  # alone on standard output, for the next command: SPEC=$(wds create ...)
        print(brace_spec(args.output, 0, len(sink.shards) - 1))
    return 0


def run_ls(args: argparse.Namespace) -> int:
    urls = [url for spec in args.urls for url in spec_urls(spec)]
    for url in urls:
        index = index_shard(url)
        if args.json:
            rows = [dict(zip(("name", "header_offset", "offset", "size"), m)) for m in index.members]
            print(json.dumps({"url": url, "size": index.size, "samples": len(index), "members": rows}))
            continue
        if len(urls) > 1:
            print(f"{url}:")
        for name, header, _, size in index.members:
            print(f"{header:>12} {size:>12}  {name}")
    return 0


def run_cat(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    urls = spec_urls(args.url)
    if args.key is None:
        for url in urls:
            with open_shard(url) as stream:
                while chunk := stream.read(1 << 20):
                    out.write(chunk)
        return 0
    found: dict[str, bytes] = {}
    for url in urls:
        found = _sample_fields(url, args.key)
        if found:
            break
    if not found:
        raise SpecError(f"no sample {args.key!r} in {args.url}")
    if args.field is not None and args.field not in found:
        raise SpecError(f"sample {args.key!r} has no field {args.field!r}; its fields are {sorted(found)}")
    field = args.field or (next(iter(found)) if len(found) == 1 else None)
    if field is None:
        raise SpecError(f"sample {args.key!r} has several fields, {sorted(found)}: say which with --field")
    out.write(found[field])
    return 0


def _sample_fields(url: str, wanted: str) -> dict[str, bytes]:
    """The fields of the sample keyed ``wanted`` in the shard ``url`` (none if it has no such sample)."""
    found: dict[str, bytes] = {}
    with open_shard(url) as raw:
        stream, _ = open_decompressed(raw)
        for name, data, _ in iter_members(stream, url):
            key, field = split_key(name)
            if key == wanted and field is not None:
                found[field] = bytes(data)  # (bytes already, read from a stream)
            elif found:
                break  # the sample's members are consecutive
    return found


def safe_member_path(root: str, name: str) -> str:
    """Where member ``name`` goes below ``root``; absolute names and ``..`` are refused."""
    parts = name.replace("\\", "/").split("/")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts:
        raise SpecError(f"refusing member {name!r}: it would be written outside {root}")
    return os.path.join(root, *[p for p in parts if p not in ("", ".")])


def run_extract(args: argparse.Namespace) -> int:
    refused = written = 0
    destination = files.Destination(args.directory)  # below it, no link is followed (one planted there is refused)
    with open_shard(args.url) as raw:
        stream, _ = open_decompressed(raw)
        for name, data, offset in iter_members(stream, args.url):
            try:
                path = safe_member_path(args.directory, name)
                target = destination.open_file(os.path.relpath(path, args.directory))
            except SpecError as exn:
                print(f"wds extract: {exn} (offset {offset})", file=sys.stderr)
                refused += 1
                continue
            with target:
                target.write(data)
            written += 1
    print(f"{written} files written to {args.directory}, {refused} refused", file=sys.stderr)
    return 1 if refused else 0


def copy_plan(sources: list[str], destination: str, storage: Storage) -> list[tuple[str, str]]:
    """``[(source, target)]`` of ``wds cp``, checked whole before anything is copied (as GNU ``cp`` checks): every
    source must be there, and no two sources may land on one name, nor a source on itself."""
    local = local_path(storage.rewrite(destination))
    into = destination.endswith("/") or len(sources) > 1 or (local is not None and files.isdir(local))
    plan = []
    for url in sources:
        name = url.rstrip("/").rsplit("/", 1)[-1]
        plan.append((url, destination.rstrip("/") + "/" + name if into else destination))
    missing = [url for url in sources if _missing(url, storage)]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise SpecError(f"cannot copy {missing[0]}{more}: no such shard; nothing was copied")
    landed: dict[str, str] = {}
    for url, target in plan:
        if target in landed:
            raise SpecError(
                f"{url} and {landed[target]} would both be copied to {target}: the second would overwrite the "
                "first; copy them into different folders (nothing was copied)"
            )
        if target == url:
            raise SpecError(f"{url} would be copied onto itself (nothing was copied)")
        landed[target] = url
    return plan


def _missing(url: str, storage: Storage) -> bool:
    """Whether the shard ``url`` is not there (a command or standard input cannot say: they are not missing)."""
    try:
        storage.size(url)
    except ShardNotFoundError:
        return True
    return False


_SHARD_SUFFIXES = (".tar", ".tgz", ".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst")  # what cp counts as shards


def run_cp(args: argparse.Namespace) -> int:
    sources = [url for spec in args.sources for url in spec_urls(spec)]
    plan = copy_plan(sources, args.destination, Storage())
    progress = Progress(len(sources), "copied")
    nbytes = 0
    for number, (url, target) in enumerate(plan):
        sink = create_shard(target)
        try:
            with open_shard(url) as stream:
                while chunk := stream.read(1 << 22):
                    sink.write(chunk)
                    nbytes += len(chunk)
        except BaseException:
            sink.abort()
            raise
        sink.commit()
        progress.update(number + 1, 0, nbytes)
    progress.update(len(sources), 0, nbytes, final=True)
    shards = sum(1 for url in sources if url.split("?", 1)[0].endswith(_SHARD_SUFFIXES))
    others = (
        f" and {len(sources) - shards} other file{'s' * (len(sources) - shards != 1)}" if shards < len(sources) else ""
    )
    print(f"{shards} shard{'s' * (shards != 1)}{others}, {human_bytes(nbytes)} copied", file=sys.stderr)
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    def command(name: str, help: str, run: Any) -> argparse.ArgumentParser:
        return subcommand(commands, name, help, run, __doc__ or "")

    create = command("create", "write a folder's files as shards (files sharing a basename form a sample)", run_create)
    create.add_argument("source", help="folder to read (recursively, in sorted order)")
    create.add_argument("-o", "--output", required=True, help="shard name pattern, e.g. 'out-%%06d.tar'")
    create.add_argument("--maxcount", type=int, default=100000, help="samples per shard at most")
    create.add_argument("--maxsize", type=byte_size, default=3e9, help="bytes per shard at most (3e9, 64MB, 1GiB...)")
    create.add_argument(
        "--label-from-dir", action="store_true",
        help="class folders (SOURCE/<class>/<files>, ImageNet-style): each sample gets a cls field, the number of "
        "its folder in sorted order, and classes.json (the names, in that order) is written beside the shards",
    )  # fmt: skip
    create.add_argument(
        "--overwrite", action="store_true",
        help="replace the shards of the pattern an earlier run wrote (those this run does not write are removed); "
        "without it, a pattern that holds shards is refused",
    )  # fmt: skip
    ls = command("ls", "list the members of shards with their offsets and sizes", run_ls)
    ls.add_argument("urls", nargs="+", help="shard URLs or brace specs")
    ls.add_argument("--json", action="store_true", help="one JSON object per shard")
    cat = command("cat", "write a shard, or one field of one sample, to stdout", run_cat)
    cat.add_argument("url", help="a shard URL or brace spec (with --key: the first shard that has the sample)")
    cat.add_argument("-k", "--key", default=None, help="sample key")
    cat.add_argument("-f", "--field", default=None, help="field of that sample (e.g. jpg)")
    extract = command("extract", "unpack a shard into a folder (absolute and '..' members are refused)", run_extract)
    extract.add_argument("url")
    extract.add_argument("-C", "--directory", default=".", help="folder to write into")
    cp = command("cp", "copy shards between local disk, s3://, gs://, http(s):// (per-prefix options apply)", run_cp)
    cp.add_argument("sources", nargs="+", help="shard URLs or brace specs")
    cp.add_argument("destination", help="a URL, or a folder/prefix ending in '/'")
