"""make_shards: any Python inputs to shards, in parallel, resumable, in input order (issue 58.8, LitData's
``optimize``), with a descriptor whose counts give ``len(dataset)``."""

import json
import os

import pytest

import wds_core as wds
from tests.core.tools import shard_functions as fns
from wds_core import SpecError


def folder_bytes(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory)) if name.endswith(".tar")}


def expected_texts(numbers):
    texts = []
    for number in numbers:
        if number % 7 == 3:
            continue
        texts.append(f"row {number}")
        if number % 10 == 0:
            texts.append(f"row {number} again")
    return texts


def test_inputs_become_numbered_shards_in_input_order_with_a_descriptor(tmp_path):
    summary = wds.make_shards(fns.row_to_sample, list(range(100)), str(tmp_path / "out" / "train-%03d.tar"),
                              engine="serial", per_job=16, maxcount=25)  # fmt: skip
    assert summary.ok and summary.jobs == 7 and summary.inputs == 100
    texts = expected_texts(range(100))
    assert summary.samples == len(texts) == 94
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == [f"train-{i:03d}.tar" for i in range(len(summary.shards))] + ["train.json"]  # staging gone
    spec = str(tmp_path / "out" / f"train-{{000..{len(summary.shards) - 1:03d}}}.tar")
    dataset = wds.WebDataset(spec, sample_counts=summary.descriptor)
    samples = list(dataset.decode())
    assert [s["txt"] for s in samples] == texts  # in input order, across jobs
    assert samples[0]["__key__"] == "0000000000_0000" and samples[2]["__key__"] == "0000000001"
    assert len(dataset) == 94 and len(dataset.shuffle(10).decode()) == 94  # len() from the descriptor's counts
    descriptor = json.loads((tmp_path / "out" / "train.json").read_text())
    assert sum(entry["nsamples"] for entry in descriptor["shardlist"]) == 94
    assert all(entry["nsamples"] <= 25 for entry in descriptor["shardlist"])


def test_sizes_in_units_and_iterators_of_inputs(tmp_path):
    summary = wds.make_shards(fns.row_to_sample, iter(range(40)), str(tmp_path / "a-%02d.tar"), engine="serial",
                              per_job=10, maxsize="4KB")  # fmt: skip
    assert summary.ok and summary.inputs == 40 and summary.jobs == 4
    sizes = [os.path.getsize(name) for name in summary.shards]
    assert len(sizes) > 4 and max(sizes) <= 4000 + 2 * 1024  # each at most 4 kB of members and its end blocks
    with pytest.raises(SpecError, match="maxsize: not a size: '4 apples'"):
        wds.make_shards(fns.row_to_sample, range(4), str(tmp_path / "b-%02d.tar"), maxsize="4 apples")
    with pytest.raises(SpecError, match="needs one %d-style field"):
        wds.make_shards(fns.row_to_sample, range(4), str(tmp_path / "b.tar"))


def test_len_without_counts_says_how_to_have_one(tmp_path):
    wds.make_shards(fns.row_to_sample, range(10), str(tmp_path / "c-%02d.tar"), engine="serial", descriptor=None)
    with pytest.raises(TypeError, match="give sample_counts="):
        len(wds.WebDataset(str(tmp_path / "c-00.tar")))
    assert len(wds.WebDataset(str(tmp_path / "c-00.tar"), sample_counts={str(tmp_path / "c-00.tar"): 9})) == 9


def test_what_is_not_a_sample_is_a_failure_that_names_the_input(tmp_path):
    summary = wds.make_shards(fns.row_as_text, range(5), str(tmp_path / "d-%02d.tar"), engine="serial", retries=0)
    assert not summary.ok and "input 0 gave a str" in summary.failures[0][1]
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tar")]  # nothing published


