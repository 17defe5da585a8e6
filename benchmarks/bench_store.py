"""Object stores at real latency: wds against plain GETs, s3fs, webdataset 1.x and the peers, in the same run.

Sections (``--rows``, all by default), each one table of benchmarks/README.md:

* ``shaped``: 16 shards of 16 MB over HTTP from a local server shaped like an object store (``--latency`` ms
  before each response, ``--bandwidth`` MB/s per connection, ``--stragglers`` of the responses 10x slower;
  tests/servers.py's ``Shape``, in a process of its own): plain concurrent GETs (1, 4, 8, 16 connections), wds one
  range at a time and with its read-ahead window, and webdataset 1.0.2 (curl through a pipe), each with its MB/s
  and time to the first sample, its MB/s after the first shard (the steady state), the requests per GB the server
  counted (all, and after the first shard) and the ranges hedged; ``--interleave 4,16`` adds wds reading K of the
  shards at once;
* ``startup``: a PyTorch DataLoader with 4 and 16 workers over the same shards, wds and webdataset 1.0.2: the
  requests and bytes the server was asked for before the first batch (50 samples), against the batches' bytes;
* ``ratelimit``: 64 readers (4 processes x 16 threads, wds) against a store that admits ``--rate`` requests a
  second and answers 429 with Retry-After, then 503 SlowDown, beyond (``tests/hubserver.py``'s ``LimitedStore``):
  readers failed, samples lost or repeated, requests admitted a second against the rate;
* ``objectstore``: the same samples (64 KB and a label) in each system's own format -- webdataset tars, LitData
  ``optimize`` chunks, mosaic-streaming MDS shards, 16 MB pieces -- read back through the shaped server the way
  each system's documentation shows, a fresh process per run: wds ``s3://`` with ``storage_options``, webdataset
  1.0.2 presigned ``http://`` URLs (curl), LitData ``StreamingDataset("s3://...")``, mosaic-streaming
  ``StreamingDataset(remote="s3://...")``; MB/s, after the first sample, first sample, RSS growth, CPU of the
  reader and of the store; ``--workers 2`` adds a PyTorch DataLoader with two workers; ``--moto`` puts moto's S3
  behind a shaping proxy instead of the file server (moto reads a whole object for each range: it measures moto);
* ``s3``: moto's S3 server on loopback, 8 shards of ~30 MB: a bare s3fs ``cat_file`` of each object, wds over
  ``s3://``, webdataset over presigned URLs, and wds with ``cache_dir`` (first epoch, warm epoch, against the
  local path);
* ``imports``: what a fresh process pays to import the clients a remote read could stand on (``http.client``,
  urllib3, botocore, s3fs, wds_core), each in a new interpreter: every DataLoader worker pays these before its
  first sample.

The peers are not wds's dependencies: ``pip install litdata mosaicml-streaming webdataset==1.0.2``; a system that
is missing is skipped and said so.

    python benchmarks/bench_store.py [--rows shaped,startup,ratelimit,objectstore,s3,imports] [--repeats N]
        [--latency 40] [--rate 50]
        [--bandwidth 40] [--stragglers 0] [--interleave 4,16] [--workers 2] [--only wds,webdataset,litdata,mosaic]
        [--moto] [--svg FILE]
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import harness

from wds_core.tar.tarwrite import encode_member, end_of_archive

S3_SHARDS, S3_PER_SHARD, SAMPLE = 8, 450, 64 << 10


def make_shards(root):
    os.makedirs(root, exist_ok=True)
    paths = []
    for s in range(S3_SHARDS):
        path = f"{root}/remote-{s:04d}.tar"
        if not os.path.exists(path):
            with open(path, "wb") as out:
                for i in range(S3_PER_SHARD):
                    key = f"r{s}_{i:06d}"
                    out.write(encode_member(f"{key}.bin", os.urandom(SAMPLE)))
                    out.write(encode_member(f"{key}.cls", b"%d" % (i % 10)))
                out.write(end_of_archive())
        paths.append(path)
    return paths


def _best(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def count_samples(dataset):
    n = nbytes = 0
    for sample in dataset:
        n += 1
        nbytes += len(sample["bin"])
    return n, nbytes


def shaped(args):
    """One process reading 16 shards of 16 MB over HTTP from a server shaped like an object store."""
    repeats = harness.repeats(args, 3)
    import concurrent.futures
    import functools
    import urllib.request

    import wds_core
    import wds_core.io.storage
    from wds_core.io.remote.readahead import ReadAhead

    root, names, sizes = shaped_shards(args)
    total = sum(sizes)
    latency, bandwidth = args.latency / 1000, args.bandwidth * 1e6
    servers = harness.servers()

    # the server in a process of its own, as a store would be: it does not share the reader's interpreter
    with servers.http_server_process(
        root, servers.Shape(latency=latency, bandwidth=bandwidth, stragglers=args.stragglers)
    ) as base:
        urls = [f"{base}/{n}" for n in names]
        print(f"# {args.stragglers:.0%} of the responses 10x slower")
        print(
            f"# 16 shards, {total / 1e6:.0f} MB over HTTP; each response after {args.latency:g} ms at "
            f"{args.bandwidth:g} MB/s per connection; python {sys.version.split()[0]}, {os.cpu_count()} cores"
        )

        def fetch(url):
            with urllib.request.urlopen(url) as response:
                return len(response.read())

        def gets(connections):
            with concurrent.futures.ThreadPoolExecutor(connections) as pool:
                return sum(pool.map(fetch, urls))

        from wds_core.io.remote.retries import retry_stats

        def read(make):
            before, hedged = asked_of(base), retry_stats()["hedged"]
            started = time.perf_counter()
            first, n, second, opening = None, 0, None, None
            for sample in make():
                n += len(sample["bin"])
                if first is None:
                    first, opening = time.perf_counter() - started, sample["__url__"]
                elif second is None and sample["__url__"] != opening:  # the second shard's first sample
                    second = time.perf_counter() - started
            seconds = time.perf_counter() - started
            steady = (total - sizes[0]) / (seconds - second) if second is not None else None
            asked = requests_per_gb(before, asked_of(base), names, sizes)
            return seconds, first, n, asked, retry_stats()["hedged"] - hedged, steady

        rows = []
        for connections in (1, 4, 8, 16):
            before = asked_of(base)
            seconds, _ = _best(functools.partial(gets, connections), 1)
            label = f"plain GETs, {connections} connection{'s' if connections > 1 else ''}"
            rows.append((label, seconds, None, requests_per_gb(before, asked_of(base), names, sizes), 0, None))
        one = rows[0][1]

        def wds_with(plan):
            return read(lambda: wds_core.WebDataset(urls, storage=wds_core.Storage(read_ahead=plan)))

        for label, plan in [
            ("wds, one 32 MiB range at a time (the old plan)", ReadAhead(32 << 20, 32 << 20, 1, 64 << 20, None, 0)),
            (
                "wds, 256 KiB then 8 x 4 MiB in flight, this shard only",
                ReadAhead(256 << 10, 4 << 20, 8, shards_ahead=0, max_range=4 << 20),
            ),
            (
                "wds, fixed 2 MiB ranges, 64 MiB, 4 shards ahead (the previous default)",
                ReadAhead(budget=64 << 20, max_range=2 << 20, ramp=0, shards_ahead=4),
            ),
            ("wds, the default without hedging", ReadAhead(hedge_after=None)),
            ("wds (default: ranges grow with the link up to 16 MiB, 8 shards ahead)", ReadAhead()),
        ]:
            runs = [wds_with(plan) for _ in range(repeats)]
            seconds, first, n, per_gb, hedged, steady = min(runs)
            assert n == 16 * 256 * SAMPLE, n
            rows.append((label, seconds, first, per_gb, hedged, steady))
        for lanes in args.interleave:  # K shards at once, each lane drawing on the reader's one budget
            make = functools.partial(wds_core.WebDataset, urls, shardshuffle=False, interleave=lanes)
            runs = [read(make) for _ in range(repeats)]
            seconds, first, n, per_gb, hedged, steady = min(runs)
            assert n == 16 * 256 * SAMPLE, n
            rows.append((f"wds, interleave={lanes} (default read-ahead)", seconds, first, per_gb, hedged, steady))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import webdataset
            runs = [read(lambda: webdataset.WebDataset(urls, shardshuffle=False)) for _ in range(repeats)]
            seconds, first, _, per_gb, _, steady = min(runs)
            rows.append(("webdataset 1.0.2 (curl through a pipe)", seconds, first, per_gb, 0, steady))
        except ImportError:
            print("# webdataset not installed; skipped")
    sixteen = rows[3][1]
    print(
        "| reader | MB/s | x one connection | of 16 GETs | after the first shard: MB/s, of 16 GETs "
        "| requests per GB (after the first shard) | hedged | first sample |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, seconds, first, (per_gb, later), hedged, steady in rows:
        shown = "-" if first is None else f"{first:.2f} s"
        after = "-" if steady is None else f"{steady / 1e6:.0f}, {steady / (total / sixteen):.2f}"
        print(
            f"| {label} | {total / seconds / 1e6:.0f} | {one / seconds:.1f}x | {sixteen / seconds:.2f} | {after} "
            f"| {per_gb:.0f} ({later:.0f}) | {hedged} | {shown} |"
        )


def shaped_shards(args) -> tuple[str, list[str], list[int]]:
    """The shaped section's 16 shards of 256 samples of 64 KB (written once): folder, names, sizes."""
    root = os.path.join(args.data, "remote", "shaped")
    os.makedirs(root, exist_ok=True)
    names = []
    for s in range(16):
        name = f"shaped-{s:04d}.tar"
        path = os.path.join(root, name)
        if not os.path.exists(path):
            with open(path, "wb") as out:
                for i in range(256):
                    out.write(encode_member(f"s{s}_{i:05d}.bin", os.urandom(SAMPLE)))
                out.write(end_of_archive())
        names.append(name)
    return root, names, [os.path.getsize(os.path.join(root, n)) for n in names]


