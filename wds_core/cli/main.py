"""Entry point of the ``wds`` console script: dispatches to the subcommands."""

from __future__ import annotations

import argparse
import difflib
import os
import signal
import sys

from ..errors import redact
from ..version import __version__
from . import demo, doctor, index, inspect_shards, profile, reshape, shardfiles
from .common import add_storage_arguments, apply_storage_arguments, tidy_help

__all__ = ["main"]

EPILOG = """charts:
  wds profile SPEC --svg FILE           where a pipeline's time goes, stage by stage
  wds stats SPEC --shuffle --svg FILE   how an epoch mixes shards and labels, batch by batch, against a global shuffle
  docs/benchmarks.md                    wds against webdataset and the other loaders (charts in docs/images/;
                                        the figures and the commands that measured them in benchmarks/README.md)

"wds COMMAND --help" gives a command's options and examples."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="wds", description="Work with WebDataset shards.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True)
    shardfiles.add_parsers(commands)
    inspect_shards.add_parsers(commands)
    reshape.add_parsers(commands)
    index.add_parser(commands)
    demo.add_parser(commands)
    profile.add_parser(commands)
    doctor.add_parser(commands)
    parser.add_argument("--version", action="version", version=f"wds {__version__}")
    for command in commands.choices.values():
        add_storage_arguments(command)
    tidy_help(parser)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the command's own parser, with its usage and the option most like each
        _unknown_options(commands.choices[args.command], unknown)
    try:
        apply_storage_arguments(args)
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `wds ls x.tar | head -1`: the reader has gone; end quietly, as ls does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # nothing more to flush at exit
        return 128 + signal.SIGPIPE
    except Exception as exn:  # noqa: BLE001 - the CLI reports every failure the same way
        print(redact(f"wds {args.command}: {type(exn).__name__}: {exn}"), file=sys.stderr)  # any error's text
        return 1


def _unknown_options(command: argparse.ArgumentParser, unknown: list[str]) -> None:
    """Exit as argparse does, with ``command``'s usage and, for a mistyped option, the one meant."""
    known = [option for action in command._actions for option in action.option_strings]
    said = []
    for word in unknown:
        guess = difflib.get_close_matches(word.split("=", 1)[0], known, n=1) if word.startswith("-") else []
        said.append(f"{word} (did you mean {guess[0]}?)" if guess else word)
    command.error(f"unrecognized arguments: {' '.join(said)}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
