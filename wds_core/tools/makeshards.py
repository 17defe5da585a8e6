"""Shards from any Python inputs, in parallel: ``make_shards(fn, inputs, "out/train-%06d.tar")``.

    summary = make_shards(load_pair, rows, "s3://bucket/train-%06d.tar", work_dir="/scratch/train", workers=8,
                          maxsize="64MB")
    dataset = wds_core.WebDataset("s3://bucket/train-{000000..000041}.tar", sample_counts=summary.descriptor)
    len(dataset)  # the samples written

``fn(input)`` turns one input (a file name, a row, an id: anything that pickles) into a sample dict, ``None``
(nothing), or a list of samples.  A sample without ``__key__`` is keyed by its input's position (``0000000042``, or
``0000000042_0003`` for the fourth of a list).  Inputs are cut into jobs of ``per_job`` consecutive inputs, run on
the engines of :func:`~.parallel.map_shards` (processes, Dask, serial) with its retries; each job writes its shards
(``maxcount`` samples, ``maxsize`` bytes at most: ``"64MB"``, ``"1GiB"``) into a local staging folder, and when every
job is done they are published in input order under the output pattern's numbers (``out/train-000000.tar``...),
renamed locally or uploaded, with a wids descriptor of them (``nsamples`` per shard: ``len()`` of a dataset given
it as ``sample_counts``).

Killed or failed part way, the same call resumes: the staging folder's log says which jobs are done, and only the
others run (and a publication cut short goes on where it stopped).  The staging folder is ``.<name>.staging`` beside
local outputs, or ``work_dir`` (needed for remote outputs); it is removed once everything is published.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError, redact
from ..io import files
from ..io.storage import Storage, local_path, storage_argument
from ..limits import parse_size
from ..writer import refuse_existing, remove_stale
from .jobs import run_jobs
from .parallel import JobLog

__all__ = ["MakeShardsSummary", "make_shards"]


@dataclass
class MakeShardsSummary:
    """What a :func:`make_shards` call did."""

    inputs: int = 0
    jobs: int = 0
    jobs_done_before: int = 0  # by an earlier call that was stopped
    samples: int = 0
    shards: list[str] = field(default_factory=list)  # published, in order
    descriptor: str | None = None
    failures: list[tuple[int, str]] = field(default_factory=list)  # (job, error)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        lines = [
            f"{self.inputs:,} inputs in {self.jobs} jobs ({self.jobs_done_before} done before): {self.samples:,} "
            f"samples in {len(self.shards)} shards, {len(self.failures)} jobs failed, {self.seconds:.1f} s"
        ]
        lines += [f"FAILED job {job}: {redact(error)}" for job, error in self.failures]
        return "\n".join(lines)


def _samples(out: Any, index: int) -> Iterator[dict[str, Any]]:
    """``fn``'s result for input ``index`` as samples, keyed by the input's position where they have no key."""
    if out is None:
        return
    if isinstance(out, dict):
        yield out if "__key__" in out else {"__key__": f"{index:010d}", **out}
        return
    if not isinstance(out, (list, tuple)) and not hasattr(out, "__next__"):
        raise SpecError(f"fn must give a sample dict, None or a list of dicts; input {index} gave a "
                        f"{type(out).__name__}")  # fmt: skip
    for number, sample in enumerate(out):
        if not isinstance(sample, dict):
            raise SpecError(f"fn must give a sample dict, None or a list of dicts; input {index} gave a "
                            f"{type(sample).__name__} in its list")  # fmt: skip
        yield sample if "__key__" in sample else {"__key__": f"{index:010d}_{number:04d}", **sample}


class JobInputs:
    """A job's ``(position, input)`` pairs: hashable by identity (the engines key jobs by them), picklable."""

    def __init__(self, items: list[tuple[int, Any]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        return iter(self.items)


def make_job(
    fn: Callable, job: int, items: JobInputs, staging: str, maxcount: int, maxsize: int
) -> list[dict[str, Any]]:
    """Run ``fn`` over one job's inputs, writing its shards into ``staging``: ``[{"url", "nsamples"}]`` in order."""
    from ..writer import ShardWriter

    prefix = f"job-{job:07d}-"
    for stale in files.glob(f"{prefix}*", staging):  # what an attempt that was stopped left
        files.remove(stale)
    with ShardWriter(os.path.join(staging, prefix + "%04d.tar"), maxcount=maxcount, maxsize=maxsize) as sink:
        for index, item in items:
            for sample in _samples(fn(item), index):
                sink.write(sample)
    return [{"url": os.path.basename(shard["url"]), "nsamples": shard["nsamples"]} for shard in sink.shards]


def _jobs(inputs: Iterable[Any], per_job: int) -> Iterator[tuple[int, JobInputs]]:
    numbered = enumerate(inputs)
    for job in itertools.count():
        items = list(itertools.islice(numbered, per_job))
        if not items:
            return
        yield job, JobInputs(items)


def _staging(output: str, work_dir: str | None) -> str:
    if work_dir is not None:
        return os.fspath(work_dir)
    path = local_path(output)
    if path is None:
        raise SpecError(f"make_shards writes remote outputs ({output.split('://')[0]}://) from a local staging "
                        "folder: give work_dir= (a local folder of your choice; a rerun with it resumes)")  # fmt: skip
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name.split('%')[0].rstrip('-_.') or 'shards'}.staging")


def _descriptor_name(output: str) -> str:
    head = output.split("%")[0].rstrip("-_.")
    return (head if head and not head.endswith("/") else head + "shards") + ".json"


def _reporter(progress: Any) -> Callable[..., None] | None:
    """``said(summary, jobs_done, final=False)``: the progress lines, or the caller's ``progress(summary)`` after
    each job (not again at the end), or nothing."""
    if callable(progress):
        return lambda summary, jobs, final=False: None if final else progress(summary)
    return _Progress() if progress else None


class _Progress:
    """``progress=True``: a line on stderr as jobs end (at most one every 2 s, and the last)."""

    def __init__(self) -> None:
        self.said = 0.0

    def __call__(self, summary: MakeShardsSummary, done: int, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.said < 2.0:
            return
        self.said = now
        rate = summary.samples / summary.seconds if summary.seconds else 0.0
        print(f"make_shards: {done}/{summary.jobs} jobs, {summary.samples:,} samples, {rate:,.0f}/s",
              file=sys.stderr)  # fmt: skip


def make_shards(
    fn: Callable,
    inputs: Iterable[Any],
    output: str,
    *,
    per_job: int | None = None,
    maxcount: int = 100_000,
    maxsize: int | float | str = "1GB",
    engine: str = "process",
    workers: int | None = None,
    scheduler: str | None = None,
    retries: int = 2,
    work_dir: str | None = None,
    descriptor: str | None = "auto",
    storage: Storage | dict | None = None,
    progress: bool | Callable[[MakeShardsSummary], None] = False,
    memory_limit: int | None = None,
    overwrite: bool = False,
    storage_options: Storage | dict | None = None,
) -> MakeShardsSummary:
    """Run ``fn`` over ``inputs`` in parallel and write what it gives as shards ``output % n`` (see the module doc).

    ``per_job``: inputs a job takes (default: a list's length over four jobs a worker, at most 10,000; 1,000 for
    an iterator); ``descriptor``: the wids descriptor written beside the shards (``"auto"``: the output's name
    before its ``%`` field, ``.json``; ``None``: none); ``progress``: ``True`` for a line on stderr, or a function
    called with the summary as each job ends.  A local output pattern that holds shards of an earlier run is
    refused before anything runs (they would stay beside the new ones), unless ``overwrite=True``, which replaces
    the whole set (those not written again removed) and the descriptor; a call resuming a stopped one is not
    refused for the shards it published itself.
    """
    started = time.monotonic()
    try:
        output % 0
    except TypeError:
        raise SpecError(f"the output pattern {output!r} needs one %d-style field, as in 'out/train-%06d.tar'") from None
    try:
        size = parse_size(maxsize)
    except ValueError as exn:
        raise SpecError(f"maxsize: {exn}") from None
    if per_job is None:
        count = len(inputs) if hasattr(inputs, "__len__") else None  # type: ignore[arg-type]
        per_job = 1000 if count is None else max(1, min(10_000, -(-count // (4 * (workers or os.cpu_count() or 1)))))
    staging = _staging(output, work_dir)
    files.makedirs(staging)
    log = JobLog(os.path.join(staging, "log.jsonl"))
    if not overwrite and not log.entries:  # a fresh run, not one resuming what it began
        try:
            refuse_existing(output, 0, "overwrite=True")
        except SpecError:
            log.close()
            _remove_folder(staging)
            raise
    summary = MakeShardsSummary()
    said = _reporter(progress)
    made: dict[int, list[dict[str, Any]]] = {}
    try:
        pending = []
        for job, items in _jobs(inputs, per_job):
            summary.jobs += 1
            summary.inputs += len(items)
            entry = log.entries.get(str(job))
            if entry is not None and entry.get("status") == "done" and entry.get("output") == str(len(items)):
                made[job] = entry["shards"]
                summary.jobs_done_before += 1
            else:
                pending.append((job, items))

        def done(work: tuple, shards: list[dict[str, Any]], attempts: int) -> None:
            made[work[0]] = shards
            summary.samples += sum(shard["nsamples"] for shard in shards)
            summary.seconds = time.monotonic() - started
            log.record(str(work[0]), str(len(work[1])), "done", attempts, shards=shards)
            if said is not None:
                said(summary, len(made))

        def failed(work: tuple, error: str, attempts: int) -> None:
            summary.failures.append((work[0], error))
            log.record(str(work[0]), str(len(work[1])), "failed", attempts, error=error)

        worker = functools.partial(make_job, fn, staging=staging, maxcount=maxcount, maxsize=size)
        run_jobs(pending, worker, done, failed, engine=engine, workers=workers, scheduler=scheduler,
                 retries=retries, memory_limit=memory_limit)  # fmt: skip
    finally:
        log.close()
    summary.samples = sum(shard["nsamples"] for shards in made.values() for shard in shards)
    if summary.failures:  # nothing published: a rerun retries the failed jobs, then publishes
        summary.seconds = time.monotonic() - started
        return summary
    storage = Storage.of(storage_argument("make_shards", storage, storage_options))
    published = _publish([made[job] for job in sorted(made)], staging, output, storage)
    summary.shards = [url for url, _ in published]
    if overwrite:
        remove_stale(output, len(published))  # the earlier run's shards past this one's
    if descriptor is not None:
        summary.descriptor = _descriptor_name(output) if descriptor == "auto" else descriptor
        _write_descriptor(summary.descriptor, published, output, storage, staging)
    _remove_folder(staging)
    summary.seconds = time.monotonic() - started
    if said is not None:
        said(summary, summary.jobs, final=True)
    return summary


def _publish(jobs: list[list[dict[str, Any]]], staging: str, output: str, storage: Storage) -> list[tuple[str, int]]:
    """Each staged shard, in job order, under ``output % n``: renamed (local) or uploaded; one already moved by
    a publication that was stopped is left as it is."""
    published = []
    for number, shard in enumerate(shard for shards in jobs for shard in shards):
        staged, target = os.path.join(staging, shard["url"]), output % number
        if files.exists(staged):
            path = local_path(target)
            if path is not None:
                files.makedirs(os.path.dirname(os.path.abspath(path)))
                files.replace(staged, path)
            else:
                with files.open_file(staged, "rb") as source:
                    _upload(storage, target, source)
                files.remove(staged)
        published.append((target, int(shard["nsamples"])))
    return published


def _upload(storage: Storage, target: str, source: Any) -> None:
    from ..io.storage import create_shard

    sink = create_shard(target, storage)
    try:
        while chunk := source.read(1 << 22):
            sink.write(chunk)
    except BaseException:
        sink.abort()
        raise
    sink.commit()


def _write_descriptor(path: str, published: list[tuple[str, int]], output: str, storage: Storage, staging: str) -> None:
    """The wids descriptor of the published shards at ``path`` (a local file, or uploaded through ``storage``)."""
    from ..sources.descriptor import write_descriptor

    shards = [{"url": url, "nsamples": n} for url, n in published]
    name = os.path.basename(output.split("%")[0].rstrip("-_."))
    if local_path(path) is not None:
        write_descriptor(path, shards, name=name)
        return
    here = os.path.join(staging, "descriptor.json")
    write_descriptor(here, shards, name=name)
    storage.write_bytes(path, files.read_file(here))


def _remove_folder(folder: str) -> None:
    for name in files.listdir(folder):
        files.remove(os.path.join(folder, name))
    files.rmdir(folder)
