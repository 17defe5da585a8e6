"""Shared fixtures: shards written in several ways, in a temporary directory."""

from __future__ import annotations

import io
import tarfile

import pytest

from wds_core.tarwrite import encode_member, end_of_archive


def write_shard(path, samples, fields=("txt", "cls")):
    """Write samples ``{"__key__": k, field: bytes}`` with the project's encoder."""
    with open(path, "wb") as out:
        for sample in samples:
            for field, value in sample.items():
                if field.startswith("__"):
                    continue
                out.write(encode_member(f"{sample['__key__']}.{field}", value))
        out.write(end_of_archive())
    return str(path)


def tar_bytes(members, fmt=tarfile.PAX_FORMAT, compress=""):
    """A tar built by the standard library from ``[(name, bytes), ...]``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w" + (":" + compress if compress else ""), format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_samples(prefix, n, fields=("txt", "cls")):
    return [{"__key__": f"{prefix}{i:05d}", **{f: f"{prefix}-{i}-{f}".encode() for f in fields}} for i in range(n)]


@pytest.fixture
def shards(tmp_path):
    """Four shards of 25 samples each; returns (brace spec, list of paths, all keys)."""
    paths, keys = [], []
    for s in range(4):
        samples = make_samples(f"s{s}-", 25)
        keys += [x["__key__"] for x in samples]
        paths.append(write_shard(tmp_path / f"shard-{s:02d}.tar", samples))
    return str(tmp_path / "shard-{00..03}.tar"), paths, keys
