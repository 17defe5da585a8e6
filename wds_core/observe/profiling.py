"""Where a pipeline's time goes: each stage's own time, waiting against computing, items and bytes.

:class:`Profile` is a sampling profiler made for pipelines.  It looks at the stack of the thread that iterates
(every ``interval`` seconds on average, 5 ms by default, four times as long after two seconds) and gives the time
since its last look to the innermost stage whose generator is on that stack: a stage's own time, not its
upstream's, since the upstream's frames sit inside it.  Time when no stage is on the stack is the consumer's
(the training loop's own work: ``outside_seconds``).  The stage times and the consumer's add up to the wall time
by construction.
It also reads the iterating thread's CPU clock at each look: the part of an interval that thread did not
spend on a CPU is *waiting* (for storage, a pipe, a lock), the rest computing.

While a profile is on, each stage (:class:`~wds_core.state.StageIterator`) counts the items it hands
downstream, in C (no Python call per item), and answers :meth:`~wds_core.state.StageIterator.report`; the
tar reader adds the bytes it read.  Measured in benchmarks/README.md: the cost at 100k samples/s.

    with wds.Profile(dataset) as profile:
        for sample in dataset:
            ...
    print(profile.table())
    profile.report()  # {"wall_seconds": ..., "samples": ..., "stages": [{"name": ..., "seconds": ...}, ...]}

A stage whose iterator is not a generator (a user stage returning ``map(f, src)``, say) has no frame of its
own: its time goes to the stage that pulls from it.  The profile covers the pipeline run in the profiled
thread (DataLoader or ``Loader`` workers report their own: :mod:`wds_core.loader.main`).
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ..io.forklocks import fork_safe_event
from ..io.remote.retries import retry_stats
from ..state import StageIterator, count_items

__all__ = ["Profile"]

OUTSIDE = "(outside the pipeline)"
WINDOW = 0.0005  # seconds before each look over which the thread's CPU time says whether it waits
SETTLE = 2.0  # seconds of looks every ``interval``; then every four intervals


class Profile:
    """Samples the stack of the thread iterating ``pipeline`` (a :class:`~wds_core.pipeline.datapipeline.DataPipeline`).

    Looks come every ``interval`` on average (at random moments) for the first two seconds, then every four
    intervals: a profile left on for a long run costs less, and has looks enough.

    ``thread`` is that thread (default: the one that starts the profile).  Start it before iterating (the
    items are counted from the start of a run) and stop it after; ``with Profile(dataset):`` does both.
    ``on_report(report)`` is called every ``every`` seconds while it runs (from the sampling, so keep it short:
    :mod:`wds_core.observe.metrics` writes a JSON line).

    In the main thread, with no other handler for ``SIGALRM``, a wall-clock timer (``setitimer``) interrupts
    the thread itself: the handler sees the frame it interrupted (at the next bytecode, or just after a call
    into C that holds on to the thread), so a stage is seen where it runs.  Elsewhere a thread of the
    profile's own takes the samples; it can look only when the profiled thread lets go of the GIL, which
    favours stages that do (decoders, reads) over short stretches of pure Python: the report says which
    (``"sampler"``).  Interrupted system calls are restarted by Python (PEP 475).  The timer repeats every
    ``interval`` until the handler runs: a signal that lands between two system calls of one long call into C
    (a buffered read gathering a pipe's trickle) is only noted, and the next one interrupts the call.
    """

    def __init__(
        self,
        pipeline: Any,
        *,
        interval: float = 0.005,
        thread: threading.Thread | None = None,
        on_report: Callable[[dict[str, Any]], Any] | None = None,
        every: float = 10.0,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self.on_report = on_report  # called with report() every ``every`` seconds while running
        self.every = every
        self._reported = 0.0
        self.pipeline = pipeline
        self.interval = interval
        self.thread = thread
        self.seconds: dict[str, float] = {}
        self.waiting: dict[str, float] = {}
        self.reports: dict[str, dict[str, Any]] = {}
        self.wall_seconds = 0.0
        self.ticks = 0
        self.sampler = ""  # "signal" or "thread", once started
        self._stop = fork_safe_event()
        self._thread: threading.Thread | None = None
        self._previous_handler: Any = None
        self._started = 0.0
        self._last = 0.0
        self._clock: int | None = None
        self._phase = 0
        self._due = 0.0
        self._window: tuple[float, float | None] = (0.0, None)
        self._rng = random.Random(0)
        self._counting: Any = None
        self._running = False

    # ------------------------------------------------------------ on and off

    def start(self) -> Profile:
        if self._running:
            raise RuntimeError("this profile is running already")
        target = self.thread or threading.current_thread()
        if target.ident is None:
            raise ValueError("the thread to profile has not started")
        self._counting = count_items()
        self._counting.__enter__()
        self._remote_before = retry_stats()
        self._running = True
        self._started = self._last = self._reported = time.perf_counter()
        if target is threading.main_thread() and threading.current_thread() is target and _alarm_is_free():
            self.sampler = "signal"
            self._clock = None
            self._phase = 0
            self._due = self._started + self.interval
            self._previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            self._arm(self.interval - WINDOW)
        else:
            self.sampler = "thread"
            self._clock = _cpu_clock(target.ident)
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample, args=(target.ident,), name="wds-profile", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> Profile:
        if not self._running:
            return self
        if self.sampler == "signal":
            # the handler may run between any two lines here (a signal already delivered): once _running is off
            # it no longer arms the timer, so the timer is off for good before the previous handler (often the
            # default, which ends the process) is back
            self._running = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous_handler)
        elif self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._running = False
        self._take_reports()
        self.wall_seconds += time.perf_counter() - self._started
        self._counting.__exit__(None, None, None)
        return self

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------ sampling

    def _stages(self) -> list[tuple[str, Any]]:
        return self.pipeline.running_stages()  # type: ignore[no-any-return]

    def _take_reports(self, stages: list[tuple[str, Any]] | None = None) -> None:
        for name, stage in self._stages() if stages is None else stages:
            if isinstance(stage, StageIterator):
                self.reports[name] = stage.report()

    def _on_alarm(self, signum: int, frame: Any) -> None:
        if not self._running:  # stopping: see stop
            return
        now, cpu = time.perf_counter(), time.thread_time()
        if self._phase == 0:  # the window before a look opens: its CPU share says whether the thread waits
            self._window = (now, cpu)
            self._phase = 1
            self._arm(self._due - now)
            return
        self._phase = 0
        self._tick(frame, now, _busy(self._window, now, cpu))
        # looks at random times, each planned from the last planned one and not from when the handler ran (a
        # call into C delays it): a fixed or handler-relative period would fall into step with a steady pipeline
        self._due = max(self._due, now) + self._rng.uniform(0.5, 1.5) * self._spacing(now)
        self._arm(self._due - WINDOW - time.perf_counter())

    def _arm(self, delay: float) -> None:
        """The next signal in ``delay`` seconds, then every ``interval`` until the handler runs and arms it again."""
        signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6), self.interval)

    def _sample(self, ident: int) -> None:
        while not self._stop.wait(
            max(self._rng.uniform(0.5, 1.5) * self._spacing(time.perf_counter()) - WINDOW, WINDOW)
        ):
            opened = (time.perf_counter(), _cpu_seconds(self._clock))
            if self._stop.wait(WINDOW):
                return
            frame = sys._current_frames().get(ident)
            if frame is None:  # the profiled thread ended
                return
            now = time.perf_counter()
            self._tick(frame, now, _busy(opened, now, _cpu_seconds(self._clock)))
            del frame

    def _spacing(self, now: float) -> float:
        """The mean time between looks: ``interval`` for the first ``SETTLE`` seconds of a profile (a short run
        gets enough looks), four times as long after (a profile left on costs a quarter as much)."""
        return self.interval if now - self._started < SETTLE else 4 * self.interval

    def _tick(self, frame: Any, now: float, busy: float) -> None:
        """The time since the last look goes to the innermost stage on the stack ending at ``frame``, ``busy``
        of it (the share of the window before the look the thread spent on a CPU) computing, the rest waiting."""
        stages = self._stages()
        frames = {}
        for name, stage in stages:  # a built-in stage says where it runs; a user's generator is its frame
            found = stage.running_frame() if isinstance(stage, StageIterator) else getattr(stage, "gi_frame", None)
            if found is not None:
                frames[id(found)] = name
        where = OUTSIDE
        while frame is not None:
            seen = frames.get(id(frame))
            if seen is not None:
                where = seen
                break
            frame = frame.f_back
        wall = now - self._last
        self._last = now
        self.seconds[where] = self.seconds.get(where, 0.0) + wall
        self.waiting[where] = self.waiting.get(where, 0.0) + wall * (1.0 - busy)
        self.ticks += 1
        emit = self.on_report is not None and now - self._reported >= self.every
        if emit or (stages and self.ticks % 20 == 0):
            self._take_reports(stages)  # the counts so far, should the run end before the profile stops
        if emit:
            self._reported = now
            self.on_report(self.report())  # type: ignore[misc]

    # ------------------------------------------------------------ results

    def report(self) -> dict[str, Any]:
        """``{"wall_seconds", "samples", "outside_seconds", "stages": [{"name", "seconds", "waiting_seconds",
        "items", "items_per_second", "bytes"}, ...], "bound", "ticks", "sampled_seconds", "sampler"}``, stages
        from the source to the output; ``samples`` is what the last stage handed out, ``bound`` the stage with
        the most time of its own (``None`` before a sample was taken).  The looks cover ``sampled_seconds`` of
        the wall time (up to the last one); the stages' seconds and ``outside_seconds`` are scaled from them to
        the whole wall time."""
        wall = self.wall_seconds + (time.perf_counter() - self._started if self._running else 0.0)
        sampled = sum(self.seconds.values())
        scale = wall / sampled if sampled > 0 else 0.0  # the time after the last look goes where the others went
        names = [name for name, _ in self._stages()] or list(self.reports)
        stages: list[dict[str, Any]] = []
        for name in names:
            counted = self.reports.get(name, {})
            seconds = self.seconds.get(name, 0.0) * scale
            items = counted.get("items")
            stage: dict[str, Any] = {
                "name": name,
                "seconds": seconds,
                "waiting_seconds": self.waiting.get(name, 0.0) * scale,
                "items": items,
                "items_per_second": items / seconds if items and seconds > 0 else None,
            }
            if "bytes" in counted:
                stage["bytes"] = counted["bytes"]
            stages.append(stage)
        samples = stages[-1]["items"] if stages else None
        bound = max(stages, key=lambda s: s["seconds"])["name"] if stages and sampled > 0 else None
        split = self._device_split()
        before = getattr(self, "_remote_before", None) or {}
        remote = {key: round(value - before.get(key, 0), 3) for key, value in retry_stats().items()}
        return {
            **({"device_split": split} if split is not None else {}),
            "remote": remote,
            "wall_seconds": wall,
            "samples": samples,
            "outside_seconds": self.seconds.get(OUTSIDE, 0.0) * scale,
            "outside_waiting": self.waiting.get(OUTSIDE, 0.0) * scale,
            "stages": stages,
            "bound": bound,
            "ticks": self.ticks,
            "sampled_seconds": sampled,
            "sampler": self.sampler,
        }

    def _device_split(self) -> dict[str, Any] | None:
        """The share of each batch the workers cut on the host, where a stage plans crops for a device
        (``crop_images(..., device=...)``: its share's report, :class:`~wds_core.stages.devicecrop.HostShare`)."""
        for recipe in getattr(self.pipeline, "pipeline", ()):
            share = getattr(recipe, "host_share", None)
            if share is not None:
                return share.report()  # type: ignore[no-any-return]
        return None

    def table(self) -> str:
        """The report as a text table: stage, share of the wall time, waiting share, items, items/s."""
        report = self.report()
        wall = report["wall_seconds"] or 1e-9
        rows = [("stage", "share", "waiting", "items", "items/s")]
        outside = {"name": OUTSIDE, "seconds": report["outside_seconds"], "waiting_seconds": report["outside_waiting"]}
        for stage in report["stages"] + [outside]:
            seconds = stage["seconds"]
            waiting = stage.get("waiting_seconds")
            rate = stage.get("items_per_second")
            rows.append((
                stage["name"],
                f"{100 * seconds / wall:.1f}%",
                f"{100 * waiting / seconds:.0f}%" if waiting is not None and seconds > 0 else "",
                f"{stage['items']:,}" if stage.get("items") is not None else "",
                f"{rate:,.0f}" if rate else "",
            ))  # fmt: skip
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row))
                 for row in rows]  # fmt: skip
        samples = report["samples"]
        rate = f", {samples / wall:,.0f} samples/s" if samples else ""
        lines.append(f"{wall:.2f} s{rate}; bound by: {report['bound'] or 'nothing sampled'}")
        split = report.get("device_split")
        if split is not None:
            lines.append(_split_line(split))
        remote = report.get("remote") or {}
        if any(remote.get(key) for key in ("retries", "gave_up", "hedged", "throttled")):
            lines.append(
                f"remote: {remote.get('throttled', 0):g} answers throttled by the store (requests waited "
                f"{remote.get('throttled_s', 0):.1f} s for its rate limit), {remote.get('retries', 0):g} retries, "
                f"{remote.get('hedged', 0):g} ranges hedged, {remote.get('gave_up', 0):g} given up"
            )
        return "\n".join(lines)


