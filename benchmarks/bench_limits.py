"""Hostile compressed shards and dead endpoints: memory and time, wds against webdataset 1.x (issue 21).

* ``tar bomb``: a ~1 MB ``.tar.gz`` whose second member inflates to ``--bomb-mb`` MiB of zeros,
  read to the end with a handler that skips what fails; wds with ``limits={"field_bytes": 256 MiB}``.
* ``record bomb``: a ``.cbors.gz`` holding one byte string that inflates to 600 MiB (wds only:
  webdataset reads CBOR shards through the same kind of reader), refused at 64 MiB.
* ``dead endpoint``: an S3 URL whose endpoint refuses connections, ``RetryPolicy(attempts=3,
  initial_delay=0.2)`` (0.6 s of back-off): seconds until the error (wds only: webdataset reads S3
  through a ``pipe:`` command of your choosing).

Each case runs in a child process and reports its peak RSS growth (``ru_maxrss``).

    python benchmarks/bench_limits.py [--dir /tmp/wds-limits] [--bomb-mb 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import zlib

MB = 1 << 20

CHILD = r"""
import json, os, resource, sys, time
which, kind, path = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y", AWS_DEFAULT_REGION="us-east-1",
                  AWS_EC2_METADATA_DISABLED="true")
errors = []
handler = lambda exn: errors.append(f"{type(exn).__name__}: {str(exn)[:160]}") or True
if which == "wds":
    import wds_core as wds
    from wds_core.sources.recordstreams import cbors_to_samples
    from wds_core.io.remote import RetryPolicy
else:
    import webdataset as wds
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
count = 0
try:
    if kind == "tar":
        if which == "wds":
            stage = wds.tarfile_to_samples(handler=handler, limits={"field_bytes": 256 << 20})
        else:
            stage = wds.tarfile_to_samples(handler=handler)
        for _ in wds.DataPipeline(wds.SimpleShardList([path]), stage):
            count += 1
    elif kind == "records":
        stage = cbors_to_samples(handler, limits={"sample_bytes": 64 << 20})
        for _ in wds.DataPipeline(wds.SimpleShardList([path]), stage):
            count += 1
    else:
        retry = RetryPolicy(attempts=3, initial_delay=0.2)
        options = {"endpoint_url": "http://127.0.0.1:9"}
        for _ in wds.WebDataset(path, storage_options=options, retry=retry, shardshuffle=False):
            count += 1
except Exception as exn:
    errors.append(f"{type(exn).__name__}: {str(exn)[:160]}")
seconds = time.perf_counter() - started
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"samples": count, "errors": errors, "seconds": round(seconds, 2), "rss_growth_MB": round(grown)}))
"""


def tar_bomb(path: str, bomb_mb: int) -> str:
    deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        for name, size in (("k0.txt", 4), ("k1.bin", bomb_mb * MB), ("k2.txt", 5)):
            info = tarfile.TarInfo(name)
            info.size = size
            out.write(deflater.compress(info.tobuf(format=tarfile.USTAR_FORMAT)))
            fill = bytes(MB) if size > MB else b"x" * size
            for start in range(0, size, MB):
                out.write(deflater.compress(fill[: min(MB, size - start)]))
            out.write(deflater.compress(bytes(-size % 512)))
        out.write(deflater.compress(bytes(1024)) + deflater.flush())
    return path


def record_bomb(path: str, size: int = 600 * MB) -> str:
    deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        out.write(deflater.compress(b"\x5a" + size.to_bytes(4, "big")))  # a CBOR byte string, 4-byte length
        zeros = bytes(MB)
        for start in range(0, size, MB):
            out.write(deflater.compress(zeros[: min(MB, size - start)]))
        out.write(deflater.flush())
    return path


def run(which: str, kind: str, path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, which, kind, path], capture_output=True, text=True)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/wds-limits")
    parser.add_argument("--bomb-mb", type=int, default=1024)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    bomb = tar_bomb(os.path.join(args.dir, "bomb.tar.gz"), args.bomb_mb)
    records = record_bomb(os.path.join(args.dir, "bomb.cbors.gz"))
    print(f"tar bomb: {os.path.getsize(bomb) / MB:.1f} MB compressed, member of {args.bomb_mb} MiB")
    for which in ("wds", "webdataset"):
        print(f"  tar bomb, {which}:", json.dumps(run(which, "tar", bomb)))
    print(f"record bomb: {os.path.getsize(records) / MB:.1f} MB compressed, one 600 MiB record")
    print("  record bomb, wds:", json.dumps(run("wds", "records", records)))
    print("dead endpoint (connection refused), wds:", json.dumps(run("wds", "dead", "s3://bucket/shard.tar")))


if __name__ == "__main__":
    main()
