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
* The job owns its output set: local shards of the ``%d`` pattern numbered past
  its inputs, or shards in the output folder that no input names (an earlier
  run's over more inputs), would stay beside the new ones and be read with
  them; they are refused before anything is done (naming them), and removed at
  the end with ``overwrite=True``.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError, redact, redact_url
from ..io import files
from ..io.storage import Storage, local_path, storage_argument
from ..io.urls import expand_urls
from ..writer import existing_shards
from .jobs import run_jobs

__all__ = ["JobLog", "ShardJobSummary", "map_shards", "output_names"]


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
        lines += [f"FAILED {redact_url(url)}: {redact(error)}" for url, error in self.failures]
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
    if (
        path is not None
    ):  # what an earlier attempt killed mid-write left behind (see wds_core.io.destinations.temporary_name)
        folder, name = os.path.split(os.path.abspath(path))
        for stale in files.glob(f".{files.escape(name)}.*.partial", folder):
            files.remove(stale)
    counts = [0, 0]

    def samples() -> Iterable[dict[str, Any]]:
        for sample in WebDataset([src], split=False, empty_check=False, storage=storage):
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

    with TarWriter(dst, storage=storage) as sink:
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
        if files.exists(self.path):
            with files.open_file(self.path, "r", encoding="utf-8") as handle:
                for line in handle:
                    cut = not line.endswith("\n")
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue  # the last line of a killed driver
                    if isinstance(entry, dict) and "input" in entry:
                        self.entries[entry["input"]] = entry
        self._out = files.open_file(self.path, "a", encoding="utf-8")
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
    storage: Storage | dict | None = None,
    progress: Callable[[ShardJobSummary], None] | None = None,
    log: str | os.PathLike | None = None,
    memory_limit: int | None = None,
    storage_options: Storage | dict | None = None,
) -> ShardJobSummary:
    """Apply ``fn`` to every shard of ``inputs`` and write ``outputs`` (see the module doc).

    ``log``: a local file, the job's record (:class:`JobLog`); ``memory_limit``: bytes a worker may
    allocate for a shard (see :func:`~.jobs.run_jobs`); ``progress(summary)`` is called as each shard ends.
    """
    if per not in ("sample", "shard"):
        raise SpecError(f"per must be 'sample' or 'shard', got {per!r}")
    urls = expand_urls(inputs) if isinstance(inputs, str) else [os.fspath(u) for u in inputs]
    names = output_names(urls, outputs)
    stale = stale_outputs(outputs, names)
    if stale and not overwrite:
        named = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        raise SpecError(
            f"{len(stale)} shard{'s' if len(stale) > 1 else ''} of the outputs {outputs!r} are there already that "
            f"this job does not write ({named}): an earlier run's, which would be read with the new ones; "
            "overwrite=True (wds transform --overwrite) redoes the outputs and removes them, or write elsewhere"
        )
    summary = ShardJobSummary(inputs=len(urls))
    storage = Storage.of(storage_argument("map_shards", storage, storage_options))
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
    for path in stale:
        files.remove(path)
        files.remove(path + ".idx")
    return summary


SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.bz2", ".tar.xz", ".tar.lz4")


def stale_outputs(outputs: Any, names: list[str]) -> list[str]:
    """The local shards of the output set that a job writing ``names`` does not write: a ``%d`` pattern's numbered
    past them, or a folder's shards (by suffix) no name is (a brace pattern or a list: none, as no set is named)."""
    if not isinstance(outputs, str) or local_path(outputs) is None:
        return []
    if outputs.endswith("/"):
        folder = local_path(outputs) or outputs
        try:
            entries = files.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
        mine = {os.path.basename(name) for name in names}
        return sorted(
            os.path.join(folder, entry) for entry in entries if entry.endswith(SHARD_SUFFIXES) and entry not in mine
        )
    if "%" in outputs:
        return [path for _, path in existing_shards(outputs, len(names))]
    return []
