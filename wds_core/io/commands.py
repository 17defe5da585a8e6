"""``pipe:COMMAND``: a shell command whose standard output is read as a shard, or whose standard input is written.

The one implementation of ``pipe:`` URLs (reading shards, writing them, ``gopen``).  A command that exits with a
status other than 0 is a :class:`~wds_core.errors.PipeError` naming the command, its status and the tail of its
standard error, never a silently short shard; a reader or writer that stops early ends the command quietly.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any, BinaryIO

from ..errors import PipeError, redact_url
from .files import temporary_file
from .provenance import CommandURL, DataURL, check_command, from_data
from .shardsink import ShardSink
from .streams import ReadStream

__all__ = ["Command", "PipeSink", "PipeStream", "pipe_failure", "refuse_command", "start_process"]

_STDERR_TAIL = 2000


def refuse_command(url: str, where: str, allow_pipe: bool = False) -> DataURL:
    """``url``, read from data at ``where`` (a spec file, a descriptor...), as a :class:`~.provenance.DataURL` that
    keeps where it came from: a ``pipe:`` command its reader was not allowed to run (``allow_pipe``) is a
    :class:`~wds_core.errors.SpecError` at once, and, whatever happens to the URL after, again where a process would
    start (:class:`Command`).  Called on every URL a reader of data makes, once it is whole (joined to the data's
    base or prefix: a base of ``pipe:cat /`` makes a command of any relative name)."""
    return from_data(url, where, allow_pipe)


def pipe_failure(command: str, status: int, stderr: BinaryIO) -> PipeError:
    """The error for a ``pipe:`` command that exited with ``status``, quoting the end of its ``stderr`` file."""
    stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, stderr.tell() - _STDERR_TAIL))
    tail = stderr.read().decode("utf-8", "replace").strip()
    detail = f"; its stderr ends with: {tail}" if tail else ""
    return PipeError(f"command exited with status {status}{detail}", url=_shown(command))


def _shown(command: str) -> str:
    """The ``pipe:`` URL of ``command`` as messages show it (a rewrite's arguments after its script)."""
    return "pipe:" + (command.shown() if isinstance(command, CommandURL) else command)


def start_process(*args: Any, reading: bool = True, **kw: Any) -> Any:
    """A process of the caller's arguments (:class:`subprocess.Popen`), its standard output a pipe to read
    (``reading``) or its standard input one to write: webdataset's ``Pipe``, whose arguments are its caller's code.
    The only other place a process starts is :class:`Command`."""
    popen: Any = subprocess.Popen  # the caller's arguments, whatever they are
    pipe = subprocess.PIPE
    return popen(*args, stdout=pipe if reading else None, stdin=None if reading else pipe, **kw)


class Command:
    """A shell command started with its standard output (``writing=False``) or input (``writing=True``) as a pipe
    (``stream``) and its standard error kept in a temporary file for the message.

    The one place a ``pipe:`` URL becomes a process: a command whose text came from data
    (:class:`~.provenance.DataURL`) is refused here unless its reader allowed commands
    (:func:`~.provenance.check_command`), whatever was done to the URL on the way; a rewrite's command
    (:class:`~.provenance.CommandURL`) runs its script with the parts of the URL as the shell's positional
    arguments, never as shell text."""

    def __init__(self, command: str, writing: bool = False) -> None:
        self.command, self.url = command, _shown(command)
        check_command(command, self.url)
        args = command.args if isinstance(command, CommandURL) else ()
        self.stderr = temporary_file()
        pipe, other = subprocess.PIPE, subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [str(command), "sh", *args], shell=True, stdin=pipe if writing else other,
                stdout=None if writing else pipe, stderr=self.stderr,
            )  # fmt: skip
        except OSError as exn:
            self.stderr.close()
            raise PipeError(f"cannot start command: {exn}", url=self.url) from None
        stream = self.proc.stdin if writing else self.proc.stdout
        assert stream is not None
        self.stream: Any = stream
        self.finished = False

    def finish(self) -> None:
        """Close the pipe, wait for the command and raise :class:`PipeError` if it failed (once)."""
        if self.finished:
            return
        self.finished = True
        try:
            try:
                self.stream.close()
            except BrokenPipeError:
                pass
            status = self.proc.wait()
            if status != 0:
                raise pipe_failure(self.command, status, self.stderr)
        finally:
            self.stderr.close()

    def stop(self) -> None:
        """End the command early, quietly (the consumer stopped, or the shard is abandoned)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.finish()
        except PipeError:
            pass


class PipeStream(ReadStream):
    """The standard output of a shell command, read as a shard.

    Reading to the end checks the exit status: a failing command raises :class:`PipeError` with its status and the
    tail of its standard error.  Closing before the end (the consumer stopped early) ends the command quietly.
    """

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command
        self._run = Command(command)

    def read(self, size: int = -1) -> bytes:
        if self._run.finished:  # the end was reached (and the status checked)
            return b""
        data = self._run.stream.read(size)
        if size < 0 or len(data) < size:
            self._run.finish()
        return data

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._run.stop()
        finally:
            super().close()

    def __repr__(self) -> str:
        return f"PipeStream({redact_url(_shown(self.command))!r})"


class PipeSink(ShardSink):
    """A shard written to a shell command's standard input; ``commit`` checks its exit status."""

    def __init__(self, command: str) -> None:
        self._run = Command(command, writing=True)
        self.url = self._run.url

    def write(self, data: Any) -> None:
        try:
            self._run.stream.write(data)
        except BrokenPipeError:
            self._run.finish()
            raise PipeError("the command stopped reading its input", url=self.url) from None

    def commit(self) -> None:
        self._run.finish()

    def abort(self) -> None:
        self._run.stop()
