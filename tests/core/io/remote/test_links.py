"""wds_core.io.remote.links: the range size that keeps a connection busy, from the answers' timings."""

from hypothesis import given
from hypothesis import strategies as st

from wds_core.io.remote.links import GROW, Link, link_for


def test_untimed_links_suggest_nothing():
    link = Link()
    assert link.target(1, 100) is None
    link.record(1 << 20, 0.04, 0.025)
    assert link.target(1, 100) is None  # one answer: not yet


def test_the_target_is_latency_times_speed_times_grow_within_the_bounds():
    link = Link()
    for _ in range(4):
        link.record(2 << 20, 0.04, (2 << 20) / 40e6)  # 40 ms, 40 MB/s
    assert link.target(1, 1 << 40) == int(GROW * 0.04 * 40e6)
    assert link.target(2 << 20, 4 << 20) == 4 << 20 and link.target(32 << 20, 64 << 20) == 32 << 20


def test_small_answers_say_the_latency_not_the_speed():
    link = Link()
    for _ in range(4):
        link.record(1000, 0.05, 0.00001)  # a tiny body arrives at once: no speed from it
    assert link.target(1, 1 << 40) is None


def test_each_host_has_its_link():
    assert link_for("http", "Example.org", 80) is link_for("http", "example.org", 80)
    assert link_for("http", "example.org", 80) is not link_for("https", "example.org", 443)


@given(st.lists(st.tuples(st.integers(0, 1 << 30), st.floats(0, 10), st.floats(0, 10)), max_size=40),
       st.integers(1, 1 << 20), st.integers(1 << 20, 1 << 26))  # fmt: skip
def test_the_target_stays_within_its_bounds_for_any_timings(answers, least, most):
    link = Link()
    for nbytes, first, body in answers:
        link.record(nbytes, first, body)
    target = link.target(least, most)
    assert target is None or least <= target <= most
