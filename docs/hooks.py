"""MkDocs hooks: the benchmark chart, drawn at build time from the tables of ``benchmarks/README.md``.

Every table there that has a ratio column (``speedup``, ``ratio`` or ``vs webdataset``) compares wds
with webdataset 1.0.2 measured in the same run; each of its rows that names a wds reader (or every
row, when the table has one comparison per row) becomes one bar.  The chart is added to the site as
``images/benchmarks.svg`` without being written into ``docs/``, so it always shows the figures the
README records.  ``python docs/hooks.py [README] > chart.svg`` draws it outside MkDocs.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "benchmarks" / "README.md"
CHART = "images/benchmarks.svg"
TITLE_SOURCE = "benchmarks/README.md"

_RATIO_HEADERS = ("speedup", "ratio", "vs webdataset")
_MEASURE_WORDS = ("samples", "images/s", "documents/s", "mb", "gb/s", "seconds", "time")
_NUMBER = re.compile(r"^[\d,.]+$")


@dataclass
class Bar:
    section: str
    label: str
    ratio: float
    text: str  # the ratio as the README writes it


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _plain(text: str) -> str:
    return re.sub(r"[*`]", "", text).strip()


def _ratio(cell: str) -> float | None:
    match = re.match(r"^\*{0,2}([\d.]+)\s*×", cell.strip())
    return float(match.group(1)) if match else None


def _label(headers: list[str], row: list[str]) -> str:
    """The row's leading cells that say what was measured (up to the first measurement column)."""
    parts = []
    for header, cell in zip(headers, row):
        lowered = header.lower()
        if any(word in lowered for word in _MEASURE_WORDS) or lowered.startswith(("wds", "webdataset")):
            break
        cell = _plain(cell)
        parts.append(f"{header} {cell}" if _NUMBER.match(cell) else cell)
    return " · ".join(parts) or _plain(row[0])


def parse(text: str) -> list[Bar]:
    """The bars: one per wds-versus-webdataset ratio recorded in the README's tables."""
    bars: list[Bar] = []
    section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = _plain(line[3:].split(":")[0])
        is_table = line.startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip())
        if not is_table:
            i += 1
            continue
        headers = [_plain(h) for h in _cells(line)]
        column = next((k for k, h in enumerate(headers) if h.lower() in _RATIO_HEADERS), None)
        i += 2
        while i < len(lines) and lines[i].startswith("|"):
            row = _cells(lines[i])
            i += 1
            if column is None or column >= len(row):
                continue
            ratio = _ratio(row[column])
            per_row = headers[column].lower() != "vs webdataset"  # else: rows are readers, some not wds
            if ratio is not None and (per_row or "wds" in _plain(row[0])):
                bars.append(Bar(section, _label(headers, row), ratio, _plain(row[column])))
    return bars


def _text(x: float, y: float, text: str, size: float = 12, fill: str = "#334", **attrs: str) -> str:
    extra = "".join(f' {key.replace("_", "-")}="{value}"' for key, value in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}"{extra}>{escape(text)}</text>'


def wrapped(label: str, width: int) -> list[str]:
    """``label`` in lines of at most ``width`` characters, broken after spaces and commas (a longer word stays
    whole)."""
    lines: list[str] = []
    for word in label.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def svg(bars: list[Bar]) -> str:
    """A horizontal bar chart of the ratios, grouped by benchmark, with the 1× line marked."""
    if not bars:
        raise ValueError("no wds/webdataset ratios found in the benchmark tables")
    label_w, plot_w, bar_h, pad = 430, 400, 18, 6
    top = max(b.ratio for b in bars)
    scale = plot_w / (int(top) + 1)
    rows: list[str] = []
    y = 56
    section = None
    for bar in bars:
        if bar.section != section:
            section = bar.section
            y += 10
            rows.append(_text(12, y + 12, section, 13, "#223", font_weight="bold"))
            y += bar_h + pad
        lines = wrapped(bar.label, 58)  # whole, on as many lines as it needs: never cut
        y += (len(lines) - 1) * 14
        width = bar.ratio * scale
        colour = "#3b7dd8" if bar.ratio >= 1.0 else "#d86b3b"
        for number, line in enumerate(lines):
            rows.append(_text(label_w - 10, y + 13 - 14 * (len(lines) - 1 - number), line, text_anchor="end"))
        rows.append(f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h}" rx="2" fill="{colour}"/>')
        rows.append(_text(label_w + width + 6, y + 13, bar.text, fill="#223"))
        y += bar_h + pad
    height = y + 30
    ticks = []
    for t in range(int(top) + 2):
        x = label_w + t * scale
        ticks.append(f'<line x1="{x:.1f}" y1="50" x2="{x:.1f}" y2="{height - 26}" stroke="#eee"/>')
        if t % 2 == 0 or top < 6:
            ticks.append(_text(x, height - 10, f"{t}×", 11, "#667", text_anchor="middle"))
    one = label_w + scale
    marker = f'<line x1="{one:.1f}" y1="50" x2="{one:.1f}" y2="{height - 26}" stroke="#c33" stroke-dasharray="4 3"/>'
    total = label_w + plot_w + 60
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="{height}" viewBox="0 0 {total} {height}" '
        'font-family="Helvetica, Arial, sans-serif" role="img" aria-labelledby="t">',
        '<title id="t">wds throughput relative to webdataset 1.0.2, same machine, same run</title>',
        '<rect width="100%" height="100%" fill="#fff"/>',
        _text(12, 26, f"wds relative to webdataset 1.0.2 (same run; 1× = as fast; from {TITLE_SOURCE})", 15, "#223"),
    ]
    return "\n".join([*head, *ticks, *rows, marker, "</svg>"]) + "\n"


def chart(readme: Path = README) -> str:
    return svg(parse(readme.read_text(encoding="utf-8")))


def on_files(files, config):  # noqa: ANN001, ANN201 - MkDocs' hook signature
    from mkdocs.structure.files import File

    files.append(File.generated(config, CHART, content=chart()))
    return files


if __name__ == "__main__":
    sys.stdout.write(chart(Path(sys.argv[1]) if len(sys.argv) > 1 else README))
