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
