"""How start-up, requests and memory grow with the number of shards: measured, extrapolated, plotted.

Measures, each point in a fresh process (``bench_scale.py``'s probes and fake store):

* a balanced reader's seconds to its first sample (``sample_counts=`` a descriptor with file sizes,
  or the counts file, ``.idx`` sidecars beside the shards, 64 ranks x 8 workers, reader 300), and its
  requests;
* resident memory added by a shuffled shard list until the first shard of reader 511 of 512
  (wds: positions of a lazy list; webdataset 1.x: the list of names, up to 1M shards);

fits each series with a line in the number of shards, and writes ``docs/images/scale.svg``
(three log-log panels: requests of all 512 readers before their first samples, seconds to a
reader's first sample, memory per process) with the measured points and the fits out to 10M.
No plotting library is needed: the SVG is written here.

    python benchmarks/plot_scale.py [--out docs/images/scale.svg]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_scale import probe  # noqa: E402

READER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[2])
from tests import synthstore
import wds_core
n, counts = int(sys.argv[1]), sys.argv[3]
store = synthstore.install(n, filesizes=True, sidecars=True)
os.environ.update(RANK="37", WORLD_SIZE="64", WORKER="4", NUM_WORKERS="8")
start = time.perf_counter()
dataset = wds_core.WebDataset(
    f"synth://bucket/shard-{{000000..{n - 1:06d}}}.tar", shardshuffle=True, seed=1, balanced="pad",
    sample_counts=f"synth://bucket/{counts}",
)
next(iter(dataset))
print(json.dumps({"seconds": time.perf_counter() - start, "requests": sum(store.requests.values())}))
"""


def reader(n: int, counts: str) -> dict:
    root = os.path.dirname(HERE)
    command = [sys.executable, "-c", READER, str(n), root, counts]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares ``y = a + b x``."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    b = sum((x - mx) * (y - my) for x, y in points) / max(sum((x - mx) ** 2 for x, _ in points), 1e-12)
    return my - b * mx, b