STARTUP_BATCH = 50  # samples of 64 KB: a first batch of 3.3 MB


def _first_batch(system: str, urls: list[str], workers: int) -> float:
    """A DataLoader(workers) over ``urls`` read by ``system``, until its first batch: the seconds it took."""
    import torch

    if system == "wds":
        import wds_torch

        dataset = wds_torch.WebDataset(urls)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import webdataset

        dataset = webdataset.WebDataset(urls, shardshuffle=False)
    loader = torch.utils.data.DataLoader(dataset, batch_size=STARTUP_BATCH, num_workers=workers,
                                         collate_fn=lambda samples: len(samples))  # fmt: skip
    started = time.perf_counter()
    stream = iter(loader)
    assert next(stream) == STARTUP_BATCH
    seconds = time.perf_counter() - started
    return seconds


def startup(args) -> None:
    """What a DataLoader(W) asks the store for before its first batch (W = 4, 16): requests and bytes."""
    root, names, sizes = shaped_shards(args)
    servers = harness.servers()
    latency, bandwidth = args.latency / 1000, args.bandwidth * 1e6
    batch = STARTUP_BATCH * (SAMPLE + 512)
    print(f"# a first batch of {STARTUP_BATCH} samples ({batch / 1e6:.1f} MB) from 16 shards of "
          f"{sizes[0] / 1e6:.1f} MB; {args.latency:g} ms and {args.bandwidth:g} MB/s a connection")  # fmt: skip
    print(
        "| reader | workers | requests before the first batch | a worker | MB asked for | x the batches' bytes "
        "| first batch |"
    )
    print("|---|---|---|---|---|---|---|")
    for workers in (4, 16):
        for system in ("wds", "webdataset"):
            if system == "webdataset":
                try:
                    import webdataset  # noqa: F401
                except ImportError:
                    continue
            # a fresh server each run: what it counts before the first batch is this run's alone
            with servers.http_server_process(root, servers.Shape(latency=latency, bandwidth=bandwidth)) as base:
                seconds = _first_batch(system, [f"{base}/{n}" for n in names], workers)
                counted = asked_of(base)
            requests = sum(c[0] for c in counted.values())
            nbytes = sum(c[1] for c in counted.values())
            label = "wds" if system == "wds" else "webdataset 1.0.2 (curl)"
            print(
                f"| {label} | {workers} | {requests} | {requests / workers:.1f} | {nbytes / 1e6:.1f} "
                f"| {nbytes / (workers * batch):.2f} | {seconds:.2f} s |"
            )


