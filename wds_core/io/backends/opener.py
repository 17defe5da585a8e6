"""A scheme given an opener ``f(url, mode, bufsize)`` (:func:`~wds_core.io.registry.register_opener`, webdataset's
``gopen_schemes[scheme] = f``): the opener reads and writes every URL of the scheme."""

from __future__ import annotations

from collections import Counter
from typing import Any, BinaryIO, cast

from ..destinations import OpenedSink
from ..shardsink import ShardSink
from .base import Backend, Settings

__all__ = ["OpenerBackend"]


class OpenerBackend(Backend):
    """A registered opener's URLs."""

    name = "a registered opener's URL"

    def __init__(self, opener: Any) -> None:
        self.opener = opener

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return cast(BinaryIO, self.opener(url, "rb", 8192))

    def create(self, url: str, settings: Settings) -> ShardSink:
        return OpenedSink(self.opener(url, "wb", 8192), url)
