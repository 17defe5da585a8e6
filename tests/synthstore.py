"""A fake object store for scale tests: ``synth://`` shards made up on demand, every request counted.

``synth://bucket/shard-000123.tar`` is a tar of ``SAMPLES`` samples (``txt`` + ``cls``) whose bytes
are a function of the name; ``synth://bucket/dataset.json`` is a wids descriptor listing
``SynthStore.nshards`` such shards with their counts (and sizes, with ``filesizes``), and
``synth://bucket/dataset.counts.npz`` the same as a counts file (:mod:`wds_core.sources.counts`); with
``sidecars``, each shard has its ``.idx`` offset index beside it, as ``wds index create`` writes.
Anything else does not exist.  ``SynthStore.requests`` counts ``(method, path)`` for ``info`` and ``cat_file``, the two
calls wds makes of a remote store.
"""

from __future__ import annotations

import collections
import functools
import json
import re

import fsspec
import numpy as np
from fsspec.spec import AbstractFileSystem

from wds_core.io.shardnames import shard_names
from wds_core.sources.counts import counts_bytes
from wds_core.tar.tarindex import ShardIndex
from wds_core.tar.tarwrite import encode_member, end_of_archive

SAMPLES = 5
_SHARD = re.compile(r"bucket/shard-(\d+)\.tar(\.idx)?$")


@functools.lru_cache(maxsize=256)
def shard_bytes(number: int) -> bytes:
    out = []
    for i in range(SAMPLES):
        key = f"s{number:06d}-{i}"
        out.append(encode_member(f"{key}.txt", f"shard {number} sample {i}".encode()))
        out.append(encode_member(f"{key}.cls", b"%d" % (i % 3)))
    return b"".join(out) + end_of_archive()


@functools.lru_cache(maxsize=256)
def sidecar_bytes(number: int) -> bytes:
    data = shard_bytes(number)
    return ShardIndex.build(lambda offset, n: data[offset : offset + n], len(data)).to_json().encode()


@functools.lru_cache(maxsize=4)
def counts_file(nshards: int, filesizes: bool) -> bytes:
    names = shard_names(f"synth://bucket/shard-{{000000..{nshards - 1:06d}}}.tar")
    sizes = np.full(nshards, len(shard_bytes(0))) if filesizes else None
    return counts_bytes(names, np.full(nshards, SAMPLES), sizes)


class SynthStore(AbstractFileSystem):
    protocol = "synth"
    nshards = 100
    filesizes = False  # whether the descriptor lists each shard's size
    sidecars = False  # whether shards have their .idx beside them
    requests: collections.Counter = collections.Counter()

    def _object(self, path: str) -> bytes:
        path = self._strip_protocol(path)
        matched = _SHARD.fullmatch(path)
        if matched and int(matched.group(1)) < self.nshards:
            if not matched.group(2):
                return shard_bytes(int(matched.group(1)))
            if self.sidecars:
                return sidecar_bytes(int(matched.group(1)))
        if path == "bucket/dataset.json":
            size = len(shard_bytes(0))  # keys are fixed-width: every shard has this size
            shards = [{"url": f"shard-{s:06d}.tar", "nsamples": SAMPLES} for s in range(self.nshards)]
            if self.filesizes:
                for shard in shards:
                    shard["filesize"] = size
            return json.dumps({"wids_version": 1, "shardlist": shards}).encode()
        if path == "bucket/dataset.counts.npz":
            return counts_file(self.nshards, self.filesizes)
        raise FileNotFoundError(path)

    def info(self, path, **kwargs):
        SynthStore.requests["info", self._strip_protocol(path)] += 1
        return {"name": path, "size": len(self._object(path)), "type": "file"}

    def cat_file(self, path, start=None, end=None, **kwargs):
        SynthStore.requests["cat_file", self._strip_protocol(path)] += 1
        return self._object(path)[start:end]


def install(nshards: int, filesizes: bool = False, sidecars: bool = False) -> type[SynthStore]:
    SynthStore.nshards, SynthStore.filesizes, SynthStore.sidecars = nshards, filesizes, sidecars
    SynthStore.requests.clear()
    fsspec.register_implementation("synth", SynthStore, clobber=True)
    return SynthStore
