"""Local files (paths and ``file://`` URLs; :mod:`wds_core.io.localfiles`) and ``-``, standard input and output."""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any, BinaryIO, cast

from ..destinations import LocalSink, StreamSink
from ..localfiles import RandomAccess, StdinStream, local_path, local_random_access, open_local
from ..shardsink import ShardSink
from .base import Backend, Settings

__all__ = ["LOCAL", "STDIO", "LocalBackend", "StdioBackend"]


class LocalBackend(Backend):
    name = "a local file"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return open_local(_path(url), url)

    def random_access(self, url: str, settings: Settings, size: int | None = None) -> RandomAccess:
        return local_random_access(_path(url), url)

    def size(self, url: str, settings: Settings) -> int | None:
        with open_local(_path(url), url) as stream:
            return os.fstat(stream.fileno()).st_size

    def create(self, url: str, settings: Settings) -> ShardSink:
        return LocalSink(_path(url), url)

    def cached(self, cache: Any) -> bool:
        return bool(cache.cache_local)


def _path(url: str) -> str:
    path = local_path(url)
    return url if path is None else path


class StdioBackend(Backend):
    name = "standard input/output"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return cast(BinaryIO, StdinStream())

    def create(self, url: str, settings: Settings) -> ShardSink:
        return StreamSink(sys.stdout.buffer, "-")

    def cached(self, cache: Any) -> bool:
        return False


LOCAL, STDIO = LocalBackend(), StdioBackend()
