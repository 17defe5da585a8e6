"""Scale-out processing: run a function over every shard of a dataset, writing the results as new shards.

    summary = map_shards(fix_caption, "in/shard-{000..099}.tar", "out/shard-%03d.tar", engine="dask")
    print(summary)  # inputs, outputs written, skipped, samples in and out, failures

``fn`` takes one sample and returns a sample, ``None`` (dropped) or a list of
samples (``per="sample"``, the default), or takes the iterator of a shard's
samples and yields samples (``per="shard"``).  Samples arrive undecoded (field
bytes, plus ``__key__``/``__url__``); returned fields are encoded by extension
as :class:`TarWriter` does.  ``fn`` must be importable (a module-level function)
so that worker processes can find it.

* Each output shard is written atomically (a temporary name, renamed when
  complete), so an output that exists is complete: a rerun skips it
  (``overwrite=True`` redoes everything), like img2dataset's incremental mode.
* A shard whose processing fails is tried again up to ``retries`` times, then
  reported with its error in the summary while the others complete.
* Engines: ``"process"`` (a local process pool of ``workers`` processes; a pool
  broken by a dying worker is replaced and its unfinished shards retried),
  ``"dask"`` (``dask.distributed``: a ``LocalCluster`` of ``workers``
  single-threaded processes, or the cluster at ``scheduler``, for many
  machines), and ``"serial"`` (in this process, for debugging).
* Outputs are a ``%d`` pattern numbered by input position, a brace pattern or
  list with one name per input, or a folder (``.../``) receiving the inputs'
  file names.  Any URL the storage layer writes works on both sides.
"""

from __future__ import annotations

import collections
import functools
import glob
import multiprocessing
import os
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from .errors import SpecError
from .io.urls import expand_urls

__all__ = ["ShardJobSummary", "map_shards", "output_names"]


@dataclass
class ShardJobSummary:
    """What a :func:`map_shards` run did."""

    inputs: int = 0
    written: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    samples_in: int = 0
    samples_out: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (input, error)

    @property
    def ok(self) -> bool:
        return not self.failures

    def __str__(self) -> str:
        lines = [
            f"{self.inputs} inputs: {len(self.written)} shards written, {len(self.skipped)} already complete, "
            f"{len(self.failures)} failed; {self.samples_in:,} samples in, {self.samples_out:,} out"
        ]
        lines += [f"FAILED {url}: {error}" for url, error in self.failures]
        return "\n".join(lines)


def output_names(inputs: list[str], outputs: Any) -> list[str]:
    """One output name per input (see the module doc)."""
    if isinstance(outputs, str):
        if outputs.endswith("/"):
            names = [outputs + url.rstrip("/").rsplit("/", 1)[-1] for url in inputs]
        elif "%" in outputs:
            try:
                names = [outputs % i for i in range(len(inputs))]
            except TypeError:
                raise SpecError(f"the output pattern {outputs!r} needs one %d-style field") from None
        else:
            names = expand_urls(outputs)
    else:
        names = [os.fspath(name) for name in outputs]
    if len(names) != len(inputs):
        raise SpecError(f"{len(inputs)} inputs but {len(names)} output names")
    if len(set(names)) != len(names):
        raise SpecError("two inputs would write the same output")
    return names


def _complete(url: str, storage_options: dict | None) -> bool:
    from .io.remote import filesystem
    from .io.storage import local_path

    path = local_path(url)
    if path is not None:
        return os.path.exists(path)
    fs, fspath = filesystem(url, storage_options or {})
    return bool(fs.exists(fspath))


