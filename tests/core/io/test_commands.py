"""wds_core.io.commands: ``pipe:`` commands as shards read and written, their failures named, early ends quiet."""

import sys

import pytest

from wds_core.errors import PipeError
from wds_core.io.commands import Command, PipeSink, PipeStream

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


# Every way text from data reaches a pipe: command (issue 56): spec files, descriptors (their URLs, their base, the
# descriptors they name), the part of a URL a rewrite substitutes (registered, from the environment, from the config
# file), checkpoint states, a watched folder's file names.  Each is refused or quoted: the marker is never made.


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    import wds_core
    from tests.conftest import make_samples, write_shard

    monkeypatch.delenv("WDS_SECURE", raising=False)
    data = tmp_path / "data"
    data.mkdir()
    write_shard(data / "a.tar", make_samples("a", 2))
    marker = tmp_path / "ran"
    return wds_core, data, marker, f"touch {marker}"


def _keys(wds_core, source, **kw):
    return [s["__key__"] for s in wds_core.WebDataset(source, **kw)]


def _spec(path, body):
    import json

    path.write_text(json.dumps(body))
    return str(path)


@pytest.mark.parametrize("field", ["shards", "prefix", "buckets"])
def test_a_spec_file_s_commands_are_refused(hostile, field):
    wds_core, data, marker, touch = hostile
    source = {"shards": f"pipe:{touch}; cat {data}/a.tar"} if field == "shards" else {"shards": "a.tar"}
    body = {"datasets": [source]}
    if field == "prefix":
        body["prefix"] = f"pipe:{touch}; cat {data}/"
    elif field == "buckets":
        source["buckets"] = f"pipe:{touch}; cat {data}"
    with pytest.raises(wds_core.SpecError, match="runs a command.*allow_pipe=True"):
        _keys(wds_core, _spec(data / "spec.json", body))
    assert not marker.exists()


@pytest.mark.parametrize("where", ["url", "base", "source_url"])
def test_a_descriptor_s_commands_are_refused(hostile, where):
    wds_core, data, marker, touch = hostile
    body = {"wids_version": 1, "shardlist": [{"url": "a.tar", "nsamples": 2}]}
    if where == "url":
        body["shardlist"] = [{"url": f"pipe:{touch}; cat {data}/a.tar", "nsamples": 2}]
    elif where == "base":
        body["base"] = f"pipe:{touch}; cat {data}/"
    else:
        body["datasets"] = [{"source_url": f"pipe:{touch}; echo {{}}"}]
    path = _spec(data / "d.json", body)
    from wds_core.dropin import wids

    for load in (wds_core.load_descriptor, wds_core.ShardListDataset, wids.ShardListDataset):
        with pytest.raises(wds_core.SpecError, match="runs a command"):
            load(path)
    assert not marker.exists()
    if where == "url":  # from code, on purpose
        assert wds_core.load_descriptor(path, allow_pipe=True)["shardlist"][0]["url"].startswith("pipe:touch")
        assert len(wds_core.ShardListDataset(path, allow_pipe=True)) == 2


@pytest.mark.parametrize("how", ["registered", "environment", "config"])
def test_the_part_of_a_url_a_rewrite_substitutes_into_a_command_is_quoted(hostile, monkeypatch, tmp_path, how):
    wds_core, data, marker, touch = hostile
    if how == "registered":
        wds_core.register_rewrite("gs://mirror/", f"pipe:cat {data}/")
    elif how == "environment":
        monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
        monkeypatch.setenv("WDS_REWRITE", rf"gs://mirror/(.*)=pipe:cat {data}/\1")
    else:
        monkeypatch.setenv("WDS_ALLOW_PIPE", "1")
        monkeypatch.setenv("WDS_CONFIG", _spec(tmp_path / "wds.json", {"rewrite": [
            {"prefix": "gs://mirror/", "replacement": f"pipe:cat {data}/"}]}))  # fmt: skip
    assert _keys(wds_core, "gs://mirror/a.tar") == ["a00000", "a00001"]
    with pytest.raises(wds_core.PipeError, match="status 1"):
        _keys(wds_core, f"gs://mirror/a.tar; {touch}; #")
    with pytest.raises(wds_core.PipeError):
        _keys(wds_core, f"gs://mirror/$({touch})")
    assert not marker.exists()


def test_a_state_naming_a_command_is_refused(hostile):
    wds_core, data, marker, touch = hostile
    ds = wds_core.WebDataset(str(data / "a.tar"))
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    state["chain"]["url"] = f"pipe:{touch}; cat {data}/a.tar"
    again = wds_core.WebDataset(str(data / "a.tar"))
    with pytest.raises(wds_core.CheckpointError):
        again.load_state_dict(state)
        list(again)
    assert not marker.exists()


def test_a_watched_folder_s_file_names_are_paths(hostile):
    wds_core, data, marker, touch = hostile
    (data / f"pipe:{touch.replace('/', '_')};.tar").write_bytes((data / "a.tar").read_bytes())
    (data / "a.tar").unlink()
    shards = wds_core.DirectoryShardList(str(data), poll=None, mode="keep")
    assert [s["__key__"] for s in wds_core.tarfile_to_samples()(iter(shards))] == ["a00000", "a00001"]
    assert not marker.exists()
