"""``wds profile``: where a pipeline's time goes, which stage bounds its rate, and what to change.

    wds profile "data/shard-{000..099}.tar" --decode rgb8 -n 2000
    wds profile "s3://bucket/shard-{000..099}.tar" --svg profile.svg
    wds profile mypackage.data:make_dataset --json

The first argument is shards (URLs, brace specs: read with ``WebDataset(...)``, decoded
with ``--decode``) or ``MODULE:FUNCTION``, a function taking no arguments that returns a wds pipeline
(``WebDataset``, ``DataPipeline``).  It runs ``-n`` samples in this process under
:class:`~wds_core.observe.profiling.Profile` and prints each stage's share of the time (its own, not its upstream's),
how much of that was waiting, its items and items/s.  Then it tries what could lift the bound, each for the
same number of samples, and says what helped: worker processes (``Loader``, as a DataLoader's workers would),
and for shards given here, decoding in threads and reading more ahead.  ``--try none`` skips that.

Each setting is run ``--repeats`` times, and so is one process without the profile; a setting is advised only
where it beats one process by more than the runs varied, with the code that sets it (it runs as printed).

``--json`` prints ``{"wall_seconds", "samples", "stages": [{"name", "seconds", "waiting_seconds", "items",
"items_per_second", "bytes"}], "outside_seconds", "bound", "baseline", "tried": [{"setting", "code",
"samples_per_second", "rates", "first_sample_seconds", "workers"} or {"setting", "code", "error"}], "advice":
[...]}``; a trial with worker
processes has their profiles added up in ``workers`` (:func:`wds_core.observe.metrics.combine`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import itertools
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ..errors import SpecError, WdsError, redact
from ..io import files
from ..observe.metrics import combine, read_reports
from ..observe.profiling import Profile
from .common import subcommand

__all__ = ["add_parser"]

TRIES = ("workers", "threads", "read_ahead")
_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _a_file(target: str) -> bool:
    """Whether ``target`` names a local file (a shard called ``pkg.mod:fn``) rather than a function; in secure mode,
    a name outside the roots is no file of this command's."""
    try:
        return files.exists(target)
    except SpecError:
        return False


def _factory(args: argparse.Namespace) -> tuple[Callable[..., Any], bool]:
    """A function making a fresh pipeline (shards given here take ``threads`` and ``read_ahead``), and whether
    the pipeline is one this command made from shards."""
    target = args.target
    if _FUNCTION.match(target) and not _a_file(target):
        module_name, name = target.split(":")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # a module next to the user, as `python -m` would find it
        function = getattr(importlib.import_module(module_name), name)

        def made(**_: Any) -> Any:
            pipeline = function()
            if not callable(getattr(pipeline, "running_stages", None)):
                raise SpecError(f"{target} returned {type(pipeline).__name__}; wds profile needs a wds pipeline")
            return pipeline

        return made, False
    from ..dataset import WebDataset
    from ..io.remote.readahead import ReadAhead
    from ..io.storage import Storage

    def from_shards(threads: int = 0, read_ahead: ReadAhead | None = None) -> Any:
        dataset = WebDataset(target, storage=Storage(read_ahead=read_ahead) if read_ahead else None)
        if args.decode:
            dataset = dataset.decode(args.decode, num_threads=threads)
        return dataset

    return from_shards, True


def _profiled(pipeline: Any, samples: int) -> Profile:
    with Profile(pipeline) as profile:
        items = iter(pipeline)
        for _ in itertools.islice(items, samples):
            pass
        _close(items)
    return profile


def _rate(pipeline: Any, samples: int) -> tuple[float, float]:
    """Samples per second after the first, and the seconds to the first."""
    started = time.perf_counter()
    items = iter(pipeline)
    try:
        next(items)
    except StopIteration:
        return 0.0, time.perf_counter() - started
    first = time.perf_counter() - started
    count = sum(1 for _ in itertools.islice(items, samples - 1))
    elapsed = time.perf_counter() - started - first
    _close(items)
    return (count / elapsed if elapsed > 0 else 0.0), first