def _split_line(split: dict[str, Any]) -> str:
    """A device split's report in words: the share the workers cut on the host, and how it was set."""
    share = split["share"]
    said = f"device split: the workers cut {100 * share:.0f}% of each batch on the host, the device the rest"
    if split.get("mode") != "auto":
        return f"{said} (fixed)"
    tried = ", ".join(f"{100 * at:.0f}% at {rate:,.1f} batches/s" for at, rate in split.get("choices", [])[-4:])
    return f"{said} (auto{'; last measured: ' + tried if tried else ''})"


def _busy(opened: tuple[float, float | None], now: float, cpu: float | None) -> float:
    """The share of the window from ``opened`` (wall, CPU seconds) to ``now`` the thread spent on a CPU (1 when
    its CPU time cannot be read)."""
    wall = now - opened[0]
    if cpu is None or opened[1] is None or wall <= 0:
        return 1.0
    return min(max((cpu - opened[1]) / wall, 0.0), 1.0)


def _alarm_is_free() -> bool:
    """Whether SIGALRM has no handler of someone else's (and this platform has it)."""
    if not hasattr(signal, "setitimer") or not hasattr(signal, "SIGALRM"):
        return False
    return signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)


def _cpu_clock(ident: int) -> int | None:
    """The CPU-time clock of the thread ``ident`` (POSIX), or None where there is none."""
    getter = getattr(time, "pthread_getcpuclockid", None)
    if getter is None:
        return None
    try:
        return int(getter(ident))
    except (OSError, OverflowError):
        return None


def _cpu_seconds(clock: int | None) -> float | None:
    if clock is None:
        return None
    try:
        return time.clock_gettime(clock)
    except OSError:
        return None
