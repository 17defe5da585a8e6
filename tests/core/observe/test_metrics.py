"""Profiles out of every process (issue 32): WDS_PROFILE's JSON lines from workers, their sum, Prometheus text."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

import wds_core as wds
from tests.conftest import counted_shards
from wds_core.observe import metrics


@pytest.fixture
def shards(tmp_path):
    return counted_shards(tmp_path, [30, 30], "m")[0]


def slow(sample):
    time.sleep(0.002)
    return sample


@pytest.mark.slow
def test_every_worker_writes_its_profile_and_they_add_up(shards, tmp_path, monkeypatch):
    path = tmp_path / "profile.jsonl"
    monkeypatch.setenv("WDS_PROFILE", str(path))
    monkeypatch.setenv("WDS_PROFILE_EVERY", "0.02")
    dataset = wds.WebDataset(shards).map(slow)
    assert sum(1 for _ in wds.Loader(dataset, num_workers=2)) == 60
    lines = metrics.read_reports(str(path))
    finals = [line for line in lines if line["final"]]
    assert sorted(line["worker"] for line in finals) == [0, 1] and {line["num_workers"] for line in finals} == {2}
    assert len(lines) > len(finals)  # reports while running, every WDS_PROFILE_EVERY seconds
    assert all(line["samples"] == 30 and line["rank"] == 0 and line["sampler"] == "signal" for line in finals)
    combined = metrics.combine(lines)
    stages = {stage["name"]: stage for stage in combined["stages"]}
    assert combined["processes"] == 2 and combined["samples"] == 60 and stages["map(slow)"]["items"] == 60
    assert stages["tarfile_to_samples"]["bytes"] > 0
    assert max(stages.values(), key=lambda s: s["seconds"])["name"] == "map(slow)"


def test_no_profile_without_the_environment(shards, monkeypatch):
    monkeypatch.delenv("WDS_PROFILE", raising=False)
    dataset = wds.WebDataset(shards)
    items = iter(dataset)
    assert not hasattr(items, "gi_code") or items.gi_code.co_name != "_profiled"
    assert sum(1 for _ in items) == 60


def test_a_profile_reports_while_it_runs(shards):
    seen = []
    dataset = wds.WebDataset(shards).map(slow)
    with wds.Profile(dataset, interval=0.002, on_report=seen.append, every=0.02):
        assert sum(1 for _ in dataset) == 60
    assert len(seen) >= 2 and all("stages" in report for report in seen)
    assert seen[-1]["samples"] <= 60


def test_prometheus_text_and_the_metrics_endpoint(shards, tmp_path):
    dataset = wds.WebDataset(shards).map(slow)
    with wds.Profile(dataset, interval=0.002) as profile:
        list(dataset)
    line = metrics.write_report(str(tmp_path / "p.jsonl"), profile.report(), run="r1", final=True)
    text = metrics.prometheus_text([line])
    assert "# TYPE wds_stage_seconds_total counter" in text
    assert 'wds_stage_items_total{stage="map(slow)",rank="0",worker="0",pid="' in text
    assert f'wds_samples_total{{rank="0",worker="0",pid="{line["pid"]}"}} 60' in text
    for row in text.splitlines():
        assert row.startswith("#") or (row.split("{")[0].startswith("wds_") and float(row.rsplit(" ", 1)[1]) >= 0)
    server = metrics.serve_metrics(0, lambda: [line])
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain") and answer.read().decode() == text
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert refused.value.code == 404
        refused.value.close()
    finally:
        server.shutdown()
        server.server_close()


def test_the_time_throttled_by_a_store_is_a_metric():
    """Issue 69: a store's rate limit shows in the metrics (answers throttled, seconds waited), per process."""
    report = {"pid": 7, "stages": [], "wall_seconds": 2.0, "samples": 5,
              "remote": {"throttled": 3, "throttled_s": 1.5, "retries": 1, "hedged": 0}}  # fmt: skip
    text = metrics.prometheus_text([report])
    assert 'wds_remote_throttled_total{pid="7"} 3' in text
    assert 'wds_remote_throttled_seconds_total{pid="7"} 1.5' in text
    older = {key: value for key, value in report.items() if key != "remote"}  # a report written before: zeros
    assert 'wds_remote_throttled_total{pid="7"} 0' in metrics.prometheus_text([older])