RATE_READER = r"""
import json, sys, threading, time
import wds_core
from wds_core.io.remote.retries import retry_stats

base, shards = sys.argv[1], json.loads(sys.argv[2])
keys, errors = [], []

def read(names):
    try:
        for sample in wds_core.WebDataset([f"{base}/{name}" for name in names]):
            keys.append(sample["__key__"])
    except Exception as exn:
        errors.append(f"{type(exn).__name__}: {exn}")

threads = [threading.Thread(target=read, args=(names,)) for names in shards]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
stats = retry_stats()
print(json.dumps({"keys": keys, "errors": errors, "throttled": stats["throttled"],
                  "throttled_s": stats["throttled_s"]}))
"""


def ratelimit(args) -> None:
    """64 readers (4 processes x 16 threads) against a store admitting ``--rate`` requests a second."""
    sys.path.insert(0, harness.REPO)
    from tests.hubserver import LimitedStore

    root = os.path.join(args.data, "remote", "limited")
    os.makedirs(root, exist_ok=True)
    names, expected = [], 0
    for s in range(256):
        name = f"lim-{s:04d}.tar"
        if not os.path.exists(os.path.join(root, name)):
            with open(os.path.join(root, name), "wb") as out:
                for i in range(16):
                    out.write(encode_member(f"l{s}_{i:03d}.bin", os.urandom(SAMPLE)))
                out.write(end_of_archive())
        names.append(name)
        expected += 16
    print(f"# 256 shards of 16 samples of 64 KB; the store admits {args.rate:g} requests a second (1 s windows)")
    print(
        "| store answers beyond the rate | readers failed | samples (of 4,096) | repeated | requests a second "
        "admitted | of the rate | MB/s | requests throttled | seconds waited (summed) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for slowdown in (False, True):
        store = LimitedStore(root, rate=args.rate, slowdown=slowdown)
        try:
            started = time.perf_counter()
            processes = []
            for p in range(4):
                mine = [names[(p * 16 + r) * 4 : (p * 16 + r) * 4 + 4] for r in range(16)]
                processes.append(subprocess.Popen([sys.executable, "-c", RATE_READER, store.url, json.dumps(mine)],
                                                  stdout=subprocess.PIPE, text=True))  # fmt: skip
            outputs = [json.loads(process.communicate()[0]) for process in processes]
            seconds = time.perf_counter() - started
        finally:
            store.stop()
        keys = [k for out in outputs for k in out["keys"]]
        failed = sum(1 for out in outputs for _ in out["errors"])
        admitted = store.window.admitted / seconds
        label = "503 SlowDown (no Retry-After)" if slowdown else "429 with Retry-After"
        print(
            f"| {label} | {failed} | {len(set(keys)):,} | {len(keys) - len(set(keys))} | {admitted:.1f} "
            f"| {admitted / args.rate:.2f} | {store.served / seconds / 1e6:.1f} "
            f"| {sum(o['throttled'] for o in outputs):g} | {sum(o['throttled_s'] for o in outputs):.0f} |"
        )


def asked_of(base: str) -> dict[str, list[int]]:
    """What the shaped server was asked for so far, by path: [requests, bytes] (tests/servers.py's /__stats__)."""
    import urllib.request

    with urllib.request.urlopen(f"{base}/__stats__") as response:
        return json.loads(response.read())


def requests_per_gb(before: dict, after: dict, names: list[str], sizes: list[int]) -> tuple[float, float]:
    """Requests per GB read between two counts, over all shards and over those after the first (steady state)."""
    counts = [after.get(f"/{n}", [0, 0])[0] - before.get(f"/{n}", [0, 0])[0] for n in names]
    return sum(counts) / (sum(sizes) / 1e9), sum(counts[1:]) / (sum(sizes[1:]) / 1e9)


def s3(args):
    """moto's S3 server on loopback: s3fs, wds and webdataset over the same objects, and the shard cache."""
    repeats = harness.repeats(args, 3)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_EC2_METADATA_DISABLED="true")
    import logging

    import s3fs
    from moto.server import ThreadedMotoServer

    import wds_core

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    paths = make_shards(os.path.join(args.data, "remote"))
    total_bytes = sum(os.path.getsize(p) for p in paths)
    port = harness.servers().free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    options = {
        "key": "bench",
        "secret": "bench",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "eu-west-1"},
    }
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("bench")
    for path in paths:
        fs.put_file(path, f"bench/{os.path.basename(path)}")
    names = [os.path.basename(p) for p in paths]
    s3_urls = [f"s3://bench/{n}" for n in names]
    http_urls = [fs.sign(f"bench/{n}", expiration=3600) for n in names]  # presigned: curl needs no keys
    nsamples = S3_SHARDS * S3_PER_SHARD
    print(f"# {S3_SHARDS} shards, {nsamples} samples, {total_bytes / 1e6:.0f} MB; moto S3 server at {endpoint}")
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, best of {repeats}")

    def bare():
        return sum(len(fs.cat_file(f"bench/{n}")) for n in names)

    t_bare, got = _best(bare, repeats)
    assert got == total_bytes
    wds_core.register_storage("s3://bench/", **options)
    t_wds, (n, _) = _best(lambda: count_samples(wds_core.WebDataset(s3_urls)), repeats)
    assert n == nsamples
    results = {"bare s3fs cat_file": t_bare, "wds_core s3://": t_wds}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import webdataset

        def old():
            return count_samples(webdataset.WebDataset(http_urls, shardshuffle=False, empty_check=False))

        t_old, (n_old, _) = _best(old, repeats)
        assert n_old == nsamples, n_old
        results["webdataset 1.0.2 http:// (curl)"] = t_old
    except ImportError:
        print("# webdataset not installed; skipped")

    cache_dir = os.path.join(args.data, "remote", "cache")
    fills = []
    for _ in range(repeats):
        shutil.rmtree(cache_dir, ignore_errors=True)
        start = time.perf_counter()
        count_samples(wds_core.WebDataset(s3_urls, storage=wds_core.Storage(cache=wds_core.ShardCache(cache_dir))))
        fills.append(time.perf_counter() - start)
    results["wds_core s3:// first epoch, filling cache"] = min(fills)
    t_warm, (n, _) = _best(
        lambda: count_samples(
            wds_core.WebDataset(s3_urls, storage=wds_core.Storage(cache=wds_core.ShardCache(cache_dir)))
        ),
        repeats,
    )
    assert n == nsamples
    results["wds_core s3:// warm cache"] = t_warm
    t_local, _ = _best(lambda: count_samples(wds_core.WebDataset(paths)), repeats)
    results["wds_core local path"] = t_local
    server.stop()

    print(f"{'reader':45s} {'seconds':>8s} {'MB/s':>8s} {'samples/s':>10s}")
    for name, seconds in results.items():
        print(f"{name:45s} {seconds:8.3f} {total_bytes / seconds / 1e6:8.1f} {nsamples / seconds:10.0f}")
    print(f"wds s3:// vs bare s3fs: {t_bare / t_wds:.0%} of its rate (target >= 90%)")
    if "webdataset 1.0.2 http:// (curl)" in results:
        print(f"wds s3:// vs webdataset 1.0.2 over curl: {results['webdataset 1.0.2 http:// (curl)'] / t_wds:.2f}x")
    print(f"warm cache vs local path: {t_local / t_warm:.0%} of the local rate (target >= 90%)")