def _close(items: Any) -> None:
    """Stop an iteration left before its end (a generator's ``finally`` blocks, a loader's workers)."""
    close = getattr(items, "close", None)
    if callable(close):
        close()


def _trials(make: Callable[..., Any], from_shards: bool, args: argparse.Namespace, report: dict) -> list[dict]:
    """Each setting that could lift the bound, run ``--repeats`` times for the same samples: what it gave, and the
    code that sets it (it runs as printed, with ``import wds_core`` and your ``dataset``)."""
    wanted = set(TRIES) if args.try_ == "all" else set() if args.try_ == "none" else set(args.try_.split(","))
    tried = []
    cores = os.cpu_count() or 1
    if "workers" in wanted:
        from ..loader.main import Loader

        for workers in sorted({2, cores}):
            loader = functools.partial(lambda n: Loader(make(), num_workers=n), workers)
            code = f"loader = wds_core.Loader(dataset, num_workers={workers})  # PyTorch: wds_torch.WebLoader"
            with files.temporary_directory(prefix="wds-profile-") as folder:
                reports = os.path.join(folder, "workers.jsonl")
                saved = os.environ.get("WDS_PROFILE")
                os.environ["WDS_PROFILE"] = reports  # the workers profile their runs there (wds_core.observe.metrics)
                try:
                    trial = _trial(f"Loader(num_workers={workers})", code, loader, args)
                finally:
                    _restore("WDS_PROFILE", saved)
                if files.exists(reports):
                    trial["workers"] = combine(read_reports(reports))  # of all its runs
                    trial["workers"]["processes"] = workers
            tried.append(trial)
    if "threads" in wanted and from_shards and args.decode:
        code = f"dataset = {_dataset_code(args, f'num_threads={cores}')}"
        tried.append(_trial(f"decode(..., num_threads={cores})", code, lambda: make(threads=cores), args))
    reader = next((s for s in report["stages"] if "bytes" in s), None)
    if "read_ahead" in wanted and from_shards and reader is not None and "://" in args.target:
        from ..io.remote.readahead import ReadAhead

        more = dataclasses.replace(ReadAhead(), shards_ahead=16, in_flight=48, budget=256 << 20)
        setting = (
            "storage=wds_core.Storage(read_ahead=wds_core.ReadAhead(shards_ahead=16, in_flight=48, budget=256 * 2**20))"
        )
        code = f"dataset = {_dataset_code(args, '', setting)}"
        tried.append(_trial(setting, code, lambda: make(read_ahead=more), args))
    return tried


def _dataset_code(args: argparse.Namespace, decode_option: str, option: str = "") -> str:
    """``wds_core.WebDataset(...)`` as this command reads the shards, with ``option`` and a decode option added."""
    made = f"wds_core.WebDataset({args.target!r}{', ' + option if option else ''})"
    if args.decode:
        made += f".decode({args.decode!r}{', ' + decode_option if decode_option else ''})"
    return made


