"""Bounded decoding (issue 21): bombs and lying headers are refused before the memory is spent."""

import gzip
import io
import json
import subprocess
import sys
import zlib

import numpy as np
import pytest

import wds_core as wds
from wds_core import DecodingError
from wds_core.fieldcodecs.bounded import DecodeLimits, bounded_gunzip

MB = 1 << 20


def bomb(nbytes, prefix=b"[", fill=b"0,"):
    """gzip data inflating to about ``nbytes`` (a JSON list of zeros), made without holding it."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [deflater.compress(prefix)]
    block = fill * (MB // len(fill))
    for _ in range(nbytes // len(block)):
        out.append(deflater.compress(block))
    out.append(deflater.compress(b"0]") + deflater.flush())
    return b"".join(out)


def shard_of(path, fields):
    with wds.TarWriter(str(path), encoder=False) as sink:
        sink.write({"__key__": "k0", "txt": b"fine"})
        sink.write({"__key__": "k1", **fields})
        sink.write({"__key__": "k2", "txt": b"after"})
    return str(path)


CHILD = r"""
import json, resource, sys
import wds_core as wds
url, limits = sys.argv[1], json.loads(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    for sample in wds.WebDataset(url).decode(limits=limits):
        pass
    error = None
except wds.DecodingError as exn:
    error = str(exn)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"error": error, "grown": grown}))
"""


def in_child(url, limits):
    done = subprocess.run([sys.executable, "-c", CHILD, url, json.dumps(limits)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_within_the_limit(tmp_path):
    data = bomb(300 * MB)
    assert len(data) < 2 * MB
    url = shard_of(tmp_path / "bomb.tar", {"x.json.gz": data})
    result = in_child(url, {"field_bytes": 32 * MB})
    error = result["error"]
    assert error is not None and "bomb.tar" in error and "k1" in error and "x.json.gz" in error
    assert "field_bytes=33,554,432" in error and "decode_limits" in error
    assert result["grown"] < 32 * MB + 48 * MB, result  # the limit and a small constant, not 300 MB (or 1.5 GB)


def test_the_bomb_skipped_by_a_handler_and_the_stream_goes_on(tmp_path):
    url = shard_of(tmp_path / "bomb.tar", {"x.json.gz": bomb(20 * MB)})
    warned = []
    keep_going = lambda exn: warned.append(exn) or True  # noqa: E731 - webdataset's handler protocol
    dataset = wds.WebDataset(url).decode(limits={"field_bytes": MB}, handler=keep_going)
    assert [s["txt"] for s in dataset] == ["fine", "after"] and "field_bytes" in str(warned[0])


def test_gzip_within_the_limits_decodes_as_before():
    text = json.dumps({"a": list(range(1000))}).encode()
    one = gzip.compress(text)
    assert bounded_gunzip(one) == text
    assert bounded_gunzip(one + gzip.compress(b"more")) == text + b"more"  # concatenated members
    assert bounded_gunzip(one + b"\0" * 100) == text  # padding
    with pytest.raises(EOFError):
        bounded_gunzip(one[:-12])
    with pytest.raises(zlib.error):
        bounded_gunzip(one + b"junk")
    limits = DecodeLimits(field_bytes=len(text))
    assert bounded_gunzip(one, limits) == text
    with pytest.raises(ValueError, match="field_bytes"):
        bounded_gunzip(one, DecodeLimits(field_bytes=len(text) - 1))


def npy_with_header(shape, dtype="<f8", data=b""):
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + data


def test_npy_headers_are_checked_before_anything_is_allocated(tmp_path):
    huge = npy_with_header((40_000_000_000,))  # 298 GiB claimed by a 128-byte field
    short = npy_with_header((1000,), data=b"\0" * 80)
    url = shard_of(tmp_path / "arrays.tar", {"huge.npy": huge, "short.npy": short})
    result = in_child(url, {})
    assert "huge.npy" in result["error"] and "320,000,000,000 bytes" in result["error"]
    assert "field_bytes=1,073,741,824" in result["error"] and result["grown"] < 48 * MB
    sample = {"__key__": "k", "__url__": "u.tar", "short.npy": short}
    with pytest.raises(DecodingError, match="holds 80 bytes of data"):
        wds.Decoder().decode(sample)
    fine = io.BytesIO()
    np.save(fine, np.arange(10))
    assert wds.Decoder().decode({"__key__": "k", "a.npy": fine.getvalue()})["a.npy"].tolist() == list(range(10))


def test_npz_members_are_checked_by_their_headers_and_sizes():
    arrays = io.BytesIO()
    np.savez_compressed(arrays, a=np.zeros(1000), b=np.ones(3))
    decoded = wds.Decoder().decode({"__key__": "k", "x.npz": arrays.getvalue()})["x.npz"]
    assert decoded["a"].shape == (1000,) and decoded["b"].tolist() == [1, 1, 1]
    with pytest.raises(DecodingError, match=r"the 2 members of the \.npz \(415 bytes\) inflate to 9,304 bytes"):
        wds.Decoder(limits={"field_bytes": 4000}).decode({"__key__": "k", "x.npz": arrays.getvalue()})


def test_the_sample_limit_counts_every_field():
    arrays = {f"{name}.npy": io.BytesIO() for name in "abc"}
    for buffer in arrays.values():
        np.save(buffer, np.zeros(100_000, np.uint8))
    sample = {"__key__": "k", "__url__": "s.tar", **{k: v.getvalue() for k, v in arrays.items()}}
    decoder = wds.Decoder(limits={"sample_bytes": 250_000})
    with pytest.raises(DecodingError, match="sample_bytes=250,000") as caught:
        decoder.decode(sample)
    assert caught.value.field == "c.npy" and caught.value.key == "k"
    assert len(wds.Decoder(limits={"sample_bytes": 300_000}).decode(sample)) == 5


def test_the_config_file_sets_the_limits(tmp_path, monkeypatch):
    config = tmp_path / "wds.json"
    config.write_text(json.dumps({"decode_limits": {"field_bytes": 100}}))
    monkeypatch.setenv("WDS_CONFIG", str(config))
    sample = {"__key__": "k", "x.txt.gz": gzip.compress(b"y" * 101)}
    with pytest.raises(DecodingError, match="field_bytes=100"):
        wds.Decoder().decode(sample)
    assert wds.Decoder(limits={"field_bytes": 101}).decode(sample)["x.txt.gz"] == "y" * 101
    with pytest.raises(ValueError, match="unknown decode limits"):
        wds.Decoder(limits={"fields": 1})


@pytest.mark.parametrize(
    "field, data",
    [
        ("x.cbor", b"\x9b" + (2**40).to_bytes(8, "big") + b"\x01"),  # an array of 2**40 items
        ("x.cbor", b"\x5b" + (2**40).to_bytes(8, "big") + b"\x01"),  # 2**40 bytes
        ("x.msgpack", b"\xdd" + (2**32 - 1).to_bytes(4, "big") + b"\x01"),
        ("x.msgpack", b"\xc6" + (2**32 - 1).to_bytes(4, "big") + b"\x01"),
        ("x.json", b"[" * 100_000 + b"]" * 100_000),
        ("x.cbor", b"\x81" * 100_000 + b"\x01"),
        ("x.msgpack", b"\x91" * 100_000 + b"\x01"),
    ],
)
def test_container_lengths_and_nesting_are_bounded_by_the_field(field, data):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(DecodingError):
        wds.Decoder().decode({"__key__": "k", field: data})
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 64 * MB
