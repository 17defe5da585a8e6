"""What a fresh process pays to import the clients a remote read could stand on, in the same run.

Each module is imported in a new interpreter (``python -c``), timed inside it from before the import to after,
best and median of N runs.  wds reads HTTP(S) with ``http.client`` and signs S3 requests itself when it has the
keys and the endpoint (``wds_core/io/backends/http.py``, ``s3.py``): every DataLoader worker is a process that
pays these imports before its first sample, and the first-sample figure of ``bench_remote.py --shaped`` is
0.05 s.  This is the measurement beside that choice.

    python benchmarks/bench_imports.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

MODULES = ["http.client", "urllib3", "botocore.auth", "botocore.session", "s3fs", "wds_core"]
_CODE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def time_import(module: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _CODE.format(module=module)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, {args.repeats} fresh processes each")
    print("| module | best (s) | median (s) |")
    print("|---|---|---|")
    for module in MODULES:
        try:
            times = [time_import(module) for _ in range(args.repeats)]
        except subprocess.CalledProcessError:
            print(f"| {module} | not installed | |")
            continue
        print(f"| {module} | {min(times):.3f} | {statistics.median(times):.3f} |")


if __name__ == "__main__":
    main()