class Panel:
    """One log-log chart of an SVG: ``series`` of measured points (dots) and fitted lines (dashes)."""

    def __init__(self, x0: float, title: str, ylabel: str, xs: tuple[float, float], ys: tuple[float, float]) -> None:
        self.x0, self.title, self.ylabel, self.xs, self.ys = x0, title, ylabel, xs, ys
        self.w, self.h, self.top, self.left = 300, 230, 40, 60
        self.parts: list[str] = []

    def px(self, x: float, y: float) -> tuple[float, float]:
        fx = (math.log10(x) - math.log10(self.xs[0])) / (math.log10(self.xs[1]) - math.log10(self.xs[0]))
        fy = (math.log10(max(y, self.ys[0])) - math.log10(self.ys[0])) / (
            math.log10(self.ys[1]) - math.log10(self.ys[0])
        )
        return self.x0 + self.left + fx * self.w, self.top + self.h - fy * self.h

    def axes(self) -> None:
        x, y = self.x0 + self.left, self.top
        self.parts.append(f'<rect x="{x}" y="{y}" width="{self.w}" height="{self.h}" fill="none" stroke="#999"/>')
        self.parts.append(f'<text x="{x + self.w / 2}" y="{y - 14}" text-anchor="middle" font-weight="bold">')
        self.parts.append(f"{self.title}</text>")
        for e in range(round(math.log10(self.xs[0])), round(math.log10(self.xs[1])) + 1):
            px, _ = self.px(10**e, self.ys[0])
            self.parts.append(f'<line x1="{px}" y1="{y}" x2="{px}" y2="{y + self.h}" stroke="#eee"/>')
            self.parts.append(f'<text x="{px}" y="{y + self.h + 16}" text-anchor="middle">1e{e}</text>')
        for e in range(round(math.log10(self.ys[0])), round(math.log10(self.ys[1])) + 1):
            _, py = self.px(self.xs[0], 10**e)
            self.parts.append(f'<line x1="{x}" y1="{py}" x2="{x + self.w}" y2="{py}" stroke="#eee"/>')
            self.parts.append(f'<text x="{x - 6}" y="{py + 4}" text-anchor="end">1e{e}</text>')
        self.parts.append(f'<text x="{x + self.w / 2}" y="{y + self.h + 34}" text-anchor="middle">shards</text>')
        self.parts.append(
            f'<text x="{self.x0 + 14}" y="{y + self.h / 2}" text-anchor="middle" '
            f'transform="rotate(-90 {self.x0 + 14} {y + self.h / 2})">{self.ylabel}</text>'
        )

    def series(self, label: str, colour: str, points: list[tuple[float, float]], line: tuple[float, float]) -> None:
        a, b = line
        xs = [self.xs[0] * (self.xs[1] / self.xs[0]) ** (i / 60) for i in range(61)]
        path = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(
            self.px(v, a + b * v) for v in xs
        ))  # fmt: skip
        self.parts.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-dasharray="5,3"/>')
        for x, y in points:
            cx, cy = self.px(x, y)
            self.parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3.5" fill="{colour}"/>')
        n = sum(1 for p in self.parts if p.startswith("<text class"))
        lx, ly = self.x0 + self.left + 8, self.top + 16 + 15 * n
        self.parts.append(f'<text class="key" x="{lx}" y="{ly}" fill="{colour}">{label}</text>')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "docs", "images", "scale.svg"))
    args = parser.parse_args()
    readers, compact = {}, {}
    for n in (10_000, 30_000, 100_000, 300_000):
        readers[n] = min((reader(n, "dataset.json") for _ in range(2)), key=lambda r: r["seconds"])
        print(f"descriptor, {n:,} shards: {readers[n]['seconds']:.2f} s, {readers[n]['requests']} requests")
    for n in (10_000, 100_000, 1_000_000, 10_000_000):
        compact[n] = min((reader(n, "dataset.counts.npz") for _ in range(2)), key=lambda r: r["seconds"])
        print(f"counts file, {n:,} shards: {compact[n]['seconds']:.2f} s, {compact[n]['requests']} requests")
    memory = {n: probe("first-shuffled", "wds", n)["mb"] for n in (100_000, 1_000_000, 10_000_000)}
    old = {n: probe("build", "webdataset", n)["mb"] for n in (100_000, 1_000_000)}
    for n in memory:
        print(f"shuffled list to the first shard, {n:,} shards: wds +{memory[n]:.0f} MB", end="")
        print(f", webdataset 1.x build +{old[n]:.0f} MB" if n in old else "")

    width, height = 1150, 330
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>']  # fmt: skip
    span = (1e3, 1e7)
    requests = Panel(0, "requests before the first samples, 512 readers", "requests", span, (1e2, 1e11))
    requests.axes()
    per_reader = readers[max(readers)]["requests"]
    requests.series("descriptor + sidecars (measured)", "#1b7837", [(n, 512 * r["requests"]) for n, r in
                    readers.items()], (512 * per_reader, 0))  # fmt: skip
    requests.series("no counts: 3 per shard per reader", "#b2182b", [(2_000, 512 * 6_001)], (0, 512 * 3))
    startup = Panel(380, "seconds to a reader's first sample", "seconds", span, (1e-2, 1e3))
    startup.axes()
    points = [(n, r["seconds"]) for n, r in readers.items()]
    startup.series("descriptor (JSON) + sidecars", "#b2182b", points, fit(points))
    compact_points = [(n, r["seconds"]) for n, r in compact.items()]
    startup.series("counts file + sidecars", "#1b7837", compact_points, fit(compact_points))
    mem = Panel(760, "memory per process, shuffled list", "MB", span, (1e-1, 1e4))
    mem.axes()
    wds_points = [(n, max(m, 0.1)) for n, m in memory.items()]
    mem.series("wds (positions, 4 B a shard)", "#1b7837", wds_points, fit(wds_points))
    old_points = list(old.items())
    mem.series("webdataset 1.x (names)", "#b2182b", old_points, fit(old_points))
    for panel in (requests, startup, mem):
        parts += panel.parts
    parts.append("</svg>")
    with open(args.out, "w") as out:
        out.write("\n".join(parts) + "\n")
    for label, series in (("descriptor", points), ("counts file", compact_points)):
        a, b = fit(series)
        print(f"start-up fit, {label}: {a:.3f} s + {b * 1e6:.2f} s per million shards; at 1M {a + b * 1e6:.1f} s, "
              f"at 10M {a + b * 1e7:.1f} s")  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
