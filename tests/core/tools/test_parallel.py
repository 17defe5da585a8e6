"""Scale-out processing: the process pool, Dask and serial engines write the same shards, and survive failures."""

import json
import os
import subprocess
import sys

import pytest

import wds_core as wds
from tests.conftest import counted_shards
from tests.core.tools import shard_functions as fns
from wds_core import SpecError
from wds_core.tools.parallel import map_shards, output_names


@pytest.fixture
def inputs(tmp_path):
    return counted_shards(tmp_path, [6] * 4, "in")[0]


def outputs(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def run(inputs, directory, fn=fns.shout, **kw):
    directory.mkdir(exist_ok=True)
    return map_shards(fn, inputs, str(directory / "out-%02d.tar"), workers=2, **kw)


@pytest.mark.slow
def test_engines_write_the_same_bytes(inputs, tmp_path):
    serial = run(inputs, tmp_path / "serial", engine="serial")
    assert serial.ok and serial.samples_in == serial.samples_out == 24 and len(serial.written) == 4
    run(inputs, tmp_path / "process", engine="process")
    dask = run(inputs, tmp_path / "dask", engine="dask")
    assert dask.ok
    expected = outputs(tmp_path / "serial")
    assert outputs(tmp_path / "process") == expected and outputs(tmp_path / "dask") == expected
    first = next(iter(wds.WebDataset(str(tmp_path / "dask" / "out-00.tar"))))
    assert first["txt"] == b"S0--0-TXT"


def test_sample_and_shard_functions(inputs, tmp_path):
    split = run(inputs, tmp_path / "split", fn=fns.split_in_two, engine="serial")
    assert split.samples_in == 24 and split.samples_out == 2 * 20
    halves = run(inputs, tmp_path / "halves", fn=fns.every_other, engine="serial", per="shard")
    assert halves.samples_out == 12


@pytest.mark.slow
def test_a_rerun_skips_complete_shards_and_finishes_a_failed_one(inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("WDS_TEST_MARKER", str(tmp_path / "ready"))
    first = run(inputs, tmp_path / "out", fn=fns.fails_on_shard_2, engine="process", retries=1)
    assert not first.ok and [url for url, _ in first.failures] == [inputs.replace("{0..3}", "2")]
    assert "ValueError: shard 2 is not ready" in first.failures[0][1] and "FAILED" in str(first)
    assert sorted(os.listdir(tmp_path / "out")) == ["out-00.tar", "out-01.tar", "out-03.tar"]  # nothing partial
    (tmp_path / "ready").touch()
    second = run(inputs, tmp_path / "out", fn=fns.fails_on_shard_2, engine="process")
    assert len(second.skipped) == 3 and second.written == [str(tmp_path / "out" / "out-02.tar")]
    run(inputs, tmp_path / "clean", engine="serial")
    assert outputs(tmp_path / "out") == outputs(tmp_path / "clean")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["process", "dask"])
def test_a_killed_worker_is_survived(inputs, tmp_path, monkeypatch, engine):
    monkeypatch.setenv("WDS_TEST_MARKER", str(tmp_path / "killed"))
    summary = run(inputs, tmp_path / "out", fn=fns.dies_once, engine=engine)
    assert (tmp_path / "killed").exists(), "the worker was killed"
    assert summary.ok and len(summary.written) == 4
    run(inputs, tmp_path / "clean", engine="serial")
    assert outputs(tmp_path / "out") == outputs(tmp_path / "clean")


def test_output_names():
    urls = ["s3://b/x/a.tar", "s3://b/x/b.tar"]
    assert output_names(urls, "out/") == ["out/a.tar", "out/b.tar"]
    assert output_names(urls, "o-%d.tar") == ["o-0.tar", "o-1.tar"]
    assert output_names(urls, "o-{7..8}.tar") == ["o-7.tar", "o-8.tar"]
    with pytest.raises(SpecError, match="2 inputs but 3"):
        output_names(urls, ["a", "b", "c"])
    with pytest.raises(SpecError, match="same output"):
        output_names(urls, ["a", "a"])
    with pytest.raises(SpecError, match="engine"):
        map_shards(fns.shout, urls, "o/", engine="spark")


@pytest.mark.slow
def test_transform_command_on_a_dask_cluster(inputs, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    args = ["wds", "transform", "tests.core.tools.shard_functions:shout", inputs, "-o", str(tmp_path / "t") + "/"]
    done = subprocess.run([*args, "--engine", "dask", "--workers", "2"], capture_output=True, env=env, check=True)
    assert b"4 inputs: 4 shards written" in done.stderr
    assert sorted(os.listdir(tmp_path / "t")) == [f"in-{s}.tar" for s in range(4)]
    again = subprocess.run(args, capture_output=True, env=env, check=True)
    assert b"0 shards written, 4 already complete" in again.stderr
    failing = [*args[:2], "tests.core.tools.shard_functions:fails_on_shard_2", *args[3:4], "-o"]
    failing.append(str(tmp_path / "f") + "/")
    env["WDS_TEST_MARKER"] = str(tmp_path / "never")
    result = subprocess.run([*failing, "--retries", "0", "--engine", "serial"], capture_output=True, env=env)
    assert result.returncode == 1 and b"FAILED" in result.stderr and b"shard 2 is not ready" in result.stderr


def test_the_job_log_records_each_shard_and_a_rerun_takes_it(inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("WDS_TEST_MARKER", str(tmp_path / "ready"))
    log = tmp_path / "job.jsonl"
    first = run(inputs, tmp_path / "out", fn=fns.fails_on_shard_2, engine="serial", retries=1, log=log)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    by_input = {line["input"]: line for line in lines}
    assert len(lines) == 4 and not first.ok
    failed = by_input[inputs.replace("{0..3}", "2")]
    assert failed["status"] == "failed" and failed["attempts"] == 2 and "shard 2 is not ready" in failed["error"]
    done = by_input[inputs.replace("{0..3}", "0")]
    assert done["status"] == "done" and done["samples_in"] == done["samples_out"] == 6 and done["attempts"] == 1
    assert done["output"] == str(tmp_path / "out" / "out-00.tar") and done["seconds"] >= 0
    with open(log, "a") as cut:
        cut.write('{"input": "cut short by a kill')  # a driver killed mid-line
    (tmp_path / "ready").touch()
    (tmp_path / "out" / "out-01.tar").unlink()  # the log, not the store, says what is done
    second = run(inputs, tmp_path / "out", fn=fns.fails_on_shard_2, engine="serial", log=log)
    assert second.ok and second.written == [str(tmp_path / "out" / "out-02.tar")] and len(second.skipped) == 3
    assert wds.tools.parallel.JobLog(log).failures() == {}
    assert not (tmp_path / "out" / "out-01.tar").exists()
    third = run(inputs, tmp_path / "out", engine="serial", log=log, overwrite=True)
    assert len(third.written) == 4


def test_a_memory_limit_fails_the_shard_that_exceeds_it(inputs, tmp_path):
    summary = run(
        inputs, tmp_path / "out", fn=fns.hungry_on_shard_1, engine="process", retries=0, memory_limit=500_000_000
    )
    assert [url for url, _ in summary.failures] == [inputs.replace("{0..3}", "1")]
    assert "MemoryError" in summary.failures[0][1] and len(summary.written) == 3


@pytest.mark.slow
def test_jobs_on_a_cluster_given_by_address(inputs, tmp_path):
    """The recipe of docs/guides/processing.md: a cluster started apart (here a LocalCluster), its address."""
    distributed = pytest.importorskip("dask.distributed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        args = ["wds", "transform", "tests.core.tools.shard_functions:shout", inputs, "-o", str(tmp_path / "t") + "/"]
        args += ["--engine", "dask", "--scheduler", address, "--log", str(tmp_path / "job.jsonl")]
        done = subprocess.run([*args, "--progress-every", "0"], capture_output=True, env=env, check=True)
        assert b"4 inputs: 4 shards written" in done.stderr and b"shards 4/4" in done.stderr
        assert len((tmp_path / "job.jsonl").read_text().splitlines()) == 4
        index = ["wds", "index", "create", str(tmp_path / "t" / "in-{0..3}.tar"), "-o", str(tmp_path / "d.json")]
        subprocess.run([*index, "--engine", "dask", "--scheduler", address], capture_output=True, env=env, check=True)
    subprocess.run([*index[:-1], str(tmp_path / "serial.json")], capture_output=True, env=env, check=True)
    described = json.loads((tmp_path / "d.json").read_text())
    assert described["shardlist"] == json.loads((tmp_path / "serial.json").read_text())["shardlist"]
    assert [entry["nsamples"] for entry in described["shardlist"]] == [6, 6, 6, 6]


def test_the_job_owns_its_output_set(inputs, tmp_path):
    """Issue 67: an earlier run over more inputs left out-04..05 beside the new outputs, read with them by a spec
    over the folder; they are refused, naming them and the option, and removed with overwrite=True."""
    more = counted_shards(tmp_path, [6] * 6, "more")[0]
    assert run(more, tmp_path / "out", engine="serial").ok
    with pytest.raises(SpecError, match=r"2 shards of the outputs .* \(.*out-04.tar, .*out-05.tar\): .*overwrite=True"):
        run(inputs, tmp_path / "out", engine="serial")
    assert sorted(os.listdir(tmp_path / "out")) == [f"out-{i:02d}.tar" for i in range(6)]  # nothing done
    (tmp_path / "out" / "out-05.tar.idx").write_bytes(b"")
    again = run(inputs, tmp_path / "out", engine="serial", overwrite=True)
    assert again.ok and len(again.written) == 4
    assert sorted(os.listdir(tmp_path / "out")) == [f"out-{i:02d}.tar" for i in range(4)]
    assert sum(1 for _ in wds.WebDataset(str(tmp_path / "out" / "out-{00..03}.tar"))) == 24


def test_a_folder_of_outputs_holds_only_this_jobs_shards(inputs, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "old-9.tar").write_bytes(b"")
    (tmp_path / "folder" / "notes.txt").write_bytes(b"kept")
    with pytest.raises(SpecError, match=r"1 shard of the outputs .*old-9.tar"):
        map_shards(fns.shout, inputs, str(tmp_path / "folder") + "/", engine="serial")
    done = map_shards(fns.shout, inputs, str(tmp_path / "folder") + "/", engine="serial", overwrite=True)
    assert done.ok and sorted(os.listdir(tmp_path / "folder")) == ["in-0.tar", "in-1.tar", "in-2.tar", "in-3.tar",
                                                                    "notes.txt"]  # fmt: skip
