"""What the subcommand modules share: declaring a subcommand with its module's examples."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["subcommand"]


def subcommand(commands: argparse._SubParsersAction, name: str, help: str, run: Any, doc: str) -> Any:
    """A subparser whose ``--help`` shows ``help`` and then the module doc (its examples)."""
    parser = commands.add_parser(
        name, help=help, description=f"{help}.\n\n{doc}", formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.set_defaults(run=run)
    return parser
