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
import contextlib
import functools
import glob
import json
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError, install_hint
from ..io.storage import Storage
from ..io.urls import expand_urls

__all__ = ["JobLog", "ShardJobSummary", "dask_client", "map_shards", "output_names", "run_jobs"]


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


def process_shard(fn: Callable, per: str, src: str, dst: str, storage: Storage) -> tuple[int, int, float]:
    """Read ``src``, apply ``fn``, write ``dst`` atomically, through ``storage``: ``(samples in, samples out,
    seconds)``."""
    started = time.perf_counter()
    from ..dataset import WebDataset
    from ..io.storage import local_path
    from ..writer import TarWriter

    path = local_path(dst)
    if path is not None:  # what an earlier attempt killed mid-write left behind (see wds_core.io.sinks.temporary_name)
        folder, name = os.path.split(os.path.abspath(path))
        for stale in glob.glob(os.path.join(glob.escape(folder), f".{glob.escape(name)}.*.partial")):
            os.remove(stale)
    counts = [0, 0]

    def samples() -> Iterable[dict[str, Any]]:
        for sample in WebDataset(
            [src], nodesplitter=None, workersplitter=None, empty_check=False, storage_options=storage
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

    with TarWriter(dst, storage_options=storage) as sink:
        for sample in results():
            sink.write({k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")})
            counts[1] += 1
    return counts[0], counts[1], round(time.perf_counter() - started, 3)


class JobLog:
    """A job's record, one JSON line per shard that ended: what is done, what failed and with what error.

    Each line is ``{"input", "output", "status": "done" | "failed", "attempts", "time", ...}`` plus
    ``samples_in``/``samples_out``/``seconds`` when done and ``error`` when failed.  Lines are appended
    (and flushed) as shards end, so the log of a job that was killed says what it had finished; a line
    cut short by the kill is ignored.  A rerun with the same log skips the shards it records as done
    (without asking the store whether each output exists) and tries the others again.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self.entries: dict[str, dict[str, Any]] = {}  # input -> its last line
        cut = False
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    cut = not line.endswith("\n")
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # the last line of a killed driver
                    if isinstance(entry, dict) and "input" in entry:
                        self.entries[entry["input"]] = entry
        self._out = open(self.path, "a", encoding="utf-8")
        if cut:  # what follows starts on a line of its own
            self._out.write("\n")

    def done(self, src: str, dst: str) -> bool:
        entry = self.entries.get(src)
        return entry is not None and entry.get("status") == "done" and entry.get("output") == dst

    def failures(self) -> dict[str, str]:
        """Inputs whose last line is a failure, with its error."""
        return {src: e.get("error", "") for src, e in self.entries.items() if e.get("status") == "failed"}

    def record(self, src: str, dst: str, status: str, attempts: int, **fields: Any) -> None:
        entry = {"input": src, "output": dst, "status": status, "attempts": attempts, **fields}
        entry["time"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.entries[src] = entry
        self._out.write(json.dumps(entry) + "\n")
        self._out.flush()

    def close(self) -> None:
        self._out.close()


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
    storage_options: Storage | dict | None = None,
    progress: Callable[[ShardJobSummary], None] | None = None,
    log: str | os.PathLike | None = None,
    memory_limit: int | None = None,
) -> ShardJobSummary:
    """Apply ``fn`` to every shard of ``inputs`` and write ``outputs`` (see the module doc).

    ``log``: a local file, the job's record (:class:`JobLog`); ``memory_limit``: bytes a worker may
    allocate for a shard (see :func:`run_jobs`); ``progress(summary)`` is called as each shard ends.
    """
    if per not in ("sample", "shard"):
        raise SpecError(f"per must be 'sample' or 'shard', got {per!r}")
    urls = expand_urls(inputs) if isinstance(inputs, str) else [os.fspath(u) for u in inputs]
    names = output_names(urls, outputs)
    summary = ShardJobSummary(inputs=len(urls))
    storage = Storage.of(storage_options)
    record = JobLog(log) if log is not None else None
    try:
        jobs = []
        for src, dst in zip(urls, names):
            if not overwrite and (record.done(src, dst) if record else storage.exists(dst)):
                summary.skipped.append(dst)
            else:
                jobs.append((src, dst))

        def done(job: tuple, result: tuple[int, int, float], attempts: int) -> None:
            summary.written.append(job[1])
            summary.samples_in += result[0]
            summary.samples_out += result[1]
            if record is not None:
                record.record(
                    job[0], job[1], "done", attempts, samples_in=result[0], samples_out=result[1], seconds=result[2]
                )
            if progress is not None:
                progress(summary)

        def failed(job: tuple, error: str, attempts: int) -> None:
            summary.failures.append((job[0], error))
            if record is not None:
                record.record(job[0], job[1], "failed", attempts, error=error)
            if progress is not None:
                progress(summary)

        work = functools.partial(process_shard, fn, per, storage=storage)  # work(src, dst)
        run_jobs(
            jobs,
            work,
            done,
            failed,
            engine=engine,
            workers=workers,
            scheduler=scheduler,
            retries=retries,
            memory_limit=memory_limit,
        )
    finally:
        if record is not None:
            record.close()
    return summary


def _error_text(exn: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exn), exn)).strip()


def _limit_memory(nbytes: int) -> None:
    """In a worker process: allocations beyond ``nbytes`` more than it holds now raise MemoryError (Linux)."""
    import resource

    with open("/proc/self/statm") as statm:
        now = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = now + nbytes if hard == resource.RLIM_INFINITY else min(hard, now + nbytes)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def run_jobs(
    jobs: Iterable[tuple],
    work: Callable,
    done: Callable[[tuple, Any, int], None],
    failed: Callable[[tuple, str, int], None],
    *,
    engine: str = "process",
    workers: int | None = None,
    scheduler: str | None = None,
    retries: int = 0,
    memory_limit: int | None = None,
) -> None:
    """Call ``work(*job)`` for every job on ``engine``; ``done(job, result, attempts)`` or
    ``failed(job, error text, attempts)`` as each ends.

    The callbacks run in this process (the driver), in the order jobs end.  A
    job that raises (or whose worker dies) is tried again up to ``retries``
    times.  ``memory_limit`` (bytes) bounds what a worker process may allocate
    for its jobs: a process-pool job going beyond raises MemoryError (Linux:
    the address-space limit), a Dask ``LocalCluster`` worker going beyond is
    restarted and its job fails; a cluster given by ``scheduler`` has its own
    workers' limits.
    """
    if engine not in ("process", "dask", "serial"):
        raise SpecError(f"engine must be 'process', 'dask' or 'serial', got {engine!r}")
    if retries < 0:
        raise SpecError(f"retries must be >= 0, got {retries}")
    run = {"process": _run_pool, "dask": _run_dask, "serial": _run_serial}[engine]
    run(list(jobs), work, _Ends(done, failed, retries), workers, scheduler, memory_limit)


class _Ends:
    """What to do when a job ends: hand its result on, or count the failure and say whether to try again."""

    def __init__(self, done: Callable[..., None], failed: Callable[..., None], retries: int) -> None:
        self.on_done, self.on_failed, self.retries = done, failed, retries
        self.attempts: collections.Counter[tuple] = collections.Counter()

    def done(self, job: tuple, result: Any) -> None:
        self.on_done(job, result, self.attempts.pop(job, 0) + 1)

    def again(self, job: tuple, exn: BaseException, died: bool = False) -> bool:
        """Whether ``job`` (which raised ``exn``) gets another try; if not, it is reported failed."""
        self.attempts[job] += 1
        if self.attempts[job] <= self.retries:
            return True
        self.on_failed(job, "a worker process died" if died else _error_text(exn), self.attempts.pop(job))
        return False


def _run_serial(jobs: list, work: Callable, ends: _Ends, workers: Any, scheduler: Any, memory_limit: Any) -> None:
    for job in jobs:
        while True:
            try:
                result = work(*job)
            except Exception as exn:  # noqa: BLE001 - retried, then reported
                if ends.again(job, exn):
                    continue
                break
            ends.done(job, result)
            break


def _run_pool(jobs: list, work: Callable, ends: _Ends, workers: Any, scheduler: Any, memory_limit: Any) -> None:
    pending = list(jobs)
    context = multiprocessing.get_context("spawn")
    initializer = functools.partial(_limit_memory, memory_limit) if memory_limit else None
    while pending:
        n = workers or os.cpu_count() or 1
        with ProcessPoolExecutor(n, mp_context=context, initializer=initializer) as pool:
            futures = {pool.submit(work, *job): job for job in pending}
            pending = []
            for future in as_completed(futures):
                job = futures[future]
                try:
                    result = future.result()
                except Exception as exn:  # noqa: BLE001 - retried, then reported
                    if ends.again(job, exn, died=isinstance(exn, BrokenProcessPool)):
                        pending.append(job)  # in a new pool: a broken one takes no more work
                    continue
                ends.done(job, result)


@contextlib.contextmanager
def dask_client(
    workers: int | None = None, scheduler: str | None = None, memory_limit: int | None = None
) -> Iterator[Any]:
    """A ``dask.distributed`` client of the cluster at ``scheduler``, else of a ``LocalCluster`` made (and closed) here.

    The local cluster has ``workers`` single-threaded worker processes (one per CPU by default).
    """
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise SpecError(f"engine='dask' needs dask.distributed: {install_hint('dask[distributed]', 'dask')}") from None
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        import dask

        n = workers or os.cpu_count() or 1
        limit = memory_limit if memory_limit else "auto"
        # the workers' statistical profiler samples the running task every 10 ms: a third of the rate of
        # short Python tasks (indexing 100,000 small shards: 5,600 shards/s with it, 8,000 without); and
        # every task goes to a worker at once instead of one when the last ends (no round trip between tasks)
        settings = {"distributed.worker.profile.enabled": False, "distributed.scheduler.worker-saturation": "inf"}
        with dask.config.set(settings):
            cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=limit
            )
        client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _run_dask(jobs: list, work: Callable, ends: _Ends, workers: Any, scheduler: Any, memory_limit: Any) -> None:
    from dask.distributed import as_completed as dask_completed

    with dask_client(workers, scheduler, memory_limit) as client:
        owner: dict[Any, tuple] = {}
        submitted = []
        for job in jobs:
            future = client.submit(work, *job, pure=False)
            owner[future.key] = job
            submitted.append(future)
        queue = dask_completed(submitted)
        del submitted  # the queue holds them; each is released when it has ended
        for future in queue:
            job = owner.pop(future.key)
            try:
                result = future.result()
            except Exception as exn:  # noqa: BLE001 - retried, then reported (KilledWorker included)
                if ends.again(job, exn):
                    again = client.submit(work, *job, pure=False)
                    owner[again.key] = job
                    queue.add(again)
                continue
            finally:
                future.release()
            ends.done(job, result)
