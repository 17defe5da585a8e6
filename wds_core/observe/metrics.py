"""Profiles out of every process: JSON lines, their sum over workers, and the Prometheus text format.

``WDS_PROFILE=FILE`` in the environment (worker processes inherit it) profiles every pipeline run in every
process that has it, DataLoader and ``Loader`` workers included, and appends its report to ``FILE`` as a JSON
line, every ``WDS_PROFILE_EVERY`` seconds (10 by default) and when the run ends::

    {"time": ..., "pid": ..., "rank": 0, "world_size": 1, "worker": 1, "num_workers": 2, "run": "4242-1",
     "final": true, "wall_seconds": ..., "samples": ..., "stages": [...], ...}

(:meth:`wds_core.observe.profiling.Profile.report`'s keys).  :func:`read_reports` reads such a file back,
:func:`combine` adds the last report of each run up (each stage's seconds, items and bytes over every worker
and rank), :func:`prometheus_text` writes reports in the Prometheus text format with ``rank``, ``worker`` and
``pid`` labels, and :func:`serve_metrics` serves that at ``http://127.0.0.1:PORT/metrics`` from a thread.

:func:`profile_run` is the run hook (it looks at the environment when a run starts); ``wds_core`` plugs it
into the pipeline (:func:`wds_core.state.plug_in`), which knows no feature by name.
"""

from __future__ import annotations

import http.server
import itertools
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ..dist import node_info, worker_info
from ..io import files
from .profiling import Profile

__all__ = ["combine", "profile_run", "prometheus_text", "read_reports", "serve_metrics", "write_report"]

_RUNS = itertools.count(1)


