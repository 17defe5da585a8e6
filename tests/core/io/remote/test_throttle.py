"""wds_core.io.remote.throttle: a store's rate limit slows the process's requests together and never fails them."""

import email.utils
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import write_shard
from tests.hubserver import LimitedStore
from wds_core.errors import ShardOpenError
from wds_core.io.remote import throttle
from wds_core.io.remote.retries import RetryPolicy, retry_stats, with_retries
from wds_core.io.remote.throttle import THROTTLE, Throttle, retry_after, throttled

FAST = RetryPolicy(attempts=2, initial_delay=0, max_delay=0)


class Answer(Exception):
    def __init__(self, status, wait=None, code=""):
        super().__init__(f"HTTP {status}")
        self.status, self.retry_after, self.store_code = status, wait, code


@pytest.fixture(autouse=True)
def fresh_throttle():
    THROTTLE.__init__()
    yield
    THROTTLE.__init__()


def test_retry_after_in_seconds_or_as_a_date():
    assert retry_after("3") == 3.0 and retry_after(" 0.5 ") == 0.5
    now = time.time()
    assert retry_after(email.utils.formatdate(now + 20, usegmt=True), now) == pytest.approx(20, abs=1)
    assert retry_after(email.utils.formatdate(now - 20, usegmt=True), now) == 0.0  # past: go now
    assert retry_after("999999") == 3600.0  # a wrong clock or a wild value does not stop a job for days
    assert retry_after(None) is None and retry_after("soon") is None and retry_after("nan") is None


@given(st.text(max_size=40))
def test_retry_after_never_raises_and_is_bounded(text):
    wait = retry_after(text)
    assert wait is None or 0 <= wait <= 3600


@pytest.mark.parametrize(
    ("error", "limit"),
    [
        (Answer(429), True),
        (Answer(503, wait=1.0), True),
        (Answer(503, code="SlowDown"), True),
        (Answer(503), False),  # an outage, retried within the attempts
        (Answer(500, wait=1.0), False),
        (ConnectionResetError(), False),
    ],
)
def test_what_is_a_rate_limit(error, limit):
    assert throttled(error)[0] is limit


def test_botocore_slowdown_is_a_rate_limit():
    class ClientError(Exception):
        response = {
            "Error": {"Code": "SlowDown"},
            "ResponseMetadata": {"HTTPStatusCode": 503, "HTTPHeaders": {"retry-after": "2"}},
        }

    assert throttled(ClientError()) == (True, 2.0)


def test_throttled_answers_spend_no_attempt_and_the_wait_they_asked_for_is_kept():
    answers = [Answer(429, wait=0.05)] * 5
    calls = []

    def call(left):
        calls.append(time.monotonic())
        if len(calls) <= len(answers):
            raise answers[len(calls) - 1]
        return "done"

    before = retry_stats()
    assert with_retries("read", call, "http://store/x", 0, FAST) == "done"  # 2 attempts, 5 rate limits: no failure
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert min(gaps) >= 0.045  # each try waited what the store asked for
    after = retry_stats()
    assert after["throttled"] - before["throttled"] == 5 and after["retries"] == before["retries"]
    assert after["throttled_s"] > before["throttled_s"]


def test_the_wait_is_no_part_of_the_time_budget():
    answers = iter([Answer(429, wait=0.3), Answer(429, wait=0.3)])

    def call(left):
        error = next(answers, None)
        if error is not None:
            raise error
        return left

    left = with_retries("read", call, "http://store/x", 0, RetryPolicy(budget=0.5, initial_delay=0))
    assert left > 0.4  # 0.6 s waited, and the attempt was still given nearly all of the 0.5 s


def test_a_request_throttled_past_its_patience_fails_and_says_so():
    def call(left):
        raise Answer(429, wait=0.05)

    with pytest.raises(ShardOpenError) as info:
        with_retries("read bytes 0-9", call, "http://store/x?token=secret", 0, RetryPolicy(throttle_patience=0.3))
    message = str(info.value)
    assert "rate limit" in message and "throttle_patience" in message and "secret" not in message


def test_an_outage_503_still_spends_the_attempts():
    def call(left):
        raise Answer(503)

    with pytest.raises(ShardOpenError, match="after 2 attempts"):
        with_retries("read", call, "http://store/x", 0, FAST)


