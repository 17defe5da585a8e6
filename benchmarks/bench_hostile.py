"""Hostile shards of issue 28, wds against webdataset 1.x in the same run: outcome, seconds, peak RSS growth.

Each case runs in a child process with a 4 GiB address-space limit and a 60 s hang guard, read to the end
with a handler that skips what fails (``warn_and_continue``-like), default limits unless the case says:

* ``pax size -1536``: a 3 KB tar whose pax header gives a negative size;
* ``5 pax headers of 1 GiB``: a ~5 MB ``.tar.gz`` of five 1 GiB pax ``x`` headers before a member;
* ``3 GiB member``: a 3 GiB member inside a ~14 MB ``.tar.gz``, a member after it;
* ``json.gz 400 MB``: a ~390 KB ``.json.gz`` field that inflates to 400 MB, decoded;
* ``msgpack empty lists``: a 20 MB MessagePack field of empty arrays, decoded (wds: ``field_bytes`` 64 MiB
  and the default 1 GiB);
* ``png 13000^2 as rgba``: a 20 KB 1-bit PNG decoded as float RGBA.

    python benchmarks/bench_hostile.py [--dir /tmp/wds-hostile] [--only NAME]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time
import zlib

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/tmp/wds-hostile")
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    cases = make_cases(args.dir)
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


if __name__ == "__main__":
    main()
