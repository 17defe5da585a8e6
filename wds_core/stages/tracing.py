"""Stages that report what passes through them, and change nothing.

* :class:`Info` (webdataset's ``info``): prints the first ``n`` samples (and
  every ``every``-th after) to a stream, a line per field or one formatted line;
* :class:`LogKeys` (``log_keys``): appends ``index, worker, rank, key`` for
  every sample to a file, one line per write, so that several workers can log
  to the same file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from ..dist import node_info, worker_info
from ..io import files
from ..state import Recipe, RunContext, StageIterator

__all__ = ["Info", "LogKeys"]


class _Counting(StageIterator):
    """A pass-through iterator that counts what it passed (its state), calling ``see(index, item)``."""

    passes_order = True

    def __init__(self, src: Any, see: Any) -> None:
        super().__init__(src)
        self.see, self.count = see, 0

    def _run(self) -> Iterator[Any]:
        for item in self.src:
            self.see(self.count, item)
            self.count += 1
            yield item

    def _own_state(self) -> dict[str, Any]:
        return {"count": self.count}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])


class Info(Recipe):
    """Print samples as they pass: the first ``n``, then every ``every``-th (``every <= 0``: no more)."""

    def __init__(
        self,
        fmt: str | None = None,
        n: int = 3,
        every: int = -1,
        width: int = 50,
        stream: TextIO | None = None,
        name: str = "",
    ) -> None:
        self.fmt, self.n, self.every, self.width, self.stream, self.name = fmt, n, every, width, stream, name

    def build(self, src: Any, ctx: RunContext) -> _Counting:
        return _Counting(src, self._show)

    def _show(self, index: int, sample: Any) -> None:
        if not (index < self.n or (self.every > 0 and (index + 1) % self.every == 0)):
            return
        stream = self.stream if self.stream is not None else sys.stderr
        if self.fmt is not None:
            print(self.fmt.format(**sample), file=stream)
            return
        print("---", self.name, file=stream)
        fields = sample.items() if isinstance(sample, dict) else enumerate(sample)
        for key, value in fields:
            print(key, repr(value)[: self.width], file=stream)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.stream in (sys.stderr, sys.stdout):  # standard streams do not pickle; workers use their own
            state["stream"] = None if self.stream is sys.stderr else "stdout"
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state.get("stream") == "stdout":
            state["stream"] = sys.stdout
        self.__dict__.update(state)


class LogKeys(Recipe):
    """Append ``index<TAB>worker<TAB>rank<TAB>key`` for every sample to ``logfile`` (nothing when it is empty)."""

    def __init__(self, logfile: str | os.PathLike | None = None) -> None:
        self.logfile = None if logfile in (None, "") else os.fspath(logfile)  # type: ignore[arg-type]

    def build(self, src: Any, ctx: RunContext) -> _Counting:
        if self.logfile is None:
            return _Counting(src, lambda index, sample: None)
        worker, rank = worker_info()[0], node_info()[0]

        def log(index: int, sample: Any) -> None:
            key = sample.get("__key__") if isinstance(sample, dict) else None
            line = f"{index}\t{worker}\t{rank}\t{key}\n".encode()
            files.append(self.logfile, line)  # one appending write per line: lines of several workers never mix

        return _Counting(src, log)
