"""wds_core.intervals: sets of positions as sorted, disjoint, half-open intervals, and their encoding."""

from hypothesis import given
from hypothesis import strategies as st

from wds_core import intervals as iv

spans = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 200)), max_size=12)


def positions(intervals):
    return {p for a, b in intervals for p in range(a, b)}


@given(spans)
def test_normalize_keeps_the_positions_sorted_disjoint_and_apart(raw):
    merged = iv.normalize(raw)
    assert positions(merged) == positions(raw)
    assert all(a < b for a, b in merged) and all(b1 < a2 for (_, b1), (a2, _) in zip(merged, merged[1:]))
    assert iv.length(merged) == len(positions(raw))


@given(spans, st.integers(0, 250))
def test_complement(raw, total):
    assert positions(iv.complement(raw, total)) == set(range(total)) - positions(raw)


@given(spans, st.integers(-50, 400), st.integers(0, 300))
def test_take_walks_the_sequence_wrapping_at_its_end(raw, start, count):
    sequence = iv.normalize(raw)
    flat = [p for a, b in sequence for p in range(a, b)]
    taken = [p for a, b in iv.take(sequence, start, count) for p in range(a, b)]
    if not flat:
        assert taken == []
    else:
        assert taken == [flat[(start + k) % len(flat)] for k in range(count)]


@given(spans)
def test_encode_and_decode_round_trip(raw):
    merged = iv.normalize(raw)
    assert iv.decode(iv.encode(merged)) == merged


@given(st.sets(st.integers(0, 500), max_size=60))
def test_runs_of_consecutive_positions(chosen):
    assert positions(iv.runs(sorted(chosen))) == chosen and iv.runs(sorted(chosen)) == iv.normalize(
        [(p, p + 1) for p in chosen]
    )


def test_local_positions_of_a_part_to_global_ones():
    part = [(10, 13), (50, 52), (80, 85)]  # local 0..9 -> global 10,11,12,50,51,80,...,84
    chosen, extra = iv.local_to_global(part, 4, [6, 9, 42])
    assert chosen == [(10, 13), (50, 51)] and extra.tolist() == [81, 84]
    assert iv.local_to_global([], 0, [1])[1].tolist() == []