def test_throttled_answers_halve_the_requests_at_once_and_admitted_ones_bring_them_back():
    gate = Throttle(most=16)
    for _ in range(8):
        gate.enter()
    gate.leave("throttled", 0.0)  # 8 were under way: at most 4 now
    assert gate.limit == 4.0
    gate.last_cut = -1e9
    gate.leave("throttled", 0.0)
    assert gate.limit == 2.0  # halved again (once a backoff: last_cut put back)
    for _ in range(6):
        gate.leave("ok")
    assert 3 < gate.limit < 5  # +1/limit an answer
    for _ in range(200):
        gate.enter()
        gate.leave("ok")
    assert gate.limit == 16 and gate.calm()


def test_requests_wait_together_for_the_time_the_store_named():
    gate = Throttle(most=8)
    gate.enter()
    gate.leave("throttled", 0.2)
    started = time.monotonic()
    waits = []

    def request():
        waits.append(gate.enter())
        gate.leave("ok")

    threads = [threading.Thread(target=request) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert time.monotonic() - started >= 0.19 and min(waits) >= 0.15 and len(waits) == 4
    assert gate.active == 0 and gate.limit > 1  # one at a time after the cut, more as answers came back


def test_a_forked_child_forgets_the_parents_limits():
    THROTTLE.limit, THROTTLE.answers = 1.0, 7
    throttle._forked()
    assert THROTTLE.limit == THROTTLE.most and THROTTLE.answers == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["ok", "throttled", "failed"]), max_size=80), st.integers(1, 64))
def test_the_limit_stays_between_one_and_the_most(outcomes, most):
    gate = Throttle(most=most)
    for outcome in outcomes:
        gate.active += 1  # a request under way, whatever the limit (enter() would wait)
        gate.leave(outcome, 0.0)
        assert 1.0 <= gate.limit <= most and gate.active == 0


# ---------------------------------------------------------------- at scale: 64 readers against a rate limit

READER = r"""
import json, sys, threading
import wds_core
from wds_core.io.remote.retries import RetryPolicy, retry_stats

base, shards = sys.argv[1], json.loads(sys.argv[2])
results, errors = {}, []

def read(i, names):
    try:
        dataset = wds_core.WebDataset([f"{base}/{name}" for name in names],
                                      storage=wds_core.Storage(retry=RetryPolicy(attempts=2, initial_delay=0.05)))
        results[i] = [sample["__key__"] for sample in dataset]
    except Exception as exn:  # a reader that fails is the test's failure: say which and why
        errors.append(f"reader {i}: {type(exn).__name__}: {exn}")

threads = [threading.Thread(target=read, args=(i, names)) for i, names in enumerate(shards)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"keys": [k for i in sorted(results) for k in results[i]], "errors": errors,
                  "throttled": retry_stats()["throttled"]}))
"""


@pytest.mark.slow
@pytest.mark.serial  # 64 readers in 4 processes take the machine: not beside tests that time a request
@pytest.mark.parametrize("slowdown", [False, True])
def test_sixty_four_readers_against_a_rate_limit_lose_nothing_and_fail_nowhere(tmp_path, slowdown):
    root = tmp_path / "store"
    root.mkdir()
    names, expected = [], []
    for s in range(128):
        samples = [{"__key__": f"s{s:03d}_{i}", "bin": bytes([i]) * 2000} for i in range(4)]
        write_shard(str(root / f"r-{s:03d}.tar"), samples, ("bin",))
        names.append(f"r-{s:03d}.tar")
        expected += [sample["__key__"] for sample in samples]
    store = LimitedStore(str(root), rate=40, slowdown=slowdown)
    try:
        processes = []
        for p in range(4):  # 16 readers a process, two shards each
            mine = [names[(p * 16 + r) * 2 : (p * 16 + r) * 2 + 2] for r in range(16)]
            processes.append(subprocess.Popen(
                [sys.executable, "-c", READER, store.url, json.dumps(mine)], stdout=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": os.getcwd()},
            ))  # fmt: skip
        outputs = [json.loads(process.communicate(timeout=240)[0]) for process in processes]
    finally:
        store.stop()
    assert [out["errors"] for out in outputs] == [[]] * 4
    got = [key for out in outputs for key in out["keys"]]
    assert sorted(got) == sorted(expected) and len(got) == len(set(got))
    assert store.window.refused > 0 and sum(out["throttled"] for out in outputs) > 0  # the limit was met
