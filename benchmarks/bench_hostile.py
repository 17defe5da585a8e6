"""Hostile inputs: shards, servers and compressed bombs, wds against webdataset 1.x in the same run.

Sections (``--rows``, all by default), each one table of benchmarks/README.md:

* ``shards`` (issue 28): each case in a child process with a 4 GiB address-space limit and a 60 s hang guard,
  read to the end with a handler that skips what fails, default limits unless the case says: a 3 KB tar whose
  pax header gives a negative size; five 1 GiB pax headers in a ~5 MB ``.tar.gz``; a 3 GiB member inside a ~14 MB
  ``.tar.gz``; a ~390 KB ``.json.gz`` that inflates to 400 MB; a 20 MB MessagePack field of empty arrays (wds with
  ``field_bytes`` 64 MiB and the default 1 GiB); a 20 KB 1-bit PNG of 13000^2 decoded as float RGBA.  Outcome,
  samples delivered, first error, seconds, RSS growth (``--only NAME`` runs the cases whose name holds it);
* ``servers`` (issue 43): a server that drips a shard's body (or its headers too) one byte every 0.2 s (wds with
  ``RetryPolicy(attempts=3, budget=3)``, webdataset through curl; each reader stopped after ``--guard`` s); a
  302 to another host with an ``Authorization`` header (whether the other host received it); ``--rounds``
  DataLoaders over decoded batches (``--workers``, ``--batch`` images of 320x240) dropped after 3 batches: worker
  processes that died of a signal and what ``/dev/shm`` kept (``--cases slow,redirect,teardown``);
* ``bombs`` (issue 21): a ~1 MB ``.tar.gz`` whose second member inflates to ``--bomb-mb`` MiB of zeros (wds with
  ``field_bytes`` 256 MiB), a ``.cbors.gz`` record that inflates to 600 MiB (wds only, refused at 64 MiB), and
  an S3 endpoint that refuses connections (``RetryPolicy(attempts=3, initial_delay=0.2)``): peak RSS growth and
  seconds, each in a child process.

Early breaks over a remote server (memory, threads and descriptors per epoch) are ``bench_scale.py --rows soak
--breaks``.

    python benchmarks/bench_hostile.py [--rows shards,servers,bombs] [--only NAME] [--cases slow,redirect,teardown]
        [--rounds 20] [--guard 30] [--bomb-mb 1024]
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
import zlib

import harness

from wds_core.tar.tarwrite import pax_record

MB = 1 << 20
GB = 1 << 30

CHILD = r"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
which, path, decode, limits = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
errors, first = [], []
def handler(exn):
    errors.append(f"{type(exn).__name__}: {str(exn)[:150]}")
    first.append(time.perf_counter())
    return True
if which == "wds":
    import wds_core as wds
    stage = wds.tarfile_to_samples(handler=handler, limits=limits or None)
else:
    import webdataset as wds
    stage = wds.tarfile_to_samples(handler=handler)
stages = [wds.SimpleShardList([path]), stage]
if decode:
    if which == "wds":
        stages.append(wds.decode(*([decode] if decode != "-" else []), handler=handler, limits=limits or None))
    else:
        stages.append(wds.decode(*([decode] if decode != "-" else []), handler=handler))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
first.clear()
keys = []
try:
    for sample in wds.DataPipeline(*stages):
        keys.append(sample["__key__"])
    outcome = "errors" if errors else "read"
except BaseException as exn:
    outcome = "raised"
    errors.append(f"{type(exn).__name__}: {str(exn)[:150]}")
print(json.dumps({"outcome": outcome, "keys": keys, "errors": errors[:3], "n_errors": len(errors),
                  "seconds": time.perf_counter() - started, "first_error": (first[0] - started) if first else None,
                  "grown_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024}))
"""


def header(name: str, size: int | bytes, kind: bytes = b"0") -> bytes:
    block = bytearray(512)
    block[: len(name)] = name.encode()
    block[100:108] = b"0000644\x00"
    block[108:116] = block[116:124] = b"0000000\x00"
    field = size if isinstance(size, bytes) else b"%011o\x00" % size
    block[124:136] = field.ljust(12, b"\x00")[:12]
    block[136:148] = b"00000000000\x00"
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block)


def member(name: str, data: bytes) -> bytes:
    return header(name, len(data)) + data + bytes(-len(data) % 512)


