"""Compact sample counts: each shard's count (and size) by its position in the dataset's shard spec.

A wids descriptor lists every shard by name, so a reader of a million-shard
dataset parses ~50 MB of JSON and looks each name up before its first sample.
A counts file (``wds-counts-1``, written by ``wds index create`` beside the
descriptor as ``<name>.counts.npz``) holds the same numbers as arrays in the
order of the spec the shards were indexed from: 4 bytes a shard for the
counts, 8 for the sizes, read with one request and used without naming any
shard.  It is a NumPy ``.npz`` (read with ``allow_pickle=False``) of
``counts`` (uint32/uint64), optionally ``sizes`` (int64), and ``meta``: JSON
``{"format", "n", "probes": {position: name}}``; the probe names (the first,
the last and 15 between) check that a reader's spec names the same shards in
the same order.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import SpecError
from ..io.storage import Storage

__all__ = ["COUNTS_FORMAT", "ShardCounts", "write_counts"]

COUNTS_FORMAT = "wds-counts-1"


def _same(url: str) -> str:
    return url if "://" in url or url.startswith("pipe:") else os.path.abspath(url)


def _probes(n: int) -> list[int]:
    return sorted({0, n - 1, *range(0, n, max(1, n // 16))}) if n else []


def counts_bytes(urls: Sequence[str], counts: Any, sizes: Any = None) -> bytes:
    """The ``wds-counts-1`` file of shards ``urls`` (in this order) with these counts (and sizes)."""
    n = len(urls)
    counts = np.asarray(counts)
    if counts.shape != (n,) or (n and counts.min() < 0):
        raise SpecError(f"counts: {n} non-negative sample counts expected, got shape {counts.shape}")
    meta = {"format": COUNTS_FORMAT, "n": n, "probes": {str(i): _same(urls[i]) for i in _probes(n)}}
    arrays = {
        "counts": counts.astype(np.uint32 if not n or counts.max() < 2**32 else np.uint64),
        "meta": np.frombuffer(json.dumps(meta).encode(), np.uint8),
    }
    if sizes is not None:
        arrays["sizes"] = np.asarray(sizes, dtype=np.int64)
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


def write_counts(
    path: str, urls: Sequence[str], counts: Any, sizes: Any = None, storage: Storage | None = None
) -> None:
    """Write the counts file of ``urls`` (local or any URL the storage layer writes, atomically)."""
    (storage or Storage()).write_bytes(path, counts_bytes(urls, counts, sizes))


class ShardCounts:
    """A counts file, read (once) from a path or URL: ``counts``, ``sizes`` (or None) by spec position."""

    def __init__(self, source: str, storage: Storage | None = None) -> None:
        self.source = source
        try:
            with np.load(io.BytesIO((storage or Storage()).read_bytes(source)), allow_pickle=False) as arrays:
                meta = json.loads(arrays["meta"].tobytes())
                self.counts = arrays["counts"].astype(np.int64)
                self.sizes = arrays["sizes"] if "sizes" in arrays.files else None
        except (ValueError, KeyError, OSError) as exn:
            raise SpecError(f"{source}: not a usable {COUNTS_FORMAT} counts file: {exn}") from None
        if meta.get("format") != COUNTS_FORMAT or meta.get("n") != len(self.counts):
            raise SpecError(f"{source}: not a {COUNTS_FORMAT} counts file (format {meta.get('format')!r})")
        self.probes = {int(i): name for i, name in meta.get("probes", {}).items()}

    def check(self, names: Sequence[str]) -> None:
        """Refuse a shard list that is not the one the counts describe (its length and probe names)."""
        if len(names) != len(self.counts):
            raise SpecError(
                f"{self.source} counts {len(self.counts)} shards; this dataset names {len(names)} "
                "(give the spec the counts were made from, or its descriptor)"
            )
        for i, name in self.probes.items():
            if _same(names[i]) != name:
                raise SpecError(
                    f"{self.source} has shard {i} as {name}; this dataset names {names[i]} there "
                    "(the counts follow the order of the spec they were made from)"
                )
