"""Sets of sample positions as sorted, disjoint, half-open intervals ``[a, b)``, and their compact encoding.

Balanced epochs (:mod:`wds_core.sources.balanced`) plan each reader's part with them and
elastic resume (:mod:`wds_core.elastic`) records what was delivered with them.

>>> normalize([(5, 8), (0, 2), (1, 3)])
[(0, 3), (5, 8)]
>>> complement([(0, 3), (5, 8)], 10)
[(3, 5), (8, 10)]
>>> take([(0, 3), (5, 8)], 2, 3)
[(2, 3), (5, 7)]
>>> decode(encode([(0, 3), (5, 8)]))
[(0, 3), (5, 8)]
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["Intervals", "complement", "decode", "encode", "length", "local_to_global", "normalize", "runs", "take"]

Intervals = list[tuple[int, int]]  # sorted, disjoint, half-open [a, b)


def normalize(intervals: Iterable[tuple[int, int]]) -> Intervals:
    merged: Intervals = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


def length(intervals: Intervals) -> int:
    return sum(b - a for a, b in intervals)


def complement(intervals: Intervals, total: int) -> Intervals:
    gaps, at = [], 0
    for a, b in normalize(intervals):
        if a > at:
            gaps.append((at, min(a, total)))
        at = max(at, b)
    if at < total:
        gaps.append((at, total))
    return [(a, b) for a, b in gaps if b > a]


def take(sequence: Intervals, start: int, count: int) -> Intervals:
    """Positions ``start .. start + count`` of the sequence the intervals enumerate, wrapping at its end.

    The result keeps the sequence's order (it is not normalised: a wrapped
    part lists the end of the sequence before its start).
    """
    size = length(sequence)
    out: Intervals = []
    if size == 0 or count <= 0:
        return out
    start %= size
    while count > 0:
        skipped = 0
        for a, b in sequence:
            if start < skipped + (b - a):
                first = a + start - skipped
                n = min(b - first, count)
                out.append((first, first + n))
                count -= n
                start = (start + n) % size
                break
            skipped += b - a
    return out


def local_to_global(part: Intervals, prefix: int, extra: Any = ()) -> tuple[Intervals, Any]:
    """The global positions of a part's first ``prefix`` positions (intervals), and of its positions ``extra``.

    ``extra`` (local positions past the prefix) maps to a sorted array of global positions.
    """
    chosen = normalize(take(part, 0, prefix) if prefix < length(part) else list(part))
    extra = np.asarray(extra, dtype=np.int64)
    if not len(extra) or not part:
        return chosen, np.zeros(0, dtype=np.int64)
    bounds = np.asarray(part, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(bounds[:, 1] - bounds[:, 0])))
    extra = extra[extra < starts[-1]]
    which = np.searchsorted(starts, extra, side="right") - 1
    return chosen, np.sort(bounds[which, 0] + extra - starts[which])


def runs(positions: Any) -> Intervals:
    """Sorted distinct positions as intervals of consecutive ones."""
    positions = np.asarray(positions, dtype=np.int64)
    if not len(positions):
        return []
    breaks = np.nonzero(np.diff(positions) != 1)[0]
    firsts = np.concatenate(([positions[0]], positions[breaks + 1]))
    lasts = np.concatenate((positions[breaks], [positions[-1]]))
    return list(zip(firsts.tolist(), (lasts + 1).tolist()))


def encode(intervals: Intervals) -> str:
    flat = np.asarray(intervals, dtype=np.int64).reshape(-1)
    deltas = np.diff(flat, prepend=0) if len(flat) else flat
    return base64.b64encode(zlib.compress(deltas.astype("<i8").tobytes())).decode("ascii")


def decode(text: str) -> Intervals:
    flat = np.cumsum(np.frombuffer(zlib.decompress(base64.b64decode(text)), dtype="<i8"))
    return list(zip(flat[0::2].tolist(), flat[1::2].tolist()))