def pax(key: str, value: str) -> bytes:
    """A pax header holding one record ``key=value``."""
    record = pax_record(key, value)
    return header("PaxHeader", len(record), b"x") + record + bytes(-len(record) % 512)


END = bytes(1024)


def gzipped(path: str, parts) -> str:
    deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        for part in parts:
            if isinstance(part, int):  # that many zero bytes
                block = bytes(MB)
                for start in range(0, part, MB):
                    out.write(deflater.compress(block[: min(MB, part - start)]))
            else:
                out.write(deflater.compress(part))
        out.write(deflater.flush())
    return path


def make_cases(root: str) -> dict[str, tuple[str, str, dict]]:
    """name -> (shard path, decode spec or '' for none, wds limits)."""
    os.makedirs(root, exist_ok=True)
    cases: dict[str, tuple[str, str, dict]] = {}
    path = os.path.join(root, "neg.tar")
    with open(path, "wb") as out:
        out.write(member("a.txt", b"x") + pax("size", "-1536") + member("b.txt", b"hello") + END)
    cases["pax size -1536"] = (path, "", {})
    path = os.path.join(root, "pax.tar.gz")
    if not os.path.exists(path):
        parts: list = [member("k0.txt", b"before")]
        for _ in range(5):
            parts += [header("PaxHeader", GB, b"x"), GB]
        parts.append(member("k1.txt", b"described") + member("k2.txt", b"after") + END)
        gzipped(path, parts)
    cases["5 pax headers of 1 GiB"] = (path, "", {})
    path = os.path.join(root, "member.tar.gz")
    if not os.path.exists(path):
        gzipped(path, [member("k0.txt", b"before"), header("k1.bin", 3 * GB), 3 * GB, member("k2.txt", b"after"), END])
    cases["3 GiB member"] = (path, "", {})
    path = os.path.join(root, "json.tar")
    if not os.path.exists(path):
        deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
        body = [deflater.compress(b"[")] + [deflater.compress(b"0," * (MB // 2)) for _ in range(400)]
        data = b"".join(body) + deflater.compress(b"0]") + deflater.flush()
        with open(path, "wb") as out:
            out.write(member("k0.txt", b"a") + member("k1.json.gz", data) + member("k2.txt", b"b") + END)
    cases["json.gz 400 MB"] = (path, "-", {})
    path = os.path.join(root, "msgpack.tar")
    if not os.path.exists(path):
        n = 20_000_000
        data = b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n
        with open(path, "wb") as out:
            out.write(member("k0.txt", b"a") + member("k1.msgpack", data) + member("k2.txt", b"b") + END)
    cases["msgpack empty lists, 64 MiB limit"] = (path, "-", {"field_bytes": 64 * MB})
    cases["msgpack empty lists, default limits"] = (path, "-", {})
    path = os.path.join(root, "png.tar")
    if not os.path.exists(path):
        from PIL import Image

        buffer = io.BytesIO()
        Image.new("1", (13000, 13000)).save(buffer, "PNG")
        with open(path, "wb") as out:
            out.write(member("k0.txt", b"a") + member("k1.png", buffer.getvalue()) + member("k2.txt", b"b") + END)
    cases["png 13000^2 as rgba"] = (path, "rgba", {})
    return cases


def run(which: str, path: str, decode: str, limits: dict) -> dict:
    args = [sys.executable, "-c", CHILD, which, path, decode, json.dumps(limits)]
    started = time.perf_counter()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"outcome": "hung (killed at 60 s)", "seconds": time.perf_counter() - started, "grown_mb": None}
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["?"]
        return {"outcome": f"died ({done.returncode}): {tail[0][:100]}", "seconds": time.perf_counter() - started}
    return json.loads(done.stdout.strip().splitlines()[-1])


def shards(args) -> None:
    cases = make_cases(os.path.join(args.data, "hostile"))
    print("| case | reader | outcome | samples delivered | first error (s) | seconds | RSS growth |")
    print("|---|---|---|---|---|---|---|")
    for name, (path, decode, limits) in cases.items():
        if args.only and args.only not in name:
            continue
        readers = ["wds", "webdataset"] if not limits or "default" in name else ["wds"]
        for which in readers:
            got = run(which, path, decode, limits)
            outcome = got["outcome"]
            if got.get("errors"):
                outcome += f" ({got['n_errors']}): {got['errors'][0][:90]}"
            keys = ", ".join(got.get("keys", [])) or "-"
            grown = "-" if got.get("grown_mb") is None else f"+{got['grown_mb']:,.0f} MB"
            first = "-" if got.get("first_error") is None else f"{got['first_error']:.2f}"
            print(f"| {name} | {which} | {outcome} | {keys} | {first} | {got['seconds']:.1f} | {grown} |", flush=True)


READERS = ["wds", "webdataset"]

READ = r"""
import json, sys, time
which, url, header = sys.argv[1], sys.argv[2], sys.argv[3]
started, keys = time.monotonic(), []
try:
    if which == "wds":
        import wds_core as wds
        from wds_core.io.remote.rangestream import RetryPolicy
        options = {"headers": {"Authorization": header}} if header else {}
        dataset = wds.WebDataset(url, storage_options=options, retry=RetryPolicy(attempts=3, budget=3.0))
    else:
        import webdataset as wds
        command = f"pipe:curl -s -S -f -L {'-H ' + repr('Authorization: ' + header) if header else ''} {url}"
        dataset = wds.WebDataset(command, shardshuffle=False)
    for sample in dataset:
        keys.append(sample["__key__"])
    said = "read"
except BaseException as exn:
    said = f"{type(exn).__name__}: {str(exn)[:160]}"
print(json.dumps({"seconds": time.monotonic() - started, "samples": len(keys), "said": said}))
"""


def read(which: str, url: str, guard: float, header: str = "") -> dict:
    """One reader in a child process, stopped after ``guard`` seconds."""
    try:
        done = subprocess.run([sys.executable, "-c", READ, which, url, header], capture_output=True, text=True,
                              timeout=guard, cwd=harness.REPO)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"seconds": guard, "samples": 0, "said": f"still reading after {guard:g} s (stopped)"}
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {"seconds": 0, "samples": 0, "said": done.stderr[-200:]}


def shard(root: str, name: str = "shard-000.tar", samples: int = 40) -> str:
    harness.servers()  # tests/ on the path
    from tests.conftest import make_samples, write_shard

    os.makedirs(root, exist_ok=True)
    return write_shard(os.path.join(root, name), make_samples("k", samples))


def slow_drip(root: str, guard: float) -> list[tuple[str, str, dict]]:
    HttpServer = harness.servers().HttpServer

    shard(root)
    server = HttpServer(root)
    rows = []
    try:
        for case, head in (("slow drip", False), ("drip headers", True)):
            for which in READERS:
                server.faults.clear()
                server.faults.drip(50, 0.2, head=head)
                rows.append((case, which, read(which, server.url + "/shard-000.tar", guard)))
    finally:
        server.stop()
    return rows


def redirect(root: str, guard: float) -> list[tuple[str, str, dict]]:
    HttpServer = harness.servers().HttpServer

    shard(os.path.join(root, "front"))
    shard(os.path.join(root, "other"))
    front, other = HttpServer(os.path.join(root, "front")), HttpServer(os.path.join(root, "other"))
    front.redirect_to = f"http://localhost:{other.port}"
    rows = []
    try:
        for which in READERS:
            other.headers.clear()
            result = read(which, front.url + "/moved/shard-000.tar", guard, "Bearer TOPSECRET")
            result["other host got the credential"] = any("Authorization" in seen for seen in other.headers)
            rows.append(("redirect", which, result))
    finally:
        front.stop()
        other.stop()
    return rows


TEARDOWN = r"""
import gc, io, json, os, sys
import numpy as np, torch
from PIL import Image
which, root, rounds, batch, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if which == "wds":
    import wds_torch as wds
else:
    import webdataset as wds
spec = os.path.join(root, "s-{0..3}.tar")
if not os.path.exists(os.path.join(root, "s-3.tar")):
    rng = np.random.default_rng(0)
    for s in range(4):
        with wds.TarWriter(os.path.join(root, f"s-{s}.tar")) as sink:
            for i in range(200):
                image = io.BytesIO()
                Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)).save(image, format="JPEG")
                sink.write({"__key__": f"k{s}-{i}", "jpg": image.getvalue(), "cls": i % 10})
died = 0
for _ in range(rounds):
    dataset = wds.WebDataset(spec, shardshuffle=False).decode("rgb8").to_tuple("jpg", "cls").batched(batch)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=True)
    items = iter(loader)
    for _ in range(3):
        next(items)
    procs = list(items._workers)
    del items, loader
    gc.collect()
    for worker in procs:
        worker.join(10)
        died += worker.exitcode is not None and worker.exitcode < 0
shm = [name for name in os.listdir("/dev/shm") if name.startswith("wds_")]
print(json.dumps({"rounds": rounds, "workers died of a signal": died, "/dev/shm left": len(shm)}))
"""


def teardown(root: str, rounds: int, batch: int, workers: int) -> list[tuple[str, str, dict]]:
    os.makedirs(root, exist_ok=True)
    rows = []
    for which in READERS:
        command = [sys.executable, "-c", TEARDOWN, which, root, str(rounds), str(batch), str(workers)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=harness.REPO)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        result = json.loads(lines[-1]) if lines else {"failed": done.stderr[-300:]}
        result["segfault messages"] = done.stderr.lower().count("segmentation fault")
        rows.append(("teardown", which, result))
    return rows


def servers(args) -> None:
    wanted = set(args.cases.split(","))
    READERS[:] = args.readers.split(",")
    rows: list[tuple[str, str, dict]] = []
    started = time.monotonic()
    if "slow" in wanted:
        rows += slow_drip(os.path.join(args.data, "hostile-io", "slow"), args.guard)
    if "redirect" in wanted:
        rows += redirect(os.path.join(args.data, "hostile-io", "redirect"), args.guard)
    if "teardown" in wanted:
        rows += teardown(os.path.join(args.data, "hostile-io", "teardown"), args.rounds, args.batch, args.workers)
    print(f"# python {sys.version.split()[0]}, {os.cpu_count()} cores, {time.monotonic() - started:.0f} s in all")
    print("| case | reader | result |\n|---|---|---|")
    for case, which, result in rows:
        if "seconds" in result:
            result = {**result, "seconds": round(result["seconds"], 1)}
        print(f"| {case} | {which} | {json.dumps(result)} |")


BOMB_CHILD = r"""
import json, os, resource, sys, time
which, kind, path = sys.argv[1], sys.argv[2], sys.argv[3]
os.environ.update(AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y", AWS_DEFAULT_REGION="us-east-1",
                  AWS_EC2_METADATA_DISABLED="true")
errors = []
handler = lambda exn: errors.append(f"{type(exn).__name__}: {str(exn)[:160]}") or True
if which == "wds":
    import wds_core as wds
    from wds_core.sources.recordstreams import cbors_to_samples
    from wds_core.io.remote.rangestream import RetryPolicy
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


def run_bomb(which: str, kind: str, path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", BOMB_CHILD, which, kind, path], capture_output=True, text=True)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout)


def bombs(args) -> None:
    folder = os.path.join(args.data, "limits")
    os.makedirs(folder, exist_ok=True)
    bomb = tar_bomb(os.path.join(folder, "bomb.tar.gz"), args.bomb_mb)
    records = record_bomb(os.path.join(folder, "bomb.cbors.gz"))
    print(f"tar bomb: {os.path.getsize(bomb) / MB:.1f} MB compressed, member of {args.bomb_mb} MiB")
    for which in ("wds", "webdataset"):
        print(f"  tar bomb, {which}:", json.dumps(run_bomb(which, "tar", bomb)))
    print(f"record bomb: {os.path.getsize(records) / MB:.1f} MB compressed, one 600 MiB record")
    print("  record bomb, wds:", json.dumps(run_bomb("wds", "records", records)))
    print("dead endpoint (connection refused), wds:", json.dumps(run_bomb("wds", "dead", "s3://bucket/shard.tar")))


def options(parser):
    parser.add_argument("--only", default=None, help="the shard cases whose name holds this (shards)")
    parser.add_argument("--cases", default="slow,redirect,teardown", help="server cases, comma-separated (servers)")
    parser.add_argument("--rounds", type=int, default=20, help="DataLoaders dropped (servers: teardown)")
    parser.add_argument("--batch", type=int, default=32, help="images a batch (servers: teardown)")
    parser.add_argument("--workers", type=int, default=4, help="DataLoader workers (servers: teardown)")
    parser.add_argument("--readers", default="wds,webdataset", help="which readers run (servers)")
    parser.add_argument("--guard", type=float, default=30.0, help="seconds before a reader is stopped (servers)")
    parser.add_argument("--bomb-mb", type=int, default=1024, help="MiB the tar bomb's member inflates to (bombs)")


if __name__ == "__main__":
    harness.run(__doc__, {"shards": shards, "servers": servers, "bombs": bombs}, options)
