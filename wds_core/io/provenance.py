"""Where a URL's text came from: the caller's code, or data (a spec file, a dataset descriptor, an index...).

A URL read from data is a :class:`DataURL`: a ``str`` that keeps where it was read (``origin``) and whether its
reader allowed commands from there (``commands``, the reader's ``allow_pipe``).  It keeps both through what wds
does to a URL after reading it: taking it from a shard list, shuffling and splitting lists, pickling it into worker
processes, rewriting it (:func:`~wds_core.io.storage_config.rewrite_url` gives a rewritten data URL the same
origin).  The readers of data make their URLs whole (expanded, joined to the data's base or prefix) and wrap the
result, so no string operation of theirs comes after the wrapping.

Two rules hold by this type rather than by call sites remembering them:

* a :class:`DataURL` is a URL, never a pattern: shard lists take it literally, never brace-expanded or
  ``${NAME}``-expanded again (a pattern from data is expanded exactly once, by its reader);
* the one place a process starts (:class:`~wds_core.io.commands.Command`) refuses a ``pipe:`` command whose text
  is a :class:`DataURL` that its reader did not allow commands for (:func:`check_command`).
"""

from __future__ import annotations

from typing import Any

from ..errors import SpecError, redact_url

__all__ = ["CommandURL", "DataURL", "check_command", "command_of", "from_data", "same_origin"]


class DataURL(str):
    """A URL whose text came from data read at ``origin``; ``commands``: whether its reader allowed ``pipe:``
    commands from there."""

    origin: str
    commands: bool

    def __new__(cls, text: str, origin: str = "data", commands: bool = False) -> DataURL:
        url = super().__new__(cls, text)
        url.origin, url.commands = str(origin), bool(commands)
        return url

    def __reduce__(self) -> tuple[Any, ...]:  # pickled into worker processes with its origin
        return (DataURL, (str(self), self.origin, self.commands))

    def __copy__(self) -> DataURL:
        return self

    def __deepcopy__(self, memo: Any) -> DataURL:
        return self


class CommandURL(str):
    """A ``pipe:`` URL made by a rewrite to a command: its text is the shell script of the rewrite's template (from
    code, the environment or the configuration file, never from data), in which each part of the rewritten URL is
    a positional parameter (``"${1}"``...); ``args`` are those parts, handed to the shell as arguments, so no
    quoting in the template or the URL can make them shell text."""

    args: tuple[str, ...]

    def __new__(cls, text: str, args: tuple[str, ...] = ()) -> CommandURL:
        url = super().__new__(cls, text)
        url.args = tuple(str(arg) for arg in args)
        return url

    def __reduce__(self) -> tuple[Any, ...]:
        return (CommandURL, (str(self), self.args))

    def shown(self) -> str:
        """The command as a message shows it: the script, then its arguments."""
        return " ".join([str(self), *(repr(arg) for arg in self.args)])


def from_data(url: str, origin: str, commands: bool = False) -> DataURL:
    """``url``, read from data at ``origin``, as a :class:`DataURL`; a ``pipe:`` command its reader may not run
    (``commands`` false) is refused at once, with the data's name, rather than when the shard is opened."""
    wrapped = DataURL(url, origin, commands)
    if wrapped.startswith("pipe:"):
        check_command(wrapped)
    return wrapped


def same_origin(source: str, text: str) -> str:
    """``text``, made from ``source`` (rewritten, joined...), with ``source``'s origin when it has one."""
    if isinstance(source, DataURL) and not isinstance(text, DataURL):
        return DataURL(text, source.origin, source.commands)
    return text


def command_of(url: str) -> str:
    """The command of the ``pipe:`` URL ``url`` (the text after ``pipe:``), with its origin and arguments."""
    command = url[len("pipe:") :]
    if isinstance(url, CommandURL):
        return CommandURL(command, url.args)
    return same_origin(url, command)


def check_command(command: Any, shown: str | None = None) -> None:
    """A :class:`~wds_core.errors.SpecError` when the text of ``command`` (a ``pipe:`` URL, or the command of one)
    came from data that was not allowed to name commands; nothing for anything else.  ``shown``: the URL for the
    message (default: ``command`` itself)."""
    if isinstance(command, DataURL) and not command.commands:
        raise SpecError(
            f"{command.origin}: {redact_url(shown or command)!r} runs a command; a command only comes from code: "
            "pass allow_pipe=True to the reader of this data to accept its pipe: URLs"
        )
