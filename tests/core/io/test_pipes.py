"""wds_core.io.pipes: ``pipe:`` commands as shards read and written, their failures named, early ends quiet."""

import sys

import pytest

from wds_core.errors import PipeError
from wds_core.io.pipes import Command, PipeSink, PipeStream

PY = sys.executable


def test_a_command_s_output_is_read_whole_and_its_status_checked():
    stream = PipeStream(f"{PY} -c \"import sys; sys.stdout.buffer.write(b'x' * 300000)\"")
    parts = []
    while part := stream.read(65536):
        parts.append(part)
    assert b"".join(parts) == b"x" * 300000 and stream.read(10) == b""
    stream.close()


def test_a_failing_command_names_its_status_and_the_end_of_its_stderr():
    script = "import sys; print('part', flush=True); sys.stderr.write('e' * 5000 + 'THE END'); sys.exit(3)"
    stream = PipeStream(f'{PY} -c "{script}"')
    with pytest.raises(PipeError, match="status 3") as caught:
        while stream.read(1024):
            pass
    text = str(caught.value)
    assert "THE END" in text and len(text) < 2600  # the tail of stderr, not all of it
    assert caught.value.url.startswith("pipe:")
    stream.close()


def test_closing_before_the_end_stops_the_command_quietly():
    stream = PipeStream(f"{PY} -c \"import sys, time\nwhile True: sys.stdout.buffer.write(b'y' * 65536)\"")
    assert stream.read(10) == b"y" * 10
    stream.close()  # no error: the consumer stopped
    assert stream._run.proc.poll() is not None  # the command has ended
    stream.close()  # twice is fine


def test_a_command_that_cannot_start_is_a_pipe_error(monkeypatch):
    import subprocess

    def refuse(*args, **kwargs):
        raise OSError("no shell here")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    with pytest.raises(PipeError, match="cannot start command: no shell here"):
        Command("cat")


def test_a_shard_written_to_a_command(tmp_path):
    out = tmp_path / "written.tar"
    sink = PipeSink(f"cat > {out}")
    sink.write(b"a" * 100000)
    sink.write(memoryview(b"b" * 10))
    sink.commit()
    assert out.read_bytes() == b"a" * 100000 + b"b" * 10


def test_a_writer_whose_command_fails_or_stops_reading_is_told():
    sink = PipeSink(f'{PY} -c "import sys; sys.exit(5)"')
    with pytest.raises(PipeError):
        for _ in range(2000):  # the command exits at once: a write breaks the pipe, or the commit sees status 5
            sink.write(b"z" * 65536)
        sink.commit()


def test_aborting_a_write_ends_the_command_quietly(tmp_path):
    sink = PipeSink(f"cat > {tmp_path / 'half.tar'}")
    sink.write(b"half")
    sink.abort()
    assert sink._run.finished
