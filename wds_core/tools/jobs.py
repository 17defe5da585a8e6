"""Running jobs on an engine (:func:`run_jobs`): a local process pool (a pool broken by a dying worker is replaced
and its unfinished jobs retried), ``dask.distributed`` (a ``LocalCluster`` or the cluster at ``scheduler``), or this
process; each job retried up to ``retries`` times, a worker's memory bounded.  :func:`~.parallel.map_shards` and
``wds index create`` run on it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import multiprocessing
import os
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import SpecError, install_hint
from ..loader.mainguard import refuse_unguarded

__all__ = ["dask_client", "run_jobs"]


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
    refuse_unguarded("the job's worker processes", "spawn")
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
        # the workers' statistical profiler, sampling the running task, takes a third of the rate of
        # short Python tasks; and
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