def _restore(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _shares(combined: dict[str, Any]) -> str:
    """``decode 88% (waiting 2%), ...``: where the workers' time went, added over them."""
    rows = [(s["name"], s["seconds"], s["waiting_seconds"]) for s in combined["stages"]]
    rows.append(("outside (handing items over)", combined["outside_seconds"], None))
    total = sum(seconds for _, seconds, _ in rows) or 1e-9
    shown = [f"{name} {100 * seconds / total:.0f}%" for name, seconds, _ in sorted(rows, key=lambda r: -r[1])
             if seconds >= 0.01 * total]  # fmt: skip
    return ", ".join(shown)


def _trial(setting: str, code: str, made: Callable[[], Any], args: argparse.Namespace) -> dict[str, Any]:
    """What ``setting`` gave in each of ``--repeats`` runs (their median is its rate), or why it could not run
    (fewer shards than workers, say)."""
    rates, first = [], None
    try:
        for _ in range(args.repeats):
            rate, took = _rate(made(), args.samples)
            rates.append(rate)
            first = took if first is None else first
    except WdsError as exn:
        return {"setting": setting, "code": code, "samples_per_second": 0.0, "first_sample_seconds": None,
                "error": redact(exn)}  # fmt: skip
    return {"setting": setting, "code": code, "samples_per_second": statistics.median(rates), "rates": rates,
            "first_sample_seconds": first}  # fmt: skip


def _spread(trial: dict[str, Any]) -> float:
    """How much a setting's runs differed: (highest - lowest) / median."""
    rates = trial.get("rates") or []
    middle = statistics.median(rates) if rates else 0.0
    return (max(rates) - min(rates)) / middle if len(rates) > 1 and middle > 0 else 0.0


def advise(report: dict[str, Any], tried: list[dict[str, Any]], baseline: dict[str, Any] | None = None) -> list[str]:
    """What the profile and the trials say, in sentences: the bound, and the setting that helped most, only when
    it beat one process by more than the runs themselves varied (``baseline``: one process's runs, unprofiled)."""
    wall = report["wall_seconds"] or 1e-9
    advice = []
    stages = report["stages"]
    outside = report["outside_seconds"]
    bound = max(stages, key=lambda s: s["seconds"]) if stages else None
    if bound is None or outside > bound["seconds"]:
        advice.append(f"the pipeline keeps up: {100 * outside / wall:.0f}% of the time is the consumer's own")
    else:
        waiting = bound["waiting_seconds"] / bound["seconds"] if bound["seconds"] > 0 else 0.0
        what = (f"{100 * waiting:.0f}% of it waiting (for storage, a pipe, a lock)" if waiting >= 0.5
                else f"{100 * (1 - waiting):.0f}% of it computing")  # fmt: skip
        advice.append(f"bound by {bound['name']}: {100 * bound['seconds'] / wall:.0f}% of the time, {what}")
    if baseline is None:
        baseline = {"samples_per_second": (report["samples"] or 0) / wall, "rates": []}
    rate = baseline["samples_per_second"]
    ran = [t for t in tried if "error" not in t]
    best = max(ran, key=lambda t: t["samples_per_second"], default=None)
    if best is None or rate <= 0:
        return advice + (["none of the settings tried could run"] if tried else [])
    noise = max(_spread(baseline), _spread(best))  # how much the two compared varied from run to run
    gain = best["samples_per_second"] / rate
    apart = min(best.get("rates") or [best["samples_per_second"]]) > max(baseline.get("rates") or [rate])
    if gain >= max(1.1, 1 + 2 * noise) and apart:
        advice.append(f"use {best['setting']}: {best['samples_per_second']:,.0f} samples/s, {gain:.1f}x the "
                      f"{rate:,.0f} of one process (runs varied by {100 * noise:.0f}%):")  # fmt: skip
        advice.append(f"    {best['code']}")
    elif gain > 1:
        advice.append(f"no setting tried beats one process ({rate:,.0f}/s) by more than the runs varied "
                      f"({100 * noise:.0f}%; best {best['setting']}, {gain:.2f}x): nothing to change")  # fmt: skip
    else:
        advice.append(f"none of the settings tried reads faster than one process ({rate:,.0f}/s)")
    return advice


def svg(report: dict[str, Any]) -> str:
    """A bar a stage (and the consumer): computing dark, waiting light, as shares of the wall time."""
    rows = [(s["name"], s["seconds"], s["waiting_seconds"]) for s in report["stages"]]
    rows.append(("(outside the pipeline)", report["outside_seconds"], report["outside_waiting"]))
    wall = report["wall_seconds"] or 1e-9
    width, label, bar_height = 720, 230, 22
    height = 40 + bar_height * len(rows) + 30
    scale = (width - label - 80) / wall
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="10" y="22" font-size="14">wds profile: {wall:.2f} s, {report["samples"] or 0:,} samples; '
             f'bound by {_escape(report["bound"] or "nothing sampled")}</text>']  # fmt: skip
    for i, (name, seconds, waiting) in enumerate(rows):
        y = 40 + i * bar_height
        busy = max(seconds - waiting, 0.0)
        parts.append(f'<text x="10" y="{y + 15}">{_escape(name)}</text>')
        parts.append(f'<rect x="{label}" y="{y + 3}" width="{busy * scale:.1f}" height="{bar_height - 6}" '
                     f'fill="#2b6cb0"><title>computing {busy:.3f} s</title></rect>')  # fmt: skip
        parts.append(f'<rect x="{label + busy * scale:.1f}" y="{y + 3}" width="{waiting * scale:.1f}" height='
                     f'"{bar_height - 6}" fill="#90cdf4"><title>waiting {waiting:.3f} s</title></rect>')  # fmt: skip
        parts.append(f'<text x="{label + seconds * scale + 6:.1f}" y="{y + 15}">{100 * seconds / wall:.1f}%</text>')
    y = 40 + bar_height * len(rows) + 18
    parts.append(f'<rect x="10" y="{y - 10}" width="12" height="12" fill="#2b6cb0"/><text x="28" y="{y}">computing'
                 f'</text><rect x="110" y="{y - 10}" width="12" height="12" fill="#90cdf4"/>'
                 f'<text x="128" y="{y}">waiting</text></svg>')  # fmt: skip
    return "\n".join(parts)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def run_profile(args: argparse.Namespace) -> int:
    if args.samples < 1 or args.repeats < 1:
        raise SpecError(f"-n and --repeats must be at least 1, got {args.samples} and {args.repeats}")
    make, from_shards = _factory(args)
    profile = _profiled(make(), args.samples)
    report = profile.report()
    tried = _trials(make, from_shards, args, report)
    baseline = _trial("one process", "dataset", make, args) if tried else None  # unprofiled, as the trials run
    advice = advise(report, tried, baseline)
    if args.svg:
        files.write_atomic(args.svg, svg(report))
        print(f"wrote the chart of the stages' times to {os.path.abspath(args.svg)}", file=sys.stderr)
    if args.json:
        print(json.dumps({**report, "baseline": baseline, "tried": tried, "advice": advice}))
        return 0
    print(profile.table())
    if baseline is not None and "error" not in baseline:
        print(f"one process, unprofiled: {_runs(baseline)}")
    for trial in tried:
        if "error" in trial:
            print(f"tried {trial['setting']}: could not run it: {trial['error']}")
            continue
        print(f"tried {trial['setting']}: {_runs(trial)} (first sample after {trial['first_sample_seconds']:.2f} s)")
        if trial.get("workers"):
            print(f"  the {trial['workers']['processes']} workers' time: {_shares(trial['workers'])}")
    for line in advice:
        print(line)
    return 0


def _runs(trial: dict[str, Any]) -> str:
    rates = trial.get("rates") or [trial["samples_per_second"]]
    spread = f" ({len(rates)} runs, {min(rates):,.0f}-{max(rates):,.0f})" if len(rates) > 1 else ""
    return f"{trial['samples_per_second']:,.0f} samples/s{spread}"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = subcommand(commands, "profile", "show where a pipeline's time goes and what to change", run_profile,
                        __doc__ or "")  # fmt: skip
    parser.add_argument("target", help="shard URLs or a brace spec, or MODULE:FUNCTION returning a wds pipeline")
    parser.add_argument("-n", "--samples", type=int, default=2000, help="samples to run (default 2000)")
    parser.add_argument("--decode", default="", help="decode shards given here with this handler (rgb8, pil...)")
    parser.add_argument("--try", dest="try_", default="all",
                        help=f"settings to try: all (default), none, or some of {','.join(TRIES)}")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=2,
                        help="runs of one process and of each setting tried (default 2): advice only where a "
                        "setting beats one process by more than its runs varied")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--svg", default="", help="also draw the stages' times into this SVG file")
