"""Hostile input, as an attacker would try it (issue 28): crafted tar headers, decompression and container bombs,
lying image headers.  Every case runs in a child process with an address-space limit and a hang guard, and must
end in a clear error naming the shard (member, offset) with little memory spent, or in the documented behaviour.

Secure mode's cases are in ``tests/core/io/test_secure.py``.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import zlib

import numpy as np
import pytest

from wds_core.tar.tarwrite import pax_record

MB = 1 << 20
HANG_GUARD = 120  # seconds: a case that takes this long hangs (tests do not time what they test)


def run_child(code: str, *args: str, address_space: int = 3 << 30, env: dict | None = None) -> dict:
    """Run ``code`` (which sets ``result``) in a child limited to ``address_space`` bytes; its ``result`` and how
    much its peak RSS grew while the code ran (``grown``)."""
    program = textwrap.dedent(
        """
        import json, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
        import wds_core as wds
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = None
        try:
        {code}
        except Exception as exn:
            result = {{"raised": type(exn).__name__, "error": str(exn)}}
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
        print(json.dumps({{"result": result, "grown": grown}}))
        """
    ).format(limit=address_space, code=textwrap.indent(textwrap.dedent(code), "    "))
    environment = None if env is None else {**os.environ, **env}
    done = subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=HANG_GUARD, env=environment
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- crafted tar headers


def header(name: str, size_field: bytes, kind: bytes = b"0") -> bytes:
    """A ustar header whose size field holds ``size_field`` as it is (12 bytes), with a correct checksum."""
    block = bytearray(512)
    block[0 : len(name)] = name.encode()
    block[100:108] = b"0000644\x00"
    block[108:116] = block[116:124] = b"0000000\x00"
    block[124:136] = size_field.ljust(12, b"\x00")[:12]
    block[136:148] = b"00000000000\x00"
    block[156:157] = kind
    block[257:265] = b"ustar\x0000"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\x00 " % sum(block)
    return bytes(block)


def pax(records: dict[str, str], kind: bytes = b"x") -> bytes:
    """A pax extension header (``x``, or ``g`` for global records) with its records."""
    body = b"".join(pax_record(key, value) for key, value in records.items())
    return header("PaxHeader", b"%011o" % len(body), kind) + body + bytes(-len(body) % 512)


def member(name: str, data: bytes) -> bytes:
    return header(name, b"%011o" % len(data)) + data + bytes(-len(data) % 512)


END = bytes(1024)


def write(path, *parts: bytes) -> str:
    path.write_bytes(b"".join(parts))
    return str(path)


READERS = {
    "WebDataset": "result = [s['__key__'] for s in wds.WebDataset(sys.argv[1])]",
    "WebDataset zero_copy": (
        "result = [s['__key__'] for s in wds.WebDataset(sys.argv[1], reading=wds.ShardReadOptions(zero_copy=True))]"
    ),
    "ShardListDataset": "result = len(wds.ShardListDataset([sys.argv[1]]))",
    "wds ls": "from wds_core.cli.main import main\nresult = {'exit': main(['ls', sys.argv[1]])}",
    "index": "from wds_core.tar import index_shard\nresult = len(index_shard(sys.argv[1], fresh=True))",
    "drop-in": (
        "import wds_core.dropin as webdataset\n"
        "result = [s['__key__'] for s in webdataset.WebDataset(sys.argv[1], shardshuffle=False)]"
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(
    "case",
    ["pax size -1536", "pax size 1_000", "pax size non-ascii digits", "ustar size negative", "ustar size 9s"],
)
def test_crafted_sizes_are_format_errors_for_every_reader(tmp_path, reader, case):
    if case.startswith("pax"):
        value = {"pax size -1536": "-1536", "pax size 1_000": "1_000", "pax size non-ascii digits": "١٢"}[case]
        shard = write(tmp_path / "bad.tar", member("a.txt", b"x"), pax({"size": value}), member("b.txt", b"hello"), END)
        offset = 1024  # the pax header of b.txt
    else:
        field = b"-0000001000\x00" if case == "ustar size negative" else b"00000000099\x00"
        shard = write(tmp_path / "bad.tar", member("a.txt", b"x"), header("b.txt", field), bytes(512), END)
        offset = 1024
    outcome = run_child(READERS[reader], shard, address_space=1 << 30)
    result = outcome["result"]
    if reader == "wds ls":
        assert result == {"exit": 1}, outcome
        return  # its message: tests/core/cli/test_main.py
    assert result["raised"] == "TarFormatError", outcome
    assert "bad.tar" in result["error"] and f"offset {offset}" in result["error"], result
    assert outcome["grown"] < 64 * MB, outcome


@pytest.mark.slow
def test_a_shard_of_big_pax_headers_is_refused_without_reading_them(tmp_path):
    """Five 64 MiB pax headers in a small .tar.gz: refused from their headers (a running total per member)."""
    deflater = zlib.compressobj(1, zlib.DEFLATED, 31)
    parts = [deflater.compress(member("k0.txt", b"before"))]
    for _ in range(5):
        size = 64 * MB
        parts.append(deflater.compress(header("PaxHeader", b"%011o" % size, b"x")))
        for _ in range(size // MB):
            parts.append(deflater.compress(bytes(MB)))
    parts.append(deflater.compress(member("k1.txt", b"described") + member("k2.txt", b"after") + END))
    parts.append(deflater.flush())
    shard = tmp_path / "pax.tar.gz"
    shard.write_bytes(b"".join(parts))
    assert shard.stat().st_size < 2 * MB
    code = """
    errors = []
    stage = wds.tarfile_to_samples(handler=lambda exn: errors.append(str(exn)) or True)
    keys = [s["__key__"] for s in wds.DataPipeline(wds.SimpleShardList([sys.argv[1]]), stage)]
    result = {"keys": keys, "errors": errors}
    """
    outcome = run_child(code, str(shard))
    result = outcome["result"]
    assert result["keys"] == ["k0", "k2"], outcome  # k1 is the member the pax headers describe: refused
    (error,) = result["errors"]  # reported once, at the first header over the limit, before the rest is inflated
    assert "of the member after them hold 67,108,864 bytes" in error and "header_bytes=1,048,576" in error, error
    assert "pax.tar.gz, offset 1024" in error, error
    assert outcome["grown"] < 64 * MB, outcome


def test_extension_headers_over_the_limit_are_reported_before_the_rest_is_read():
    """The first pax header over the limit is reported at once (a 5 MB .tar.gz of five 1 GiB headers took 12 s to
    report, inflating all of them first): in raise mode nothing after it is read."""
    from wds_core import OverLimitError
    from wds_core.fieldcodecs.bounded import DecodeLimits
    from wds_core.tar import iter_members

    big = 8 * MB
    data = member("k0.txt", b"before") + b"".join(
        header("PaxHeader", b"%011o" % big, b"x") + bytes(big) for _ in range(3)
    )
    stream = io.BytesIO(data + member("k1.txt", b"x") + END)
    with pytest.raises(OverLimitError, match="of the member after them") as info:
        for _ in iter_members(stream, "s.tar", limits=DecodeLimits(header_bytes=MB)):
            pass
    assert info.value.offset == 512 + 512 and stream.tell() < 2 * big  # the second and third were never read


@pytest.mark.slow
def test_global_pax_records_are_bounded_together(tmp_path):
    """Many global records each under the field limit: with limits of 1/4 MiB a 213 KB shard used to hold 200 MB."""
    body = []
    for i in range(200):
        body.append(pax({f"k{i}": "v" * (MB - 64)}, kind=b"g"))
    shard = write(tmp_path / "global.tar", member("a.txt", b"x"), *body, member("b.txt", b"y"), END)
    code = """
    errors = []
    stage = wds.tarfile_to_samples(handler=lambda exn: errors.append(str(exn)) or True, limits=json.loads(sys.argv[2]))
    keys = [s["__key__"] for s in wds.DataPipeline(wds.SimpleShardList([sys.argv[1]]), stage)]
    result = {"keys": keys, "errors": errors}
    """
    limits = {"field_bytes": MB, "sample_bytes": 4 * MB, "header_bytes": 4 * MB}
    outcome = run_child(code, shard, json.dumps(limits))
    result = outcome["result"]
    assert result["keys"] == ["a", "b"], outcome  # the global records over the limit are skipped, members go on
    assert len(result["errors"]) == 196 and "global pax records" in result["errors"][0], result["errors"][:2]
    assert outcome["grown"] < 64 * MB, outcome


def test_an_over_limit_member_is_streamed_past_and_the_shard_goes_on(tmp_path):
    deflater = zlib.compressobj(1, zlib.DEFLATED, 31)
    parts = [deflater.compress(member("k0.txt", b"before") + header("k1.bin", b"%011o" % (300 * MB)))]
    for _ in range(300):
        parts.append(deflater.compress(bytes(MB)))
    parts.append(deflater.compress(member("k1.txt", b"same sample") + member("k2.txt", b"after") + END))
    shard = tmp_path / "big.tar.gz"
    shard.write_bytes(b"".join(parts) + deflater.flush())
    code = """
    errors = []
    keep = lambda exn: errors.append(str(exn)) or True
    stage = wds.tarfile_to_samples(handler=keep, limits={"field_bytes": 32 << 20})
    keys = [s["__key__"] for s in wds.DataPipeline(wds.SimpleShardList([sys.argv[1]]), stage)]
    result = {"keys": keys, "errors": errors}
    """
    outcome = run_child(code, str(shard))
    assert outcome["result"]["keys"] == ["k0", "k2"], outcome  # k1 dropped with all its members
    (error,) = outcome["result"]["errors"]
    assert "member 'k1.bin'" in error and "offset 1024" in error and "big.tar.gz" in error
    assert outcome["grown"] < 64 * MB, outcome


@pytest.mark.slow
def test_indexed_access_refuses_an_over_limit_member_of_a_compressed_shard(tmp_path):
    zstd = pytest.importorskip("zstandard")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("k0.bin")
        info.size = 300 * MB
        tar.addfile(info, io.BytesIO(bytes(info.size)))
        info = tarfile.TarInfo("k1.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    shard = tmp_path / "big.tar.zst"
    shard.write_bytes(zstd.ZstdCompressor(level=1).compress(raw.getvalue()))
    del raw
    code = """
    ds = wds.ShardListDataset([sys.argv[1]], cache_dir=sys.argv[2], limits={"field_bytes": 32 << 20})
    result = {"n": len(ds), "second": ds[1]["txt"].decode()}
    try:
        ds[0]
    except wds.OverLimitError as exn:
        result["error"] = str(exn)
    """
    outcome = run_child(code, str(shard), str(tmp_path / "cache"))
    result = outcome["result"]
    assert result["n"] == 2 and result["second"] == "ok", outcome
    assert "member 'k0.bin'" in result["error"] and "offset 0" in result["error"] and "big.tar.zst" in result["error"]
    assert outcome["grown"] < 64 * MB, outcome


def test_a_sidecar_index_that_lies_is_refused(tmp_path):
    import wds_core as wds
    from wds_core.errors import TarFormatError

    shard = write(tmp_path / "s.tar", member("a.txt", b"x"), END)
    for rows in ([["a.txt", 0, 512, -5]], [["a.txt", 0, 512, 1 << 40]], [["a.txt", 0, 0, 1]]):
        (tmp_path / "s.tar.idx").write_text(json.dumps({"format": "wds-index-1", "size": 2048, "members": rows}))
        with pytest.raises(TarFormatError, match="not a usable shard index"):
            wds.ShardListDataset([shard])[0]


# ---------------------------------------------------------------- decoding


def empty_arrays(kind: str, count: int) -> bytes:
    if kind == "msgpack":
        return b"\xdd" + count.to_bytes(4, "big") + b"\x90" * count
    if kind == "cbor":
        return b"\x9a" + count.to_bytes(4, "big") + b"\x80" * count
    return b"[" + b",".join([b"[]"] * count) + b"]"


DECODE = """
import wds_core as wds
limits = json.loads(sys.argv[2])
errors = []
keep = lambda e: errors.append(str(e)) or True
ds = wds.WebDataset(sys.argv[1]).decode(limits=limits, handler=keep)
result = {"keys": [s["__key__"] for s in ds], "errors": errors}
"""


def shard_with(tmp_path, field: str, data: bytes) -> str:
    return write(tmp_path / "d.tar", member("k0.txt", b"a"), member(f"k1.{field}", data), member("k2.txt", b"b"), END)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["msgpack", "cbor", "json"])
@pytest.mark.parametrize("gz", [False, True])
def test_containers_count_toward_the_field_limit(tmp_path, kind, gz):
    data = empty_arrays(kind, 20_000_000 if kind != "json" else 7_000_000)  # 20 MB / 21 MB
    field = kind + (".gz" if gz else "")
    if gz:
        data = gzip.compress(data, 6)
    shard = shard_with(tmp_path, field, data)
    outcome = run_child(DECODE, shard, json.dumps({"field_bytes": 64 * MB}), address_space=2 << 30)
    result = outcome["result"]
    assert result["keys"] == ["k0", "k2"], outcome
    (error,) = result["errors"]
    assert f"k1.{field}" in error or f"'{field}'" in error, error
    assert "field_bytes=67,108,864" in error or "expansion=" in error, error
    assert outcome["grown"] < 256 * MB, outcome


@pytest.mark.slow
def test_a_json_gz_inflating_to_400_mb_is_refused_under_the_default_limits(tmp_path):
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [deflater.compress(b"[")]
    block = b"0," * (MB // 2)
    for _ in range(400):
        parts.append(deflater.compress(block))
    parts.append(deflater.compress(b"0]") + deflater.flush())
    data = b"".join(parts)
    assert len(data) < 1 * MB
    shard = shard_with(tmp_path, "json.gz", data)
    outcome = run_child(DECODE, shard, "{}")
    (error,) = outcome["result"]["errors"]
    assert "inflates to more than" in error and "expansion=" in error, error
    assert outcome["result"]["keys"] == ["k0", "k2"]
    assert outcome["grown"] < 256 * MB, outcome


def test_npz_members_that_are_not_arrays_count_too(tmp_path):
    buffer = io.BytesIO()
    import zipfile

    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for i in range(40):
            archive.writestr(f"junk{i}.bin", bytes(MB))
    shard = shard_with(tmp_path, "npz", buffer.getvalue())
    outcome = run_child(DECODE, shard, json.dumps({"field_bytes": MB, "sample_bytes": 4 * MB}))
    (error,) = outcome["result"]["errors"]
    assert "the 40 members of the .npz" in error, error
    assert outcome["grown"] < 32 * MB, outcome


def png_of(size: int, mode: str = "1") -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, (size, size)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["rgba", "rgba8", "torchrgba"])
def test_image_limits_count_the_output_channels_and_values(tmp_path, spec):
    data = png_of(13000)  # 1-bit: ~20 KB that decode to 13000 x 13000 x 4 values
    assert len(data) < 100_000
    shard = shard_with(tmp_path, "png", data)
    code = DECODE.replace(".decode(limits=", f".decode({spec!r}, limits=")
    if spec.startswith("torch"):
        pytest.importorskip("torch")
        code = "import wds_torch\n" + code
    outcome = run_child(code, shard, json.dumps({"field_bytes": 512 * MB}))
    (error,) = outcome["result"]["errors"]
    bytes_per_value = 4 if spec in ("rgba", "torchrgba") else 1
    assert f"{13000 * 13000 * 4 * bytes_per_value:,} bytes" in error and "13000x13000x4" in error, error
    assert outcome["grown"] < 64 * MB, outcome


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["simplejpeg", "pillow"])
@pytest.mark.parametrize("spec", ["rgb8", "pil"])
def test_a_large_jpeg_is_checked_on_every_decoding_path(tmp_path, decoder, spec):
    if decoder == "simplejpeg":
        pytest.importorskip("simplejpeg")
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (9000, 9000), (90, 120, 200)).save(out, "JPEG", quality=50)
    shard = shard_with(tmp_path, "jpg", out.getvalue())
    code = f"from wds_core.fieldcodecs.jpeg import set_jpeg_decoder\nset_jpeg_decoder({decoder!r})\n" + DECODE
    code = code.replace(".decode(limits=", f".decode({spec!r}, limits=")
    outcome = run_child(code, shard, json.dumps({"field_bytes": 64 * MB}))
    (error,) = outcome["result"]["errors"]
    if decoder == "simplejpeg" and spec == "rgb8":
        assert "9000x9000x3" in error and "243,000,000 bytes" in error, error
    else:  # Pillow holds RGB in 4 bytes a pixel
        assert "9000x9000x4" in error and "324,000,000 bytes" in error, error
    assert outcome["grown"] < 64 * MB, outcome


@pytest.mark.slow
def test_crop_images_checks_the_size_it_decodes(tmp_path):
    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (12000, 12000)).save(out, "PNG")
    shard = shard_with(tmp_path, "png", out.getvalue())
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"decode_limits": {"field_bytes": 256 * MB}}))
    code = """
    errors = []
    keep = lambda e: errors.append(str(e)) or True
    ds = wds.WebDataset(sys.argv[1]).crop_images(224, handler=keep)
    result = {"keys": [s["__key__"] for s in ds], "errors": errors}
    """
    outcome = run_child(code, shard, env={"WDS_CONFIG": str(config)})
    (error,) = outcome["result"]["errors"]
    assert "12000x12000x4" in error and "field_bytes=268,435,456" in error, error  # Pillow's RGB buffer
    assert outcome["result"]["keys"] == ["k0", "k2"]
    assert outcome["grown"] < 64 * MB, outcome


def test_audio_and_video_headers_are_checked_before_decoding(tmp_path):
    pytest.importorskip("soundfile")
    import soundfile

    out = io.BytesIO()
    soundfile.write(out, np.zeros((48_000 * 60, 2), np.float32), 48_000, format="FLAC")  # a minute of silence
    shard = shard_with(tmp_path, "flac", out.getvalue())
    code = DECODE.replace(".decode(limits=", ".decode(wds.AudioHandler(), limits=")
    outcome = run_child(code, shard, json.dumps({"field_bytes": 8 * MB}))
    (error,) = outcome["result"]["errors"]
    assert "2,880,000 frames x 2 channels of float32" in error and "field_bytes=8,388,608" in error, error