def write_report(path: str, report: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Append ``report`` to the file ``path`` as one JSON line, with this process's ``time``, ``pid``, ``rank``,
    ``world_size``, ``worker`` and ``num_workers`` (one ``write``: lines of processes sharing the file do not
    mix); returns the line's object."""
    rank, world_size = node_info()
    worker, num_workers = worker_info()
    line = {"time": time.time(), "pid": os.getpid(), "rank": rank, "world_size": world_size, "worker": worker,
            "num_workers": num_workers, **extra, **report}  # fmt: skip
    data = (json.dumps(line) + "\n").encode()
    files.append(path, data)
    return line


def read_reports(path: str) -> list[dict[str, Any]]:
    """The JSON lines of ``path`` (a line cut short by a process that died is left out)."""
    lines = []
    with files.open_file(path, encoding="utf-8", mode="r") as source:
        for text in source:
            try:
                lines.append(json.loads(text))
            except json.JSONDecodeError:
                continue
    return lines


def combine(reports: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The last report of each run added up: per stage (by name, in the order first seen) its ``seconds``,
    ``waiting_seconds``, ``items`` and ``bytes`` summed over the processes; ``wall_seconds`` the longest run;
    ``samples`` the sum of what each run's last stage handed out; ``processes`` how many runs."""
    last: dict[Any, dict[str, Any]] = {}
    for report in reports:
        last[report.get("run", report.get("pid"))] = report
    stages: dict[str, dict[str, Any]] = {}
    samples = 0
    for report in last.values():
        for stage in report.get("stages", []):
            total = stages.setdefault(stage["name"], {"name": stage["name"], "seconds": 0.0, "waiting_seconds": 0.0,
                                                      "items": 0, "bytes": 0})  # fmt: skip
            total["seconds"] += stage.get("seconds") or 0.0
            total["waiting_seconds"] += stage.get("waiting_seconds") or 0.0
            total["items"] += stage.get("items") or 0
            total["bytes"] += stage.get("bytes") or 0
        samples += report.get("samples") or 0
    wall = max((r.get("wall_seconds", 0.0) for r in last.values()), default=0.0)
    outside = sum(r.get("outside_seconds", 0.0) for r in last.values())
    return {"processes": len(last), "wall_seconds": wall, "samples": samples, "outside_seconds": outside,
            "stages": list(stages.values())}  # fmt: skip


_METRICS = (
    ("wds_stage_seconds_total", "seconds", "Time of a pipeline stage's own (not its upstream's)"),
    ("wds_stage_waiting_seconds_total", "waiting_seconds", "Part of a stage's time its thread was off the CPU"),
    ("wds_stage_items_total", "items", "Items a stage handed downstream"),
    ("wds_stage_bytes_total", "bytes", "Bytes a reading stage read"),
)


_REMOTE = (
    ("wds_remote_throttled_total", "throttled", "Answers that said the store's rate limit was passed"),
    ("wds_remote_throttled_seconds_total", "throttled_s", "Seconds requests waited for a store's rate limit"),
    ("wds_remote_retries_total", "retries", "Remote requests repeated after a transient failure"),
    ("wds_remote_hedged_total", "hedged", "Ranges asked for twice because the first request straggled"),
)


def prometheus_text(reports: Iterable[dict[str, Any]]) -> str:
    """Reports (as :func:`write_report` writes them, or a profile's own with no labels) in the Prometheus text
    exposition format: counters per stage, labelled with ``stage``, ``rank``, ``worker`` and ``pid``, and
    ``wds_wall_seconds_total``/``wds_samples_total`` per process."""
    reports = list(reports)
    out = []
    for metric, key, help_text in _METRICS:
        out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
        for report in reports:
            for stage in report.get("stages", []):
                if stage.get(key) is not None:
                    out.append(f"{metric}{{{_labels(report, stage['name'])}}} {float(stage[key]):.6g}")
    for metric, key, help_text in (("wds_wall_seconds_total", "wall_seconds", "Wall time profiled"),
                                   ("wds_samples_total", "samples", "Samples the pipeline handed out")):  # fmt: skip
        out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
        for report in reports:
            out.append(f"{metric}{{{_labels(report, None)}}} {float(report.get(key) or 0):.6g}")
    for metric, key, help_text in _REMOTE:
        out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter"]
        for report in reports:
            value = (report.get("remote") or {}).get(key) or 0
            out.append(f"{metric}{{{_labels(report, None)}}} {float(value):.6g}")
    return "\n".join(out) + "\n"


def _labels(report: dict[str, Any], stage: str | None) -> str:
    pairs = [("stage", stage)] if stage is not None else []
    pairs += [(name, report[name]) for name in ("rank", "worker", "pid") if name in report]
    return ",".join(f'{name}="{_quoted(str(value))}"' for name, value in pairs)


def _quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def serve_metrics(port: int, reports: Any, host: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
    """Serve ``prometheus_text(reports())`` at ``http://host:port/metrics`` from a daemon thread (``port`` 0:
    any free port, ``server.server_address`` says which); ``reports`` is called at each scrape (for instance
    ``lambda: [profile.report()]``, or the last lines of a ``WDS_PROFILE`` file).  ``server.shutdown()`` stops
    it."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the standard library's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = prometheus_text(reports()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="wds-metrics", daemon=True).start()
    return server


def profile_run(pipeline: Any, items: Iterator[Any]) -> Iterator[Any]:
    """The run hook: with ``WDS_PROFILE`` set, the run is profiled and its reports written there."""
    path = os.environ.get("WDS_PROFILE", "")
    if not path:
        return items
    return _profiled(pipeline, items, path, float(os.environ.get("WDS_PROFILE_EVERY", "10") or 10))


def _profiled(pipeline: Any, items: Iterator[Any], path: str, every: float) -> Iterator[Any]:
    run = f"{os.getpid()}-{next(_RUNS)}"
    profile = Profile(pipeline, on_report=lambda report: write_report(path, report, run=run, final=False),
                      every=every)  # fmt: skip
    profile.start()
    try:
        yield from items
    finally:
        profile.stop()
        write_report(path, profile.report(), run=run, final=True)
