"""The read-ahead windows: every range once and in order, one allowance per reader, the shard being read first."""

import os
import threading
import time

import pytest

from wds_core.io.remote.readahead import Allowance, RangeWindow, ReadAhead


def window_over(data, plan, allowance=None, delay=0.0, asked=None):
    def fetch(start, length):
        if asked is not None:
            asked.append((start, length))
        if delay:
            time.sleep(delay)
        return data[start : start + length]

    return RangeWindow(fetch, lambda: len(data), lambda: len(data), 0, plan, allowance=allowance)


def settled(allowance):
    """Nothing requested and not taken, and (once the last answers' callbacks have run) nothing running."""
    deadline = time.monotonic() + 5
    while allowance.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert allowance.running == allowance.pending == allowance.held == 0


def read_all(window):
    out, position = [], 0
    while piece := window.take(position):
        out.append(piece)
        position += len(piece)
    return b"".join(out)


@pytest.mark.parametrize("trial", range(5))
def test_ranges_answered_at_once_are_each_requested_once_and_taken_in_order(trial):
    """A fetch that returns before its request is booked (its callback runs in the thread that asked) must not
    make the window ask for the same offset twice: that delivered one range in another's place."""
    data = os.urandom(300_000)
    for _ in range(40):
        asked = []
        window = window_over(data, ReadAhead(1000, 4096, 24, 1 << 20, hedge_after=None), asked=asked)
        assert read_all(window) == data
        starts = [start for start, _ in asked]
        assert len(starts) == len(set(starts))
        settled(window.allowance)


def test_the_shard_being_read_is_served_before_the_shards_ahead():
    data = os.urandom(64 * 1024)
    plan = ReadAhead(4096, 4096, 4, 1 << 20)
    allowance = Allowance(plan)
    current, ahead = [], []
    reading = window_over(data, plan, allowance, delay=0.05, asked=current)
    later = window_over(data, plan, allowance, delay=0.05, asked=ahead)
    later.prime()  # a shard ahead asks for its first ranges...
    reading.prime()
    time.sleep(0.01)
    assert allowance.running <= plan.in_flight
    assert read_all(reading) == data
    # ...but once the one being read wants more, the connections go to it first: the shard ahead waited
    assert len(ahead) < len(data) // 4096
    assert read_all(later) == data


def test_the_budget_bounds_what_all_the_windows_of_a_reader_hold():
    data = os.urandom(256 * 1024)
    plan = ReadAhead(8192, 8192, 64, budget=32 * 1024)
    allowance = Allowance(plan)
    windows = [window_over(data, plan, allowance) for _ in range(4)]
    peak = []
    for window in windows:
        window.prime()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak.append(allowance.held)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert all(read_all(window) == data for window in windows)
    finally:
        stop.set()
        watcher.join()
    assert max(peak) <= plan.budget + plan.range_bytes
    settled(allowance)


def test_window_bytes_spread_the_requests_over_the_windows():
    """With window_bytes, no window holds more than its cap (one range always), so that the first windows of a
    reader of many shards at once do not take the budget from the others; every window reads all its bytes."""
    data = os.urandom(64 * 1024)
    plan = ReadAhead(4096, 4096, 64, budget=1 << 20, window_bytes=6000, ramp=0)  # one range ahead (a second passes)
    allowance = Allowance(plan)
    windows = [window_over(data, plan, allowance) for _ in range(8)]
    for window in windows:
        window.prime()
    time.sleep(0.05)
    assert all(window.ahead <= 4096 for window in windows) and all(window.ahead for window in windows)
    assert allowance.held <= 8 * 4096
    assert all(read_all(window) == data for window in windows)
    assert not any(window.ahead for window in windows)
    settled(allowance)


def test_a_cancelled_window_gives_back_what_it_held():
    data = os.urandom(64 * 1024)
    plan = ReadAhead(4096, 4096, 8, 1 << 20)
    allowance = Allowance(plan)
    window = window_over(data, plan, allowance, delay=0.02)
    window.prime()
    window.take(0)
    window.cancel()
    settled(allowance)
    assert not allowance.windows


def test_read_ahead_is_checked():
    with pytest.raises(ValueError, match="shards_ahead"):
        ReadAhead(shards_ahead=-1)
    with pytest.raises(ValueError, match="in_flight"):
        ReadAhead(in_flight=0)
