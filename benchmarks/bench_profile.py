"""What leaving :class:`wds_core.Profile` on costs, at over 100,000 samples/s and on a decoding pipeline.

Each pipeline runs in one process, profile off and on in turns (``--rounds`` of each, the order alternating):
best and median of the rates, the median CPU seconds a sample (steadier than the rates on a shared
machine), and the share of the wall time the profile's looks cover (the stages' times are scaled from it to
the rest).  The raw row reads the JPEG shards of ``bench_peers.py`` (made here if they are not there) with
``zero_copy`` and ``to_tuple``, as many times as fill ``--seconds`` (over 150,000 samples/s on this machine);
the bytes row reads them as ``bytes``, the default (60,000-85,000 samples/s here); the decode row decodes them
to uint8 arrays.  A profile
looks every 5 ms for its first two seconds, every 20 ms after: ``--seconds 0.2`` measures the first regime
(what ``wds profile`` runs), ``--seconds 8`` mostly the second (a profile left on).

    python benchmarks/bench_profile.py [--dir /tmp/wds-bench-peers] [--rounds 24] [--seconds 0.2]
        [--rows raw,bytes,decode]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from harness import captioned_photo_shards

import wds_core as wds


def pipeline(where: str, row: str) -> wds.WebDataset:
    if row == "raw":
        return wds.WebDataset(where, shardshuffle=False, zero_copy=True).to_tuple("jpg", "cls")
    if row == "bytes":
        return wds.WebDataset(where, shardshuffle=False).to_tuple("jpg", "cls")
    return wds.WebDataset(where, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls")


def run(where: str, row: str, epochs: int, profiled: bool) -> tuple[float, float, dict | None]:
    """Samples/s, CPU seconds of this process a sample, and the profile's report."""
    dataset = pipeline(where, row)
    count = 0
    started, cpu = time.perf_counter(), time.process_time()
    profile = wds.Profile(dataset).start() if profiled else None
    for _ in range(epochs):
        for _item in dataset:
            count += 1
    if profile is not None:
        profile.stop()
    rate = count / (time.perf_counter() - started)
    return rate, (time.process_time() - cpu) / count, profile.report() if profile is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-bench-peers")
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=0.2, help="how long a run lasts (about)")
    parser.add_argument("--rows", default="raw,bytes,decode", help="comma-separated: raw, bytes, decode")
    args = parser.parse_args()
    where = captioned_photo_shards(args.dir, "imagenet", 2000, 375, 500)  # bench_peers.py's imagenet set
    print(f"# {where}, runs of about {args.seconds:g} s, {args.rounds} runs each way, python {sys.version.split()[0]}")
    print(
        "| row | off: best / median samples/s | on: best / median samples/s | rate lost (medians) "
        "| CPU a sample added (medians) | sampled / wall |"
    )
    print("|---|---|---|---|---|---|")
    for row in [row for row in ("raw", "bytes", "decode") if row in args.rows.split(",")]:
        run(where, row, 1, False)  # warm: imports, page cache
        rate = run(where, row, 1, False)[0]
        epochs = max(1, round(args.seconds * rate / 2000))  # the set holds 2,000 samples
        off, on, sums = [], [], []
        cpu: dict[bool, list[float]] = {False: [], True: []}
        for round_ in range(args.rounds):
            for profiled in (False, True) if round_ % 2 == 0 else (True, False):
                rate, seconds, report = run(where, row, epochs, profiled)
                (on if profiled else off).append(rate)
                cpu[profiled].append(seconds)
                if report is not None:  # the wall time the looks cover (the stages' times are scaled to all of it)
                    sums.append(report["sampled_seconds"] / report["wall_seconds"])
        cost = 1 - statistics.median(on) / statistics.median(off)
        cpu_cost = statistics.median(cpu[True]) / statistics.median(cpu[False]) - 1
        print(f"| {row} | {max(off):,.0f} / {statistics.median(off):,.0f} | {max(on):,.0f} / "
              f"{statistics.median(on):,.0f} | {100 * cost:.1f}% | {100 * cpu_cost:.1f}% | "
              f"{min(sums):.3f}-{max(sums):.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
