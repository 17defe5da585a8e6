"""``pipe:COMMAND``: the command's output read, or its input written (:mod:`wds_core.io.commands`)."""

from __future__ import annotations

from collections import Counter
from typing import BinaryIO, cast

from ..commands import PipeSink, PipeStream
from ..provenance import command_of
from ..shardsink import ShardSink
from .base import Backend, Settings

__all__ = ["PIPE", "PipeBackend"]


class PipeBackend(Backend):
    name = "a pipe: command"

    def open(self, url: str, settings: Settings, stats: Counter[str] | None = None) -> BinaryIO:
        return cast(BinaryIO, PipeStream(command_of(url)))

    def create(self, url: str, settings: Settings) -> ShardSink:
        return PipeSink(command_of(url))


PIPE = PipeBackend()