NSAMPLES, SAMPLE, STORE_PER_SHARD = 4096, 64 << 10, 256
RUN_TIMEOUT = 300  # seconds one reading process may take; longer is reported as a failure (a hang)
KEYS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}


def _sample(i: int) -> tuple[bytes, int]:
    return random.Random(i).randbytes(SAMPLE), i % 1000


def write_formats(root: str) -> dict[str, str]:
    """Each system's copy of the samples under ``root``; the folders made, by system."""
    made = {}
    wds_dir = os.path.join(root, "wds")
    if not os.path.exists(wds_dir):
        from wds_core.tar.tarwrite import encode_member, end_of_archive

        os.makedirs(wds_dir)
        for shard in range(NSAMPLES // STORE_PER_SHARD):
            with open(os.path.join(wds_dir, f"shard-{shard:04d}.tar"), "wb") as out:
                for i in range(shard * STORE_PER_SHARD, (shard + 1) * STORE_PER_SHARD):
                    data, label = _sample(i)
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
                    data, label = _sample(i)
                    writer.write({"bin": data, "cls": label})
        made["mosaic"] = mds_dir
    except ImportError:
        print("# mosaicml-streaming not installed: skipped")
    return made


def _lit_item(i: int) -> dict:
    data, label = _sample(i)
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


STORE_READ = """
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


def _store_run(system: str, workers: int, endpoint: str, urls: list[str], server: int) -> dict:
    cache = tempfile.mkdtemp(prefix=f"bench-{system}-")
    try:
        code = STORE_READ.format(
            repo=harness.REPO, system=system, workers=workers, endpoint=endpoint, urls=urls, cache=cache
        )
        before = cpu_seconds(server)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=RUN_TIMEOUT)
        if out.returncode:
            raise RuntimeError(f"{system} failed:\n{out.stderr.strip()[-3000:]}")
        return {**json.loads(out.stdout.strip().splitlines()[-1]), "server_cpu": cpu_seconds(server) - before}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def objectstore(args) -> None:
    repeats = harness.repeats(args, 3)
    made = write_formats(os.path.join(args.data, "objectstore"))
    store = os.path.join(args.data, "objectstore", "store")
    os.makedirs(store, exist_ok=True)
    serve = SERVE.format(repo=harness.REPO, latency=args.latency / 1000, bandwidth=args.bandwidth * 1e6, moto=args.moto,
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
            f"{sys.version.split()[0]}, {os.cpu_count()} cores; best of {repeats}, a fresh process each"
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
                    runs = [_store_run(system, workers, shaped, urls, server.pid) for _ in range(repeats)]
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


MODULES = ["http.client", "urllib3", "botocore.auth", "botocore.session", "s3fs", "wds_core"]
_CODE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"


def time_import(module: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _CODE.format(module=module)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


def imports(args) -> None:
    repeats = harness.repeats(args, 7)
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, {repeats} fresh processes each")
    print("| module | best (s) | median (s) |")
    print("|---|---|---|")
    for module in MODULES:
        try:
            times = [time_import(module) for _ in range(repeats)]
        except subprocess.CalledProcessError:
            print(f"| {module} | not installed | |")
            continue
        print(f"| {module} | {min(times):.3f} | {statistics.median(times):.3f} |")


def options(parser):
    parser.add_argument("--latency", type=float, default=40, help="ms before each response (shaped, objectstore)")
    parser.add_argument("--bandwidth", type=float, default=40, help="MB/s per connection (shaped, objectstore)")
    parser.add_argument("--stragglers", type=float, default=0, help="share of 10x slower responses (shaped)")
    parser.add_argument("--interleave", type=lambda text: [int(k) for k in text.split(",")], default=[],
                        help="also read with WebDataset(..., interleave=K), each K of a list (shaped)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=0, help="also a DataLoader with this many workers (objectstore)")
    parser.add_argument("--only", default="", help="systems to run: wds,webdataset,litdata,mosaic (objectstore)")
    parser.add_argument("--moto", action="store_true", help="moto's S3 behind a shaping proxy (objectstore)")
    parser.add_argument("--svg", default="", help="also draw the objectstore table as bars into this SVG file")
    parser.add_argument("--rate", type=float, default=50, help="requests a second the store admits (ratelimit)")


if __name__ == "__main__":
    harness.run(
        __doc__,
        {"shaped": shaped, "startup": startup, "ratelimit": ratelimit, "objectstore": objectstore, "s3": s3,
         "imports": imports},
        options,
    )  # fmt: skip
