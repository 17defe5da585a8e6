"""Shard names computed on demand: a brace range stays a range.

``shard_names("s3://b/train-{0000000..9999999}.tar")`` is a sequence of ten
million URLs that holds three pieces (the text before the range, the range,
the text after), computes the URL of index *i* when asked, has a ``len()``,
and pickles to a few hundred bytes; ``expand_urls`` would build a 700 MB list.
The names and their order are exactly braceexpand's (``expand_urls``): a
pattern is a product of its top-level brace groups (the leftmost varying
slowest); an integer range group ``{a..b}`` / ``{a..b..step}`` stays a
``range`` with braceexpand's zero padding, any other group (alternatives,
letters, nested braces) is expanded on its own, and a pattern with escapes is
expanded whole.  Specs naming fewer than :data:`LAZY_FROM` shards are plain
lists, as before.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import braceexpand

from .provenance import DataURL
from .urls import no_urls, spec_parts

__all__ = ["LAZY_FROM", "PermutedNames", "ShardNames", "shard_names"]

LAZY_FROM = 100_000  # specs naming fewer shards are expanded into a list, as expand_urls does
_INT_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?\}")


class _IntRange:
    """The values of one ``{a..b..step}`` group, as braceexpand writes them."""

    def __init__(self, start: str, end: str, step: str | None) -> None:
        padded = any(s.startswith(("0", "-0")) for s in (start, end) if s not in ("0", "-0"))
        self.format = f"%0{max(len(start), len(end))}d" if padded else "%d"
        by = (int(step) or 1) if step else 1
        first, last = int(start), int(end)
        self.values = range(first, last + 1, by) if first < last else range(first, last - 1, -by)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> str:
        return self.format % self.values[i]

    def __iter__(self) -> Iterator[str]:
        return (self.format % v for v in self.values)


class _Pattern:
    """One brace pattern as a product of factors (strings, lists of alternatives, integer ranges)."""

    def __init__(self, factors: list[Any]) -> None:
        self.factors = [f for f in factors if not (isinstance(f, list) and f == [""])]
        self.size = 1
        for factor in self.factors:
            self.size *= len(factor)
        # the usual shape, text + one range + text: the name of index i is one formatting
        varying = [k for k, f in enumerate(self.factors) if len(f) != 1]
        self.single: tuple[str, range] | None = None
        if len(varying) == 1 and isinstance(self.factors[varying[0]], _IntRange):
            k = varying[0]
            before = "".join(f[0] for f in self.factors[:k]).replace("%", "%%")
            after = "".join(f[0] for f in self.factors[k + 1 :]).replace("%", "%%")
            self.single = (before + self.factors[k].format + after, self.factors[k].values)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> str:
        if self.single is not None:
            return self.single[0] % self.single[1][i]
        pieces = []
        for factor in reversed(self.factors):  # the rightmost factor varies fastest
            i, digit = divmod(i, len(factor))
            pieces.append(factor[digit])
        return "".join(reversed(pieces))

    def __iter__(self) -> Iterator[str]:
        return ("".join(parts) for parts in itertools.product(*self.factors))


def _pattern(text: str) -> _Pattern:
    """``text`` (one pattern, environment already expanded) as factors, or expanded whole when unusual."""
    if "\\" in text or not _balanced(text):  # escapes, or braceexpand's error for unbalanced braces
        return _Pattern([list(braceexpand.braceexpand(text))])
    factors: list[Any] = []
    at = 0
    while True:
        start = text.find("{", at)
        if start < 0:
            factors.append([text[at:]])
            return _Pattern(factors)
        depth, end = 0, len(text) - 1
        for j in range(start, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    end = j
                    break
        factors.append([text[at:start]])
        group = text[start : end + 1]
        matched = _INT_RANGE.fullmatch(group)
        factors.append(_IntRange(*matched.groups()) if matched else list(braceexpand.braceexpand(group)))
        at = end + 1


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


class _Names(Sequence[str]):
    """A sequence of names that computes ``_name(i)`` for a valid index; slices are lists."""

    def _name(self, i: int) -> str:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def pick(self, positions: Iterable[int]) -> list[str]:
        """The names at ``positions`` (valid, non-negative indices), in that order."""
        return [self._name(p) for p in positions]

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        n = len(self)
        if isinstance(i, slice):
            return self.pick(range(*i.indices(n)))
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"shard index {i} out of range for {n} shards")
        return self._name(i)


class ShardNames(_Names):
    """The URLs of one or more brace patterns, in order, computed on demand (see the module doc)."""

    def __init__(self, patterns: list[_Pattern]) -> None:
        self.patterns = [p for p in patterns if len(p)]
        self.ends = list(itertools.accumulate(len(p) for p in self.patterns))

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def _name(self, i: int) -> str:
        which = bisect.bisect_right(self.ends, i)
        before = self.ends[which - 1] if which else 0
        return self.patterns[which][i - before]

    def __iter__(self) -> Iterator[str]:
        return itertools.chain.from_iterable(self.patterns)

    def pick(self, positions: Iterable[int]) -> list[str]:
        if len(self.patterns) == 1 and self.patterns[0].single is not None:  # one formatting per name
            form, values = self.patterns[0].single
            return [form % values[p] for p in positions]
        return super().pick(positions)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        n = len(self)
        return f"<ShardNames: {n} shards, {self[0]!r} ... {self[n - 1]!r}>" if n else "<ShardNames: none>"


class PermutedNames(_Names):
    """``names`` in the order of ``positions`` (an array of indices: 4 or 8 bytes a shard, not a name)."""

    def __init__(self, names: Sequence[str], positions: Sequence[int]) -> None:
        self.names, self.positions = names, positions

    def __len__(self) -> int:
        return len(self.positions)

    def _name(self, i: int) -> str:
        return self.names[self.positions[i]]

    def pick(self, positions: Iterable[int]) -> list[str]:
        inner = [self.positions[p] for p in positions]
        return self.names.pick(inner) if isinstance(self.names, _Names) else [self.names[p] for p in inner]


def _listed(parts: list[Any]) -> list[Any]:
    """``parts`` with each glob over the Hugging Face Hub listed (once, here: the list travels with the dataset)."""
    import glob as _glob

    from .backends.hf import expand_hf

    out: list[Any] = []
    for part in parts:
        if isinstance(part, str) and part.startswith("hf://") and _glob.has_magic(part):
            out += [url for name in braceexpand.braceexpand(part) for url in expand_hf(name)]
        else:
            out.append(part)
    return out


def shard_names(spec: str | os.PathLike | Iterable[str | os.PathLike]) -> Sequence[str]:
    """The URLs ``expand_urls(spec)`` gives, as a :class:`ShardNames` when there are many, else as a list."""
    if isinstance(spec, ShardNames):
        return spec
    parts = spec_parts(spec)
    if any(isinstance(part, DataURL) for part in parts):  # URLs from data: the list itself, each kept as it is
        return [
            url for part in parts for url in ([part] if isinstance(part, DataURL) else braceexpand.braceexpand(part))
        ]
    if any(isinstance(part, str) and part.startswith("hf://") for part in parts):
        parts = _listed(parts)
    patterns: list[_Pattern] = []
    plain: list[str] = []  # consecutive names without braces: one factor, not one pattern each
    for part in parts:
        if "{" not in part and "}" not in part and "\\" not in part:
            plain.append(part)
            continue
        if plain:
            patterns.append(_Pattern([plain]))
            plain = []
        patterns.append(_pattern(part))
    if plain:
        patterns.append(_Pattern([plain]))
    names = ShardNames(patterns)
    if not len(names):
        raise no_urls(spec)
    return names if len(names) >= LAZY_FROM else list(names)