@pytest.mark.slow
def test_a_stopped_run_resumes_and_gives_the_bytes_of_a_clean_one(tmp_path, monkeypatch):
    monkeypatch.setenv("WDS_TEST_MARKER", str(tmp_path / "ready"))
    out = tmp_path / "out"
    first = wds.make_shards(fns.row_not_ready, list(range(100)), str(out / "t-%03d.tar"), workers=2, per_job=10,
                            maxcount=30, retries=0, progress=True)  # fmt: skip
    assert not first.ok and [job for job, _ in first.failures] == [5] and "row 57 is not ready" in str(first)
    assert not folder_bytes(out)  # published only when every job is done
    (tmp_path / "ready").touch()
    seen = []
    second = wds.make_shards(fns.row_not_ready, list(range(100)), str(out / "t-%03d.tar"), workers=2, per_job=10,
                             maxcount=30, progress=seen.append)  # fmt: skip
    assert second.ok and second.jobs_done_before == 9 and len(seen) == 1  # only the failed job ran again
    clean = wds.make_shards(fns.row_to_sample, list(range(100)), str(tmp_path / "clean" / "t-%03d.tar"),
                            engine="serial", per_job=10, maxcount=30)  # fmt: skip
    assert folder_bytes(out) == folder_bytes(tmp_path / "clean") and second.samples == clean.samples == 94


@pytest.mark.slow
def test_remote_outputs_go_up_from_a_local_work_dir(tmp_path, s3):
    options = s3["team-a"].client_options("team-a")
    with pytest.raises(SpecError, match="give work_dir="):
        wds.make_shards(fns.row_to_sample, range(10), "s3://team-a/made/train-%02d.tar", storage=options)
    summary = wds.make_shards(fns.row_to_sample, range(30), "s3://team-a/made/train-%02d.tar", engine="serial",
                              per_job=10, maxcount=12, work_dir=str(tmp_path / "work"),
                              storage=options)  # fmt: skip
    assert summary.ok and summary.descriptor == "s3://team-a/made/train.json"
    assert not (tmp_path / "work").exists()
    spec = f"s3://team-a/made/train-{{00..{len(summary.shards) - 1:02d}}}.tar"
    dataset = wds.WebDataset(spec, sample_counts=summary.descriptor, storage=options)
    assert len(dataset) == summary.samples == len(list(dataset)) == len(expected_texts(range(30)))


def test_a_script_without_the_main_guard_is_told_before_any_process_starts(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "make.py"
    script.write_text(
        "import wds_core as wds\n"
        "def row(number):\n    return {'txt': str(number)}\n"
        f"wds.make_shards(row, range(10), {str(tmp_path / 'e-%02d.tar')!r}, workers=2)\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         cwd=os.getcwd())  # fmt: skip
    assert out.returncode == 1 and "line 4 of" in out.stderr and "__main__" in out.stderr, out.stderr


def test_a_pattern_that_holds_an_earlier_run_is_refused_or_replaced_whole(tmp_path):
    """Issue 67: a second run that wrote fewer shards left the first run's higher-numbered ones in place, and a spec
    over the pattern read both.  It is refused; with overwrite=True the set is replaced, the descriptor describes
    exactly what was written."""
    output = str(tmp_path / "out" / "t-%03d.tar")
    first = wds.make_shards(fns.row_to_sample, list(range(100)), output, engine="serial", per_job=20, maxcount=10)
    assert len(first.shards) > 3
    with pytest.raises(SpecError, match=r"shards of the pattern .* are there already .*overwrite=True"):
        wds.make_shards(fns.row_to_sample, list(range(20)), output, engine="serial", maxcount=10)
    again = wds.make_shards(fns.row_to_sample, list(range(20)), output, engine="serial", maxcount=10, overwrite=True)
    names = sorted(os.listdir(tmp_path / "out"))
    assert names == [f"t-{i:03d}.tar" for i in range(len(again.shards))] + ["t.json"]
    listed = json.loads((tmp_path / "out" / "t.json").read_text())["shardlist"]
    assert [entry["url"] for entry in listed] == [os.path.basename(url) for url in again.shards]
    assert sum(entry["nsamples"] for entry in listed) == again.samples == len(expected_texts(range(20)))
