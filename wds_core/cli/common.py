"""What the subcommand modules share: declaring a subcommand with its module's examples, md5sums of shards."""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

__all__ = ["md5_of", "subcommand"]


def md5_of(url: str, storage_options: dict | None = None) -> str:
    """The md5sum of the object at ``url`` (every byte is read), as descriptors record it."""
    from ..io.storage import open_shard

    digest = hashlib.md5()
    with open_shard(url, storage_options) as stream:
        while chunk := stream.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def subcommand(commands: argparse._SubParsersAction, name: str, help: str, run: Any, doc: str) -> Any:
    """A subparser whose ``--help`` shows ``help`` and then the module doc (its examples)."""
    parser = commands.add_parser(
        name, help=help, description=f"{help}.\n\n{doc}", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.set_defaults(run=run)
    return parser


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12}
_UNITS.update({"tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def byte_size(text: str) -> int:
    """``"4GB"``, ``"512MiB"``, ``"1e9"`` as a number of bytes (an argparse type)."""
    number = text.strip().rstrip("bBiIkKmMgGtT")
    unit = text.strip()[len(number) :].lower()
    try:
        return int(float(number) * _UNITS[unit])
    except (KeyError, ValueError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4GB, 512MiB)") from None
