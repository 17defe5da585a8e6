"""Shards written to S3 in parts uploaded in parallel and retried, against moto's S3 server."""

import os

import pytest

import wds_core
from wds_core.errors import ShardOpenError
from wds_core.io.backends.s3upload import S3Upload, s3_upload
from wds_core.io.remote.rangestream import RetryPolicy, retry_stats

FAST = RetryPolicy(attempts=5, initial_delay=0.01, max_delay=0.05)


def fetch(server, key):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.client_options("team-a"))
    return fs.cat_file(f"team-a/{key}") if fs.exists(f"team-a/{key}") else None


def uploading(server, key, part_bytes=5 << 20, in_flight=3):
    pytest.importorskip("s3fs")
    upload = s3_upload(f"s3://team-a/{key}", server.client_options("team-a"), FAST)
    assert isinstance(upload, S3Upload)
    upload.part_bytes, upload.in_flight = part_bytes, in_flight
    return upload


def test_parts_go_up_in_parallel_and_failed_ones_are_sent_again(s3):
    server = s3["team-a"]
    data = os.urandom(23 << 20)  # 5 parts of 5 MiB
    server.write_faults.spacing = 1
    server.write_faults.fail(3, status=503)
    before = retry_stats()["retries"]
    upload = uploading(server, "uploads/faults.tar")
    for at in range(0, len(data), 1 << 20):
        upload.write(data[at : at + (1 << 20)])
        assert len(upload.parts) <= upload.in_flight  # the writer waits beyond that: memory stays bounded
    assert fetch(server, "uploads/faults.tar") is None  # nothing visible before commit
    upload.commit()
    assert fetch(server, "uploads/faults.tar") == data
    assert server.write_faults.injected["status"] == 3 and retry_stats()["retries"] - before >= 3
    parts = [query for method, path, query in server.writes if "faults.tar" in path and "partNumber=" in query]
    assert len(parts) == 5 + 3


def test_a_small_shard_is_one_request_and_an_aborted_upload_leaves_nothing(s3):
    import s3fs

    server = s3["team-a"]
    small = uploading(server, "uploads/small.tar")
    small.write(b"x" * 1000)
    small.commit()
    assert fetch(server, "uploads/small.tar") == b"x" * 1000
    assert [method for method, path, _ in server.writes if path.endswith("small.tar")] == ["PUT"]
    big = uploading(server, "uploads/aborted.tar")
    big.write(os.urandom(11 << 20))
    big.abort()
    assert fetch(server, "uploads/aborted.tar") is None
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **server.client_options("team-a"))
    assert fs.list_multipart_uploads("team-a") == []


def test_a_refused_upload_names_the_shard_and_is_not_retried(s3):
    server = s3["team-a"]
    options = {**server.client_options("team-a"), "key": "AKIDTEAMB"}
    upload = s3_upload("s3://team-a/uploads/refused.tar", options, FAST)
    upload.write(b"y" * 100)
    with pytest.raises(ShardOpenError, match="InvalidAccessKeyId") as failure:
        upload.commit()
    assert "s3://team-a/uploads/refused.tar" in str(failure.value) and "secret-of" not in str(failure.value)


def test_shard_writer_uploads_through_parts(s3, monkeypatch):
    from wds_core.io.backends import s3upload as uploads

    server = s3["team-a"]
    monkeypatch.setattr(uploads, "PART_BYTES", 5 << 20)
    wds_core.register_storage("s3://team-a/", **server.client_options("team-a"))
    samples = [{"__key__": f"{i:04d}", "bin": os.urandom(1 << 20)} for i in range(12)]
    with wds_core.ShardWriter("s3://team-a/uploads/w-%02d.tar", maxcount=6) as sink:
        for sample in samples:
            sink.write(sample)
    read = list(wds_core.WebDataset("s3://team-a/uploads/w-{00..01}.tar"))
    assert [(s["__key__"], s["bin"]) for s in read] == [(s["__key__"], s["bin"]) for s in samples]
    assert any("uploadId=" in query for _, path, query in server.writes if "/w-00.tar" in path)


def test_parts_are_at_least_five_mib():
    with pytest.raises(ValueError, match="5 MiB"):
        S3Upload("s3://b/k", None, "b", "k", part_bytes=1 << 20)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stall", "drip"])
def test_a_store_that_takes_an_upload_a_byte_at_a_time_does_not_hold_the_writer(s3, how):
    """Issue 43: botocore's calls cannot be told a deadline, and each socket operation of one that a store answers
    late, or takes in a byte at a time, stays within its timeout; each attempt is given up after the time left of
    the budget (or its bytes' time at the least rate), and the writer gets a clear error."""
    import time

    server = s3["team-a"]
    upload = uploading(server, f"uploads/slow-{how}.tar")
    upload.retry = RetryPolicy(attempts=3, initial_delay=0.01, budget=1.5)
    if how == "stall":
        server.write_faults.stall(3, 6.0)
    else:
        server.write_faults.drip(3, 0.2)
    upload.write(b"x" * 20_000)
    started = time.monotonic()
    with pytest.raises(ShardOpenError, match=r"cannot upload the shard after .*the retry budget is 1.5 s"):
        upload.commit()
    assert time.monotonic() - started < 10


def test_an_uploads_parts_in_flight_count_in_the_engines_budget(s3, monkeypatch):
    from wds_core.io.remote import engine

    server = s3["team-a"]
    data = os.urandom(21 << 20)  # 5 parts of 5 MiB
    monkeypatch.setattr(engine.ENGINE, "budget", 6 << 20)  # room for one part in flight beside the readers'
    upload = uploading(server, "uploads/budget.tar", in_flight=4)
    most = 0
    for at in range(0, len(data), 1 << 20):
        upload.write(data[at : at + (1 << 20)])
        most = max(most, len(upload.parts))
        assert engine.ENGINE.held <= 6 << 20
    upload.commit()
    assert most == 1 and engine.ENGINE.held == 0
    assert fetch(server, "uploads/budget.tar") == data
    aborted = uploading(server, "uploads/aborted-budget.tar", in_flight=4)
    aborted.write(data[: 11 << 20])
    aborted.abort()
    assert engine.ENGINE.held == 0  # an aborted upload lets its parts' bytes go
