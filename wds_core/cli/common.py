"""What the subcommand modules share: declaring a subcommand with its module's examples, md5sums of shards."""

from __future__ import annotations

import argparse
import hashlib
import re
from typing import TYPE_CHECKING, Any

from ..limits import parse_size

if TYPE_CHECKING:
    from ..io.storage import Storage

__all__ = ["md5_of", "subcommand"]


def md5_of(url: str, storage: Storage | None = None) -> str:
    """The md5sum of the object at ``url`` (every byte is read, through ``storage``), as descriptors record it."""
    from ..io.storage import Storage

    digest = hashlib.md5()
    with (storage or Storage()).open(url) as stream:
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


_WILDCARD = re.compile(r"[*?\[]")


def spec_urls(spec: str) -> list[str]:
    """The shard URLs of a spec given on the command line: braces expanded, and a local path with wildcards the shell
    left alone (a quoted ``"shards/train-*.tar"``) the files it matches, in sorted order; wildcards in a remote URL
    are refused with the spelling that works there."""
    from ..errors import SpecError
    from ..io import files
    from ..io.localfiles import local_path
    from ..io.urls import expand_urls

    urls: list[str] = []
    for url in expand_urls(spec):
        path = local_path(url)
        if not _WILDCARD.search(url) or (path is not None and files.exists(path)):
            urls.append(url)
        elif path is not None:
            matched = sorted(files.glob(path))
            if not matched:
                raise SpecError(f"no file matches {url!r}")
            urls += matched
        else:
            raise SpecError(
                f"{url!r} has wildcards, which are expanded for local paths only: name remote shards with braces, "
                "e.g. s3://bucket/train-{000000..000099}.tar"
            )
    return urls


def byte_size(text: str) -> int:
    """``"4GB"``, ``"512MiB"``, ``"1e9"`` as a number of bytes (an argparse type)."""
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4GB, 512MiB)") from None


STORAGE_HELP = (
    'options for remote shards, as JSON: {"s3://bucket/": {"endpoint_url": ..., "key": ..., "secret": ...}} '
    "by URL prefix, or one object of options for every remote URL (the same as storage_options= in Python; "
    "WDS_CONFIG and the AWS_* variables, AWS_ENDPOINT_URL and AWS_PROFILE included, work too)"
)
_REMOTE_PREFIXES = ("s3://", "gs://", "gcs://", "http://", "https://")


def add_storage_arguments(parser: argparse.ArgumentParser) -> None:
    """``--storage-options JSON`` and ``--endpoint-url URL`` on every subcommand (on each verb of one that has
    verbs): how the command line gives credentials and endpoints without a configuration file."""
    verbs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if verbs:
        for child in verbs[0].choices.values():
            add_storage_arguments(child)
        return
    group = parser.add_argument_group("storage")
    group.add_argument("--storage-options", metavar="JSON", help=STORAGE_HELP)
    group.add_argument("--endpoint-url", metavar="URL", help="the endpoint of an S3-compatible store (s3:// URLs)")


def apply_storage_arguments(args: argparse.Namespace) -> None:
    """Register what ``--storage-options`` and ``--endpoint-url`` give, for every URL the command reads or writes."""
    import json

    from ..errors import SpecError
    from ..io.storage_config import register_storage

    by_prefix: dict[str, dict[str, Any]] = {}
    text = getattr(args, "storage_options", None)
    if text:
        try:
            given = json.loads(text)
        except ValueError as exn:
            raise SpecError(f"--storage-options is not JSON: {exn}") from None
        if not isinstance(given, dict):
            raise SpecError(f"--storage-options is a JSON object, got {type(given).__name__}")
        if given and all(isinstance(v, dict) and "://" in k for k, v in given.items()):
            by_prefix = {prefix: dict(options) for prefix, options in given.items()}
        else:
            by_prefix = {prefix: dict(given) for prefix in _REMOTE_PREFIXES}
    endpoint = getattr(args, "endpoint_url", None)
    if endpoint:
        by_prefix.setdefault("s3://", {})["endpoint_url"] = endpoint
    for prefix, options in by_prefix.items():
        register_storage(prefix, **options)


_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)(?:\s*<[^>]*>)?`")  # :class:`~a.b.C` -> C, :func:`f <target>` -> f


def plain_text(text: str | None) -> str | None:
    """Docstring markup as a terminal shows it: ``code`` as code, :role:`~a.b.Name` as Name."""
    if not text:
        return text
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return text.replace("``", "")


def tidy_help(parser: argparse.ArgumentParser) -> None:
    """Every description and argument help of ``parser`` and its subcommands in :func:`plain_text`."""
    parser.description = plain_text(parser.description)
    parser.epilog = plain_text(parser.epilog)
    for action in parser._actions:
        action.help = plain_text(action.help) if isinstance(action.help, str) else action.help
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                tidy_help(child)
            for choice in action._choices_actions:
                choice.help = plain_text(choice.help)
