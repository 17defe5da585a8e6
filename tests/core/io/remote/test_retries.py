"""wds_core.io.remote.retries: what is retried, how often and for how long, and what the last failure says."""

import time
from collections import Counter

import pytest

from wds_core.errors import SampleError, ShardNotFoundError, ShardOpenError
from wds_core.io.remote import retries
from wds_core.io.remote.retries import Attempts, Pace, RetryPolicy, ShortRead, cut_off, is_transient, with_retries

FAST = RetryPolicy(attempts=4, initial_delay=0, max_delay=0)


class Status(Exception):
    def __init__(self, status):
        super().__init__(f"HTTP {status}")
        self.status = status


def failing(*errors, result="done"):
    """A call that raises each of ``errors`` in turn, then returns ``result``; it records the time it was given."""
    given = []

    def call(left):
        given.append(left)
        if len(given) <= len(errors):
            raise errors[len(given) - 1]
        return result

    return call, given


@pytest.mark.parametrize(
    "options",
    [{"attempts": 0}, {"initial_delay": -1}, {"max_delay": -1}, {"budget": -1}, {"min_rate": -1}, {"rate_window": 0}],
)
def test_a_policy_that_cannot_work_is_refused(options):
    with pytest.raises(ValueError):
        RetryPolicy(**options)


def test_delays_double_up_to_the_most():
    policy = RetryPolicy(initial_delay=0.5, max_delay=3)
    assert [policy.delay(n) for n in range(5)] == [0.5, 1, 2, 3, 3]


def test_an_attempt_whose_reads_are_not_watched_gets_a_socket_wait_plus_its_bytes_at_the_least_rate():
    policy = RetryPolicy(min_rate=1000)
    assert policy.attempt_time(5000, None) == retries.IDLE_TIMEOUT + 5
    assert policy.attempt_time(5000, 2.0) == 2.0
    assert RetryPolicy(min_rate=0).attempt_time(5000, None) is None


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (Status(503), True), (Status(429), True), (Status(408), True), (Status(404), False), (Status(403), False),
        (ConnectionResetError(), True), (TimeoutError(), True), (ShortRead(), True), (OSError("reset"), True),
        (FileNotFoundError(), False), (PermissionError(), False), (ValueError("bad"), False),
        (SampleError("ours"), False),
    ],
)  # fmt: skip
def test_what_is_transient(error, transient):
    assert is_transient(error) is transient


def test_transient_failures_are_retried_and_counted():
    call, given = failing(ConnectionResetError("reset"), Status(503))
    stats: Counter = Counter()
    before = retries.retry_stats()
    assert with_retries("read bytes 0-10", call, "s3://b/s.tar", 0, FAST, stats) == "done"
    assert len(given) == 3 and stats == {"retries": 2, "recovered": 1}
    after = retries.retry_stats()
    # this process's counts (other threads of the run may add their own)
    assert after["retries"] - before["retries"] >= 2 and after["recovered"] - before["recovered"] >= 1


def test_the_last_failure_names_the_url_offset_and_attempts():
    call, given = failing(*[TimeoutError("slow")] * 4)
    with pytest.raises(ShardOpenError, match="after 4 attempts") as caught:
        with_retries("read bytes 512-1024", call, "https://host/s.tar", 512, FAST)
    assert caught.value.url == "https://host/s.tar" and caught.value.offset == 512 and len(given) == 4
    assert "TimeoutError: slow" in str(caught.value)


def test_a_failure_that_will_not_change_is_not_retried():
    call, given = failing(Status(403))
    with pytest.raises(ShardOpenError, match="HTTP 403"):
        with_retries("open", call, "s3://b/s.tar", None, FAST)
    assert len(given) == 1
    call, given = failing(FileNotFoundError())
    with pytest.raises(ShardNotFoundError):
        with_retries("open", call, "/data/missing.tar", None, FAST)
    assert len(given) == 1


def test_a_refused_credential_is_hidden_and_the_message_says_how_to_give_one():
    call, _ = failing(PermissionError("AccessDenied for https://user:hunter2@host/s.tar?X-Amz-Signature=abc"))
    with pytest.raises(ShardOpenError) as caught:
        with_retries("open", call, "https://host/s.tar", None, FAST)
    text = str(caught.value)
    assert "hunter2" not in text and "X-Amz-Signature=abc" not in text and "storage_options" in text


def test_the_budget_bounds_each_attempt_and_the_retries():
    policy = RetryPolicy(attempts=10, initial_delay=0.05, max_delay=0.05, budget=0.3)
    call, given = failing(*[TimeoutError()] * 10)
    started = time.monotonic()
    with pytest.raises(ShardOpenError, match="the retry budget is 0.3 s"):
        with_retries("read", call, "u", 0, policy)
    assert time.monotonic() - started < 5 and 1 < len(given) < 10  # the retries stop within the budget, not at 10
    assert given[0] == pytest.approx(0.3, abs=0.05) and all(b < a for a, b in zip(given, given[1:]))


def test_nothing_is_retried_once_nobody_waits_for_the_answer():
    call, given = failing(ConnectionResetError(), ConnectionResetError())
    with pytest.raises(ShardOpenError):
        with_retries("read", call, "u", 0, FAST, stopped=lambda: True)
    assert len(given) == 1


def test_a_pace_ends_at_its_deadline_and_cuts_off_a_trickle():
    pace = Pace(0.05, min_rate=0, window=1)
    assert 0 < pace.wait() <= 0.05
    time.sleep(0.06)
    with pytest.raises(TimeoutError, match="budget"):
        pace.wait()
    slow = Pace(None, min_rate=1000, window=0.05)
    assert slow.wait() == retries.IDLE_TIMEOUT
    slow.arrived(10)  # the first bytes start the window
    time.sleep(0.06)
    with pytest.raises(TimeoutError, match="min_rate"):
        slow.arrived(10)


def test_stopping_the_attempts_stops_those_under_way_and_any_begun_after():
    attempts = Attempts(FAST)
    pace = attempts.begin(None)
    attempts.stop()
    with pytest.raises(ConnectionAbortedError):
        pace.wait()
    with pytest.raises(ConnectionAbortedError):
        attempts.begin(None)


def test_cut_off_returns_raises_or_gives_up():
    assert cut_off(lambda: 7, 1.0, "size") == 7
    assert cut_off(lambda: 8, None, "size") == 8
    with pytest.raises(KeyError):
        cut_off(lambda: {}["x"], 1.0, "size")
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="size took more than"):
        cut_off(lambda: time.sleep(5), 0.05, "size")
    assert time.monotonic() - started < 4  # given up, not waited for
