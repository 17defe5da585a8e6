"""The names of files being written: a hidden name beside the destination, unique to its writer, that a
killed writer's leftovers are recognised by (:func:`~wds_core.io.destinations.stale_partials`)."""

from __future__ import annotations

import os
import re
import secrets

__all__ = ["PARTIAL", "temporary_name"]

PARTIAL = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.partial")  # what temporary_name makes


def temporary_name(name: str) -> str:
    """A hidden name beside ``name`` for the file while it is written, unique to this writer."""
    return f".{name}.{os.getpid()}.{secrets.token_hex(4)}.partial"
