"""An object store at real latency, side by side: wds, webdataset 1.0.2, LitData and mosaic-streaming.

Starts moto's S3 server and, in front of it, a proxy shaped like one connection to an object store
(tests/servers.py ``ShapingProxy``: ``--latency`` ms before each response, ``--bandwidth`` MB/s per
connection), both in a process of their own.  The same samples (64 KB of bytes and a label each) are written
in each system's own format -- webdataset tars, LitData ``optimize`` chunks, mosaic-streaming MDS shards, all
16 MB pieces -- and uploaded to the server directly.  Each system then reads them back through the proxy the way
its documentation recommends, in a fresh process per run:

* wds: ``wds_core.WebDataset("s3://...", storage_options=...)``;
* webdataset 1.0.2: presigned ``http://`` URLs (it reads them with ``curl``; it has no S3 client of its own);
* LitData: ``litdata.StreamingDataset("s3://...", storage_options=...)`` (endpoint and keys as its README says;
  its obstore client is allowed plain ``http://``, which the local server speaks);
* mosaic-streaming: ``streaming.StreamingDataset(remote="s3://...", local=...)`` (``S3_ENDPOINT_URL``).

Reported per system: MB/s (over the whole run, and after the first sample: what the reader keeps up once its
workers are started and its first range is in), time from making the dataset to the first sample, RSS growth (the
most the reading process's resident memory grew while reading, sampled every 64 samples), CPU seconds of the
reading process and of the store (moto and the proxy); each run checks it got every sample once with its label.
``--workers 2`` adds a PyTorch ``DataLoader`` with two workers (batches of 64) for each system.

    python benchmarks/bench_objectstore.py [--latency 40] [--bandwidth 40] [--repeats 3] [--workers 2]
        [--moto] [--svg docs/images/objectstore.svg]

The store is a file server answering S3's path-style GET and HEAD (``tests/servers.py`` ``HttpServer``, with
the shape; it checks no signature), or with ``--moto`` moto's S3 behind ``ShapingProxy``: moto reads a whole
object for each range request, which costs it a core at these rates on a 2-core machine, so it measures moto.

The peers are not wds's dependencies: install them beside it (``pip install litdata mosaicml-streaming
webdataset==1.0.2``); a system that is missing is skipped and said so.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NSAMPLES, SAMPLE, PER_SHARD = 4096, 64 << 10, 256
RUN_TIMEOUT = 300  # seconds one reading process may take; longer is reported as a failure (a hang)
KEYS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}


def sample(i: int) -> tuple[bytes, int]:
    return random.Random(i).randbytes(SAMPLE), i % 1000


def write_formats(root: str) -> dict[str, str]:
    """Each system's copy of the samples under ``root``; the folders made, by system."""
    made = {}
    wds_dir = os.path.join(root, "wds")
    if not os.path.exists(wds_dir):
        sys.path.insert(0, REPO)
        from wds_core.tar.tarwrite import encode_member, end_of_archive

        os.makedirs(wds_dir)
        for shard in range(NSAMPLES // PER_SHARD):
            with open(os.path.join(wds_dir, f"shard-{shard:04d}.tar"), "wb") as out:
                for i in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
                    data, label = sample(i)
                    out.write(encode_member(f"{i:06d}.bin", data) + encode_member(f"{i:06d}.cls", str(label).encode()))
                out.write(end_of_archive())
    made["wds"] = wds_dir
    try:
        import litdata

        lit_dir = os.path.join(root, "litdata")
        if not os.path.exists(lit_dir):
            litdata.optimize(fn=_lit_item, inputs=list(range(NSAMPLES)), output_dir=lit_dir, chunk_bytes="16MB",
                             num_workers=1, mode="overwrite")  # fmt: skip
        made["litdata"] = lit_dir
    except ImportError:
        print("# litdata not installed: skipped")
    try:
        from streaming import MDSWriter

        mds_dir = os.path.join(root, "mds")
        if not os.path.exists(mds_dir):
            with MDSWriter(out=mds_dir, columns={"bin": "bytes", "cls": "int"}, size_limit=16 << 20) as writer:
                for i in range(NSAMPLES):
                    data, label = sample(i)
                    writer.write({"bin": data, "cls": label})
        made["mosaic"] = mds_dir
    except ImportError:
        print("# mosaicml-streaming not installed: skipped")
    return made


def _lit_item(i: int) -> dict:
    data, label = sample(i)
    return {"bin": data, "cls": label}


SERVE = """
import sys, logging
sys.path.insert(0, {repo!r})
logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
from tests.servers import HttpServer, Shape, ShapingProxy, free_port
shape = Shape(latency={latency}, bandwidth={bandwidth})
if {moto}:
    from moto.server import ThreadedMotoServer
    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    proxy = ShapingProxy(f"http://127.0.0.1:{{port}}", shape)
    print(f"http://127.0.0.1:{{port}} {{proxy.endpoint}}", flush=True)
else:
    server = HttpServer({root!r}, shape=shape)
    print(f"- {{server.url}}", flush=True)
sys.stdin.read()
"""


def upload(endpoint: str, made: dict[str, str], store: str) -> int:
    """Each system's files into bucket ``bench`` (through moto's S3 API, or as files under the store's root)."""
    if endpoint == "-":
        for system, folder in made.items():
            shutil.rmtree(os.path.join(store, "bench", system), ignore_errors=True)
            shutil.copytree(folder, os.path.join(store, "bench", system))
    else:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **KEYS)
        s3.create_bucket(Bucket="bench")
        for system, folder in made.items():
            for name in sorted(os.listdir(folder)):
                s3.upload_file(os.path.join(folder, name), "bench", f"{system}/{name}")
    return sum(os.path.getsize(os.path.join(made["wds"], name)) for name in os.listdir(made["wds"]))


