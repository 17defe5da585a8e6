"""``pipe:`` URLs: one implementation for reading, writing and webdataset's gopen."""

import pytest

from wds_core.dropin.gopen import gopen_pipe
from wds_core.errors import PipeError
from wds_core.io.commands import PipeStream
from wds_core.io.storage import open_shard


def test_pipe_urls_are_one_implementation_for_reading_writing_and_gopen(tmp_path):
    target = tmp_path / "out.bin"
    with gopen_pipe(f"pipe:cat > {target}", "wb") as stream:
        stream.write(b"hello")
    assert target.read_bytes() == b"hello"
    stream = gopen_pipe(f"pipe:cat {target}")
    assert isinstance(stream, PipeStream) and stream.read() == b"hello"
    stream.close()
    with pytest.raises(PipeError, match="status 3.*oops"):
        with open_shard("pipe:echo oops >&2; exit 3") as stream:
            stream.read()
    with pytest.raises(PipeError, match="status 4"):
        with gopen_pipe("pipe:cat > /dev/null; exit 4", "wb") as stream:
            stream.write(b"x")
