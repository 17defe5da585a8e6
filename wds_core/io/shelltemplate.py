"""A rewrite to a ``pipe:`` command: its template becomes a shell script in which the parts of the rewritten URL are
positional parameters, handed to the shell as arguments (:class:`~.provenance.CommandURL`).

A URL's parts are data; pasted into shell text they are code, whatever quoting is put around them (a ``"..."`` in
the template lets ``$(cmd)`` in the URL run; a part quoted for the shell inside the template's ``'...'`` closes
its quotes).  Here no part of the URL is ever shell text: each group reference of the template (``\\1``,
``\\g<name>``) and the rest of the URL after what the rule matched become ``"${1}"``, ``"${2}"``... in the script,
written for the quoting in force where they stand (``${1}`` inside the template's double quotes, ``'"${1}"'``
inside its single quotes), and the parts themselves are the shell's arguments: ``sh -c SCRIPT sh PART1 PART2``.
"""

from __future__ import annotations

import re

from ..errors import SpecError
from .provenance import CommandURL

__all__ = ["command_template"]

_GROUP = re.compile(r"\\(?:g<(\w+)>|(\d{1,2}))")  # a group reference of a replacement template, at a backslash


def _tokens(template: str, groups: bool) -> list[tuple[bool, str]]:
    """``template`` as ``(is a group reference, text)`` pieces: the group's name or number, or literal text with its
    escapes as written (``groups`` false: all of it literal)."""
    if not groups:
        return [(False, template)]
    pieces: list[tuple[bool, str]] = []
    literal: list[str] = []
    i = 0
    while i < len(template):
        found = _GROUP.match(template, i) if template[i] == "\\" else None
        if found:
            pieces.append((False, "".join(literal)))
            literal = []
            pieces.append((True, found[1] or found[2]))
            i = found.end()
        else:
            step = 2 if template[i] == "\\" else 1  # an escape's two characters stay together
            literal.append(template[i : i + step])
            i += step
    pieces.append((False, "".join(literal)))
    return pieces


def _quoting(text: str, state: str) -> tuple[str, bool]:
    """The shell's quoting after ``text``, from ``state`` (``""`` none, ``"'"`` or ``'"'``), and whether ``text`` ends
    where a parameter cannot follow (in the middle of an escape, or with a ``$`` it would be read with)."""
    i = 0
    while i < len(text):
        c = text[i]
        if state == "'":
            state = "" if c == "'" else state
        elif c == "\\":
            if i + 1 == len(text):
                return state, True
            i += 1
        elif c == '"' or (c == "'" and not state):
            state = "" if state == c else c
        i += 1
    return state, text.endswith("$") and state != "'"


_REFERENCE = {"": '"${{{0}}}"', '"': "${{{0}}}", "'": "'\"${{{0}}}\"'"}  # a parameter, within each quoting


def command_template(template: str, match: re.Match[str] | None, rest: str) -> CommandURL:
    """The ``pipe:`` URL a rewrite makes of its ``template`` (which starts with ``pipe:``): each group reference of
    ``match`` (a regular expression's rule; ``None``: a prefix rule, whose template is literal) and ``rest`` (the URL
    after what the rule matched, when not empty) a positional parameter of the script, its value an argument."""
    script: list[str] = []
    args: list[str] = []
    state, dangling = "", False

    def parameter(value: str) -> None:
        if dangling:
            raise SpecError(
                f"the rewrite's command template {template!r} ends with an escape or a '$' right before a part of "
                "the URL: the part could not stand on its own"
            )
        args.append(value)
        script.append(_REFERENCE[state].format(len(args)))

    for is_group, text in _tokens(template, match is not None):
        if is_group:
            parameter((match.group(int(text) if text.isdigit() else text) if match is not None else None) or "")
        elif text:
            literal = match.expand(text) if match is not None else text  # its escapes, as re reads them
            state, dangling = _quoting(literal, state)
            script.append(literal)
    if rest:
        parameter(rest)
    return CommandURL("".join(script), tuple(args))