def process_shard(fn: Callable, per: str, src: str, dst: str, storage_options: dict | None) -> tuple[int, int]:
    """Read ``src``, apply ``fn``, write ``dst`` atomically: ``(samples in, samples out)``."""
    from .fluid import WebDataset
    from .io.storage import local_path
    from .writer import TarWriter

    path = local_path(dst)
    if path is not None:  # what an earlier attempt killed mid-write left behind (see sinks._temporary_name)
        folder, name = os.path.split(os.path.abspath(path))
        for stale in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.partial")):
            os.remove(stale)
    counts = [0, 0]

    def samples() -> Iterable[dict[str, Any]]:
        for sample in WebDataset(
            [src], nodesplitter=None, workersplitter=None, empty_check=False, storage_options=storage_options
        ):
            counts[0] += 1
            yield sample

    def results() -> Iterable[Any]:
        if per == "shard":
            yield from fn(iter(samples()))
            return
        for sample in samples():
            out = fn(sample)
            if out is None:
                continue
            if isinstance(out, dict):
                yield out
            else:
                yield from out

    with TarWriter(dst, storage_options=storage_options) as sink:
        for sample in results():
            sink.write({k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")})
            counts[1] += 1
    return counts[0], counts[1]


def map_shards(
    fn: Callable,
    inputs: Any,
    outputs: Any,
    *,
    per: str = "sample",
    engine: str = "process",
    workers: int | None = None,
    scheduler: str | None = None,
    retries: int = 2,
    overwrite: bool = False,
    storage_options: dict | None = None,
    progress: Callable[[ShardJobSummary], None] | None = None,
) -> ShardJobSummary:
    """Apply ``fn`` to every shard of ``inputs`` and write ``outputs`` (see the module doc)."""
    if per not in ("sample", "shard"):
        raise SpecError(f"per must be 'sample' or 'shard', got {per!r}")
    if engine not in ("process", "dask", "serial"):
        raise SpecError(f"engine must be 'process', 'dask' or 'serial', got {engine!r}")
    if retries < 0:
        raise SpecError(f"retries must be >= 0, got {retries}")
    urls = expand_urls(inputs) if isinstance(inputs, str) else [os.fspath(u) for u in inputs]
    names = output_names(urls, outputs)
    summary = ShardJobSummary(inputs=len(urls))
    jobs = []
    for src, dst in zip(urls, names):
        if not overwrite and _complete(dst, storage_options):
            summary.skipped.append(dst)
        else:
            jobs.append((src, dst))
    run = {"process": _run_pool, "dask": _run_dask, "serial": _run_serial}[engine]
    work = functools.partial(process_shard, fn, per, storage_options=storage_options)  # work(src, dst), picklable
    run(jobs, work, summary, retries, workers, scheduler, progress)
    return summary


def _record(summary: ShardJobSummary, dst: str, result: tuple[int, int], progress: Any) -> None:
    summary.written.append(dst)
    summary.samples_in += result[0]
    summary.samples_out += result[1]
    if progress is not None:
        progress(summary)


def _error_text(exn: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exn), exn)).strip()


def _retry(attempts: collections.Counter[tuple[str, str]], job: tuple[str, str], retries: int) -> bool:
    """Count a failed attempt of ``job``; whether it gets another."""
    attempts[job] += 1
    return attempts[job] <= retries


def _run_serial(
    jobs: list, work: Callable, summary: ShardJobSummary, retries: int, workers: Any, scheduler: Any, progress: Any
) -> None:
    for src, dst in jobs:
        for attempt in range(retries + 1):
            try:
                _record(summary, dst, work(src, dst), progress)
                break
            except Exception as exn:  # noqa: BLE001 - reported in the summary
                if attempt == retries:
                    summary.failures.append((src, _error_text(exn)))


def _run_pool(
    jobs: list, work: Callable, summary: ShardJobSummary, retries: int, workers: Any, scheduler: Any, progress: Any
) -> None:
    attempts: collections.Counter[tuple[str, str]] = collections.Counter()
    pending = list(jobs)
    context = multiprocessing.get_context("spawn")
    while pending:
        with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1, mp_context=context) as pool:
            futures = {pool.submit(work, src, dst): (src, dst) for src, dst in pending}
            pending = []
            for future in as_completed(futures):
                job = futures[future]
                try:
                    result = future.result()
                except Exception as exn:  # noqa: BLE001 - retried, then reported
                    if _retry(attempts, job, retries):
                        pending.append(job)
                    else:
                        reason = "a worker process died" if isinstance(exn, BrokenProcessPool) else _error_text(exn)
                        summary.failures.append((job[0], reason))
                    continue
                _record(summary, job[1], result, progress)


def _run_dask(
    jobs: list, work: Callable, summary: ShardJobSummary, retries: int, workers: Any, scheduler: Any, progress: Any
) -> None:
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError:
        raise SpecError("engine='dask' needs dask.distributed: pip install 'wds[dask]'") from None
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        n = workers or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        attempts: collections.Counter[tuple[str, str]] = collections.Counter()
        futures, submitted = {}, []
        for src, dst in jobs:
            future = client.submit(work, src, dst, pure=False)
            futures[future.key] = (src, dst)
            submitted.append(future)
        queue = dask_completed(submitted)
        for future in queue:
            job = futures[future.key]
            try:
                result = future.result()
            except Exception as exn:  # noqa: BLE001 - retried, then reported (KilledWorker included)
                if _retry(attempts, job, retries):
                    again = client.submit(work, *job, pure=False)
                    futures[again.key] = job
                    queue.add(again)
                else:
                    summary.failures.append((job[0], _error_text(exn)))
                continue
            _record(summary, job[1], result, progress)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
