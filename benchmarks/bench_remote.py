"""Streaming shards from a local S3 server (moto, loopback), and from the shard cache, in one run.

Starts moto's S3 server on 127.0.0.1, uploads a generated dataset (8 shards of
~30 MB, 64 KB samples), then reports the best of N repeats for

* a bare s3fs read of the same objects (``cat_file`` of each whole object),
* ``wds_core.WebDataset`` over the ``s3://`` URLs (every sample, no cache),
* webdataset 1.0.2 over the same objects as presigned ``http://`` URLs (it
  reads them with ``curl``; it has no ``s3://`` support of its own),
* ``wds_core.WebDataset`` with ``cache_dir``: the first epoch (fills the
  cache) and a warm epoch, against reading the same shards from a local path.

    python benchmarks/bench_remote.py [--dir /tmp/wds-bench-remote] [--repeats 3]

With ``--shaped`` it reads 16 shards of 16 MB over HTTP from a local server shaped like an object store
(``--latency`` ms before each response, ``--bandwidth`` MB/s per connection; tests/servers.py's ``Shape``):
plain concurrent GETs (1, 4, 8, 16 connections), wds one range at a time and with its read-ahead window, and
webdataset 1.0.2 (curl through a pipe), each with its MB/s and time to the first sample; ``--interleave 4,16``
adds wds reading K of the shards at once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import time
import warnings

from wds_core.tar.tarwrite import encode_member, end_of_archive

NSHARDS, PER_SHARD, SAMPLE = 8, 450, 64 << 10


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_shards(root):
    os.makedirs(root, exist_ok=True)
    paths = []
    for s in range(NSHARDS):
        path = f"{root}/remote-{s:04d}.tar"
        if not os.path.exists(path):
            with open(path, "wb") as out:
                for i in range(PER_SHARD):
                    key = f"r{s}_{i:06d}"
                    out.write(encode_member(f"{key}.bin", os.urandom(SAMPLE)))
                    out.write(encode_member(f"{key}.cls", b"%d" % (i % 10)))
                out.write(end_of_archive())
        paths.append(path)
    return paths


def best(fn, repeats):
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
    import concurrent.futures
    import functools
    import urllib.request

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    import wds_core
    import wds_core.io.storage
    from wds_core.io.readahead import ReadAhead

    root = os.path.join(args.dir, "shaped")
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
    total = sum(os.path.getsize(os.path.join(root, n)) for n in names)
    latency, bandwidth = args.latency / 1000, args.bandwidth * 1e6
    sys.path.insert(0, repo)
    from tests.servers import Shape, http_server_process

    # the server in a process of its own, as a store would be: it does not share the reader's interpreter
    with http_server_process(root, Shape(latency=latency, bandwidth=bandwidth, stragglers=args.stragglers)) as base:
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

        def read(make):
            started = time.perf_counter()
            first, n = None, 0
            for sample in make():
                n += len(sample["bin"])
                if first is None:
                    first = time.perf_counter() - started
            return time.perf_counter() - started, first, n

        rows = []
        for connections in (1, 4, 8, 16):
            seconds, _ = best(functools.partial(gets, connections), 1)
            rows.append((f"plain GETs, {connections} connection{'s' if connections > 1 else ''}", seconds, None))
        one = rows[0][1]

        def wds_with(plan):
            return read(lambda: wds_core.WebDataset(urls, shardshuffle=False, read_ahead=plan))

        for label, plan in [
            ("wds, one 32 MiB range at a time (the old plan)", ReadAhead(32 << 20, 32 << 20, 1, 64 << 20, None, 0)),
            (
                "wds, 256 KiB then 8 x 4 MiB in flight, this shard only",
                ReadAhead(256 << 10, 4 << 20, 8, shards_ahead=0),
            ),
            ("wds, the default without hedging", ReadAhead(hedge_after=None)),
            ("wds (default: 256 KiB, then 2 MiB ranges, 24 in flight, 4 shards ahead)", ReadAhead()),
        ]:
            runs = [wds_with(plan) for _ in range(args.repeats)]
            seconds, first, n = min(runs)
            assert n == 16 * 256 * SAMPLE, n
            rows.append((label, seconds, first))
        for lanes in args.interleave:  # K shards at once, each lane drawing on the reader's one budget
            make = functools.partial(wds_core.WebDataset, urls, shardshuffle=False, interleave=lanes)
            runs = [read(make) for _ in range(args.repeats)]
            seconds, first, n = min(runs)
            assert n == 16 * 256 * SAMPLE, n
            rows.append((f"wds, interleave={lanes} (default read-ahead)", seconds, first))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import webdataset
            runs = [read(lambda: webdataset.WebDataset(urls, shardshuffle=False)) for _ in range(args.repeats)]
            rows.append(("webdataset 1.0.2 (curl through a pipe)", *min(runs)[:2]))
        except ImportError:
            print("# webdataset not installed; skipped")
    print("| reader | MB/s | x one connection | first sample |")
    print("|---|---|---|---|")
    for label, seconds, first in rows:
        shown = "-" if first is None else f"{first:.2f} s"
        print(f"| {label} | {total / seconds / 1e6:.0f} | {one / seconds:.1f}x | {shown} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/wds-bench-remote")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shaped", action="store_true", help="the shaped HTTP server instead of moto")
    parser.add_argument("--latency", type=float, default=40, help="ms before each response (--shaped)")
    parser.add_argument("--bandwidth", type=float, default=40, help="MB/s per connection (--shaped)")
    parser.add_argument("--stragglers", type=float, default=0, help="share of 10x slower responses (--shaped)")
    parser.add_argument("--interleave", type=lambda text: [int(k) for k in text.split(",")], default=[],
                        help="also read with WebDataset(..., interleave=K), each K of a list (--shaped)")  # fmt: skip
    args = parser.parse_args()
    if args.shaped:
        shaped(args)
        return
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_EC2_METADATA_DISABLED="true")
    import logging

    import s3fs
    from moto.server import ThreadedMotoServer

    import wds_core

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    paths = make_shards(args.dir)
    total_bytes = sum(os.path.getsize(p) for p in paths)
    port = free_port()
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
    nsamples = NSHARDS * PER_SHARD
    print(f"# {NSHARDS} shards, {nsamples} samples, {total_bytes / 1e6:.0f} MB; moto S3 server at {endpoint}")
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, best of {args.repeats}")

    def bare():
        return sum(len(fs.cat_file(f"bench/{n}")) for n in names)

    t_bare, got = best(bare, args.repeats)
    assert got == total_bytes
    wds_core.register_storage("s3://bench/", **options)
    t_wds, (n, _) = best(lambda: count_samples(wds_core.WebDataset(s3_urls, shardshuffle=False)), args.repeats)
    assert n == nsamples
    results = {"bare s3fs cat_file": t_bare, "wds_core s3://": t_wds}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import webdataset

        def old():
            return count_samples(webdataset.WebDataset(http_urls, shardshuffle=False, empty_check=False))

        t_old, (n_old, _) = best(old, args.repeats)
        assert n_old == nsamples, n_old
        results["webdataset 1.0.2 http:// (curl)"] = t_old
    except ImportError:
        print("# webdataset not installed; skipped")

    cache_dir = os.path.join(args.dir, "cache")
    fills = []
    for _ in range(args.repeats):
        shutil.rmtree(cache_dir, ignore_errors=True)
        start = time.perf_counter()
        count_samples(wds_core.WebDataset(s3_urls, shardshuffle=False, cache_dir=cache_dir))
        fills.append(time.perf_counter() - start)
    results["wds_core s3:// first epoch, filling cache"] = min(fills)
    t_warm, (n, _) = best(
        lambda: count_samples(wds_core.WebDataset(s3_urls, shardshuffle=False, cache_dir=cache_dir)), args.repeats
    )
    assert n == nsamples
    results["wds_core s3:// warm cache"] = t_warm
    t_local, _ = best(lambda: count_samples(wds_core.WebDataset(paths, shardshuffle=False)), args.repeats)
    results["wds_core local path"] = t_local
    server.stop()

    print(f"{'reader':45s} {'seconds':>8s} {'MB/s':>8s} {'samples/s':>10s}")
    for name, seconds in results.items():
        print(f"{name:45s} {seconds:8.3f} {total_bytes / seconds / 1e6:8.1f} {nsamples / seconds:10.0f}")
    print(f"wds s3:// vs bare s3fs: {t_bare / t_wds:.0%} of its rate (target >= 90%)")
    if "webdataset 1.0.2 http:// (curl)" in results:
        print(f"wds s3:// vs webdataset 1.0.2 over curl: {results['webdataset 1.0.2 http:// (curl)'] / t_wds:.2f}x")
    print(f"warm cache vs local path: {t_local / t_warm:.0%} of the local rate (target >= 90%)")


if __name__ == "__main__":
    main()
