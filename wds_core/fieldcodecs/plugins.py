"""Codecs other packages provide, found through the ``wds.codecs`` entry-point group and loaded on first need.

The core never imports a framework.  A package that adds image specs or
field decoders (``wds_torch`` adds ``torchrgb8``... and ``.pth``) declares
what it claims in its metadata, one entry point per claim::

    [project.entry-points."wds.codecs"]
    "spec:torch*" = "wds_torch.codecs:register"
    "ext:pth" = "wds_torch.codecs:register"

``spec:PATTERN`` claims the image specs matching the shell pattern,
``ext:NAME`` one field extension.  When a decoder meets a spec or an
extension its tables lack, :func:`load_provider` loads the entry points that
claim it (importing their module registers the codecs; a callable target is
then called), so importing the adapter first is never needed, and an
extension nobody claims costs no import at all.
"""

from __future__ import annotations

import fnmatch
import functools
from importlib.metadata import EntryPoint, entry_points

__all__ = ["GROUP", "claims", "load_provider"]

GROUP = "wds.codecs"


@functools.cache
def claims() -> tuple[tuple[str, str, EntryPoint], ...]:
    """``(kind, pattern, entry point)`` for every claim the installed packages declare."""
    found = []
    for point in entry_points(group=GROUP):
        kind, sep, pattern = point.name.partition(":")
        if sep and kind in ("spec", "ext") and pattern:
            found.append((kind, pattern.lower(), point))
    return tuple(found)


# What loading each entry point gave: None when it loaded, else why it did not.
_loaded: dict[str, str | None] = {}
# The answer for each (kind, name) asked; decoders ask once per field of every sample.
_answers: dict[tuple[str, str], tuple[bool, str]] = {}


def load_provider(kind: str, name: str) -> tuple[bool, str]:
    """Load the providers claiming ``name`` (``kind`` ``"spec"`` or ``"ext"``).

    Returns ``(claimed, why)``: whether any installed package claims it, and
    when loading one failed, the failure (e.g. its framework is not
    installed), for the caller's error message.
    """
    name = name.lower()
    answer = _answers.get((kind, name))
    if answer is None:
        answer = _answers[kind, name] = _find(kind, name)
    return answer


def _find(kind: str, name: str) -> tuple[bool, str]:
    claimed, why = False, ""
    for claim_kind, pattern, point in claims():
        if claim_kind != kind or not fnmatch.fnmatchcase(name, pattern):
            continue
        claimed = True
        if point.value not in _loaded:
            _loaded[point.value] = _load(point)
        why = _loaded[point.value] or why
    return claimed, why


def _load(point: EntryPoint) -> str | None:
    try:
        target = point.load()
    except ImportError as exn:
        return f"{point.value} does not import: {exn}"
    if callable(target):
        target()
    return None