READ = """
import json, os, sys, time, warnings
warnings.simplefilter("ignore")
sys.path.insert(0, {repo!r})
system, workers, endpoint, urls, cache = {system!r}, {workers}, {endpoint!r}, {urls!r}, {cache!r}
os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                  S3_ENDPOINT_URL=endpoint, AWS_EC2_METADATA_DISABLED="true")
import torch
def rss():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
rss0 = peak = rss()
if system == "wds":
    import wds_core, wds_torch
    options = {{"key": "bench", "secret": "bench", "client_kwargs": {{"endpoint_url": endpoint,
               "region_name": "us-east-1"}}}}
    make = lambda: (wds_torch.WebDataset if workers else wds_core.WebDataset)(
        "s3://bench/wds/shard-{{0000..0015}}.tar", shardshuffle=False, storage_options=options)
    field = lambda s: (s["bin"], int(s["cls"]))
elif system == "webdataset":
    import webdataset
    make = lambda: webdataset.WebDataset(urls, shardshuffle=False, empty_check=False)
    field = lambda s: (s["bin"], int(s["cls"]))
elif system == "litdata":
    import litdata
    import litdata.streaming.downloader as lit_downloader
    # LitData's chunk downloads go through obstore, which refuses plain http unless told: the local server is http
    lit_downloader._OBSTORE_CLIENT_OPTIONS = {{**lit_downloader._OBSTORE_CLIENT_OPTIONS, "allow_http": True}}
    options = {{"endpoint_url": endpoint, "aws_access_key_id": "bench", "aws_secret_access_key": "bench"}}
    make = lambda: litdata.StreamingDataset("s3://bench/litdata", storage_options=options, cache_dir=cache)
    field = lambda s: (s["bin"], int(s["cls"]))
else:
    import streaming
    from streaming.base.util import clean_stale_shared_memory
    clean_stale_shared_memory()
    make = lambda: streaming.StreamingDataset(remote="s3://bench/mosaic", local=cache, shuffle=False, batch_size=64)
    field = lambda s: (s["bin"], int(s["cls"]))
started = time.perf_counter()
cpu0 = os.times()
dataset = make()
first = None
n = nbytes = labels = 0
if workers:
    def collate(batch):  # to the main process: bytes, not the memoryviews LitData hands out
        return [(bytes(data), label) for data, label in map(field, batch)]
    if system == "litdata":
        loader = litdata.StreamingDataLoader(dataset, batch_size=64, num_workers=workers, collate_fn=collate)
    elif system in ("wds", "webdataset"):
        loader = torch.utils.data.DataLoader(dataset.batched(64, collation_fn=collate), batch_size=None,
                                             num_workers=workers)
    else:
        loader = torch.utils.data.DataLoader(dataset, batch_size=64, num_workers=workers, collate_fn=collate)
    items = (item for batch in loader for item in batch)
else:
    items = (field(s) for s in dataset)
for data, label in items:
    if first is None:
        first = time.perf_counter() - started
    n += 1
    if n % 64 == 0:
        peak = max(peak, rss())
    nbytes += len(data)
    labels += label
seconds = time.perf_counter() - started
cpu1 = os.times()
cpu = (cpu1.user + cpu1.system + cpu1.children_user + cpu1.children_system) - sum(cpu0[:4])
print(json.dumps({{"n": n, "bytes": nbytes, "labels": labels, "seconds": seconds, "first": first, "cpu": cpu,
                  "rss_mb": (peak - rss0) / 1e6}}))
"""


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(system: str, workers: int, endpoint: str, urls: list[str], server: int) -> dict:
    cache = tempfile.mkdtemp(prefix=f"bench-{system}-")
    try:
        code = READ.format(repo=REPO, system=system, workers=workers, endpoint=endpoint, urls=urls, cache=cache)
        before = cpu_seconds(server)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT)
        if out.returncode:
            raise RuntimeError(f"{system} failed:\n{out.stderr.strip()[-3000:]}")
        return {**json.loads(out.stdout.strip().splitlines()[-1]), "server_cpu": cpu_seconds(server) - before}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-bench-objectstore")
    parser.add_argument("--latency", type=float, default=40, help="ms before each response")
    parser.add_argument("--bandwidth", type=float, default=40, help="MB/s per connection")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="also read through a DataLoader with this many workers")
    parser.add_argument("--only", default="", help="comma-separated systems to run (wds,webdataset,litdata,mosaic)")
    parser.add_argument("--moto", action="store_true", help="moto's S3 behind a shaping proxy, not a file server")
    parser.add_argument("--svg", default="", help="also draw the table as bars into this SVG file")
    args = parser.parse_args()
    made = write_formats(args.dir)
    store = os.path.join(args.dir, "store")
    os.makedirs(store, exist_ok=True)
    serve = SERVE.format(repo=REPO, latency=args.latency / 1000, bandwidth=args.bandwidth * 1e6, moto=args.moto,
                         root=store)  # fmt: skip
    server = subprocess.Popen([sys.executable, "-c", serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        direct, shaped = server.stdout.readline().split()
        total = upload(direct, made, store)
        import boto3

        signer = boto3.client("s3", endpoint_url=shaped, region_name="us-east-1", **KEYS)
        names = sorted(os.listdir(made["wds"]))
        urls = [
            signer.generate_presigned_url("get_object", Params={"Bucket": "bench", "Key": f"wds/{n}"}) for n in names
        ]
        systems = ["wds", "webdataset"] + [system for system in ("litdata", "mosaic") if system in made]
        if args.only:
            systems = [s for s in systems if s in args.only.split(",")]
        one = _plain_gets(urls, 1)
        sixteen = _plain_gets(urls, 16)
        kind = "moto's S3 behind a shaping proxy" if args.moto else "an S3 path-style file server"
        print(
            f"# {NSAMPLES} samples of {SAMPLE >> 10} KB with labels, {total / 1e6:.0f} MB as webdataset tars; "
            f"{kind}, each response after {args.latency:g} ms at {args.bandwidth:g} MB/s per connection; python "
            f"{sys.version.split()[0]}, {os.cpu_count()} cores; best of {args.repeats}, a fresh process each"
        )
        print(
            f"# plain GETs of the tars: 1 connection {total / one / 1e6:.0f} MB/s, 16 connections "
            f"{total / sixteen / 1e6:.0f} MB/s"
        )
        print("| reader | MB/s | x one connection | after the first sample: MB/s | first sample | peak RSS growth | "
              "CPU s | store's CPU s |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        rows: list[tuple[str, float, float]] = []
        for workers in [0] + ([args.workers] if args.workers else []):
            for system in systems:
                try:
                    runs = [run(system, workers, shaped, urls, server.pid) for _ in range(args.repeats)]
                except (RuntimeError, subprocess.TimeoutExpired) as exn:
                    said = str(exn).splitlines()[-1][:120] if str(exn) else type(exn).__name__
                    print(f"| {label_of(system, workers)} | failed: {said} | | | | | | |")
                    continue
                for result in runs:
                    expected = sum(i % 1000 for i in range(NSAMPLES))
                    assert result["n"] == NSAMPLES and result["labels"] == expected, (system, result)
                best = min(runs, key=lambda r: r["seconds"])
                first = min(r["first"] for r in runs)
                label = label_of(system, workers)
                rate = NSAMPLES * SAMPLE / best["seconds"]
                steady = (NSAMPLES - 1) * SAMPLE / (best["seconds"] - best["first"])  # workers started, first range in
                rows.append((label, rate / 1e6, first))
                print(
                    f"| {label} | {rate / 1e6:.0f} | {rate / (total / one):.1f}x | {steady / 1e6:.0f} | "
                    f"{first:.3f} s | {best['rss_mb']:.0f} MB | {best['cpu']:.1f} | {best['server_cpu']:.1f} |",
                    flush=True,
                )
        if args.svg:
            title = f"{args.latency:g} ms, {args.bandwidth:g} MB/s per connection; 16 plain connections: "
            write_svg(args.svg, rows, title + f"{total / sixteen / 1e6:.0f} MB/s")
    finally:
        server.stdin.close()
        server.wait()


def label_of(system: str, workers: int) -> str:
    return system + (f", DataLoader {workers} workers" if workers else "")


def write_svg(path: str, rows: list[tuple[str, float, float]], title: str) -> None:
    """Two bar panels, MB/s and seconds to the first sample, one bar per reader (no plotting library)."""
    bar, gap, label_w, panel_w = 22, 8, 230, 260
    height = 60 + len(rows) * (bar + gap)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + 2 * panel_w + 60}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="100%" height="100%" fill="white"/><text x="8" y="18" font-weight="bold">{title}</text>',
    ]
    panels = [("MB/s (more is better)", 1, ""), ("first sample (s, less is better)", 2, " s")]
    for panel, (name, index, unit) in enumerate(panels):
        x0 = label_w + panel * (panel_w + 30)
        most = max(row[index] for row in rows) or 1
        parts.append(f'<text x="{x0}" y="40">{name}</text>')
        for i, row in enumerate(rows):
            y = 50 + i * (bar + gap)
            width = panel_w * 0.8 * row[index] / most
            colour = "#2b7bb9" if row[0].startswith("wds") else "#aaaaaa"
            if panel == 0:
                parts.append(f'<text x="8" y="{y + 15}">{row[0]}</text>')
            parts.append(f'<rect x="{x0}" y="{y}" width="{width:.1f}" height="{bar}" fill="{colour}"/>')
            value = f"{row[index]:.0f}" if index == 1 else f"{row[index]:.2f}"
            parts.append(f'<text x="{x0 + width + 4:.1f}" y="{y + 15}">{value}{unit}</text>')
    parts.append("</svg>")
    with open(path, "w") as out:
        out.write("\n".join(parts) + "\n")


def _plain_gets(urls: list[str], connections: int) -> float:
    import concurrent.futures
    import urllib.request

    def fetch(url: str) -> int:
        with urllib.request.urlopen(url) as response:
            return len(response.read())

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(connections) as pool:
        list(pool.map(fetch, urls))
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
