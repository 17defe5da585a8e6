"""The chart of ``wds stats --shuffle --svg``: each batch of the epoch, against a global shuffle.

One panel a measure: the distinct shards in each batch, then (when a label field is measured) the effective
number of labels in each batch; a dashed line is what a global shuffle gives, a dotted one what batches read in
storage order give.  Plain SVG, no plotting library (as ``wds profile --svg``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

__all__ = ["shuffle_svg"]

WIDTH, LEFT, PANEL, GAP = 760, 60, 170, 50
EPOCH, GLOBAL, STORAGE = "#2b6cb0", "#c05621", "#718096"
MAX_POINTS = 1500  # points a polyline draws at most


def nice_top(value: float) -> float:
    """The axis's top: the first of 1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10 (times a power of ten) at or above ``value``,
    so that the tick label says where the axis ends."""
    scale = 10.0 ** math.floor(math.log10(value)) if value > 0 else 1.0
    for step in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if step * scale >= value - 1e-12:
            return round(step * scale, 10)
    return 10.0 * scale


def _panel(top: float, title: str, series: Sequence[float], lines: list[tuple[str, float, str]]) -> list[str]:
    """A panel: ``series`` by batch as a polyline, ``lines`` (label, value, dash) as horizontal references."""
    if len(series) > MAX_POINTS:  # a long epoch: the mean of each run of batches, one point each
        runs = -(-len(series) // MAX_POINTS)
        series = [sum(series[i : i + runs]) / len(series[i : i + runs]) for i in range(0, len(series), runs)]
    peak = nice_top(max([*series, *(value for _, value, _ in lines), 1.0]) * 1.05)
    right = WIDTH - 20
    step = (right - LEFT) / max(len(series) - 1, 1)

    def y(value: float) -> float:
        return top + PANEL - PANEL * value / peak

    parts = [f'<text x="{LEFT}" y="{top - 8}" font-size="13">{escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{top + PANEL}" x2="{right}" y2="{top + PANEL}" stroke="black"/>',
             f'<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{top + PANEL}" stroke="black"/>',
             f'<text x="{LEFT - 6}" y="{top + 4}" text-anchor="end">{peak:g}</text>',
             f'<text x="{LEFT - 6}" y="{top + PANEL}" text-anchor="end">0</text>']  # fmt: skip
    points = " ".join(f"{LEFT + i * step:.1f},{y(v):.1f}" for i, v in enumerate(series))
    parts.append(f'<polyline points="{points}" fill="none" stroke="{EPOCH}" stroke-width="1.5"/>')
    for label, value, dash in lines:
        colour = GLOBAL if dash == "6,4" else STORAGE
        parts.append(f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{right}" y2="{y(value):.1f}" stroke="{colour}" '
                     f'stroke-dasharray="{dash}"><title>{escape(label)}: {value:.1f}</title></line>')  # fmt: skip
    return parts


def shuffle_svg(report: dict[str, Any], distinct: Sequence[int], mixing: Any = None) -> str:
    """The chart of a ``wds stats --shuffle`` report, from its per-batch distinct shards and label mixing."""
    panels = 1 if mixing is None else 2
    height = 60 + panels * (PANEL + GAP) + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="10" y="22" font-size="14">wds stats --shuffle: {escape(report["pipeline"])}, batches of '
             f'{report["batch_size"]} ({len(distinct):,} batches)</text>']  # fmt: skip
    top = 60.0
    parts += _panel(top, f"distinct shards a batch: {report['distinct_per_batch']:.1f}, a global shuffle "
                    f"{report['global_distinct_per_batch']:.1f} (diversity {report['diversity_ratio']:.2f})",
                    distinct, [("a global shuffle", report["global_distinct_per_batch"], "6,4")])  # fmt: skip
    if mixing is not None:
        top += PANEL + GAP
        parts += _panel(top, f"effective {mixing.field} values a batch: {mixing.effective_per_batch:.1f}, a global "
                        f"shuffle {mixing.global_effective_per_batch:.1f}, storage order "
                        f"{mixing.storage_effective_per_batch:.1f} (mixing {mixing.ratio:.2f})",
                        mixing.effective_by_batch,
                        [("a global shuffle", mixing.global_effective_per_batch, "6,4"),
                         ("storage order", mixing.storage_effective_per_batch, "2,3")])  # fmt: skip
    y = height - 14
    parts.append(f'<line x1="10" y1="{y - 4}" x2="34" y2="{y - 4}" stroke="{EPOCH}" stroke-width="2"/>'
                 f'<text x="40" y="{y}">this epoch, batch by batch</text>'
                 f'<line x1="220" y1="{y - 4}" x2="244" y2="{y - 4}" stroke="{GLOBAL}" stroke-dasharray="6,4"/>'
                 f'<text x="250" y="{y}">a global shuffle</text>')  # fmt: skip
    if mixing is not None:
        parts.append(f'<line x1="380" y1="{y - 4}" x2="404" y2="{y - 4}" stroke="{STORAGE}" stroke-dasharray="2,3"/>'
                     f'<text x="410" y="{y}">storage order</text>')  # fmt: skip
    parts.append(f'<text x="{WIDTH - 20}" y="{y}" text-anchor="end">batches of the epoch, in order &#8594;</text>')
    parts.append("</svg>")
    return "\n".join(parts)
