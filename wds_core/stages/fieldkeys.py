"""Per-sample stages that pick, rename or add fields by name patterns.

* :class:`ExtractKeys` (webdataset's ``extract_keys``): a tuple of the fields
  matching glob patterns (``"*.jpg;*.png"``; a pattern matches the field name
  or ``"." + name``);
* :class:`RenameKeys` (``rename_keys``): a new sample whose fields are named
  by the pattern their (base) name matches;
* :class:`Associate` (``associate``): fields looked up by the sample key in a
  mapping or returned by a function, added to the sample.

Like the other per-sample stages they have no state of their own and take a
``handler`` for the errors they raise (a :class:`~wds_core.errors.MissingFieldError`
when nothing matches, a :class:`~wds_core.errors.SampleError` for ambiguous
matches).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fnmatch import fnmatch
from typing import Any

from ..errors import MissingFieldError, SampleError, SampleShapeError
from ..handlers import Handler, reraise_exception
from .mapping import PerSample, sample_location

__all__ = ["Associate", "ExtractKeys", "RenameKeys"]


def _alternatives(pattern: str | list[str]) -> list[str]:
    return pattern.split(";") if isinstance(pattern, str) else list(pattern)


def _dict_sample(sample: Any, stage: str) -> dict[str, Any]:
    if not isinstance(sample, dict):
        raise SampleShapeError(f"{stage} expects dict samples, got {type(sample).__name__}")
    return sample


class ExtractKeys(PerSample):
    """``(value, value, ...)``: for each pattern the field it matches (``"*.jpg;*.png"``, ``"cls"``...).

    A pattern that matches nothing is an error unless ``ignore_missing`` (then
    it contributes nothing to the tuple, as in webdataset); one that matches
    several fields is an error unless ``duplicate_is_error=False`` (the first
    match in the sample's order is taken).
    """

    def __init__(
        self,
        *patterns: str | list[str],
        duplicate_is_error: bool = True,
        ignore_missing: bool = False,
        handler: Handler = reraise_exception,
    ) -> None:
        if not patterns:
            raise ValueError("extract_keys needs at least one pattern")
        self.patterns = [_alternatives(p) for p in patterns]
        self.duplicate_is_error, self.ignore_missing, self.handler = duplicate_is_error, ignore_missing, handler

    def process(self, sample: Any) -> tuple[Any, ...]:
        sample = _dict_sample(sample, "extract_keys")
        result = []
        for alternatives in self.patterns:
            matches = [k for k in sample if any(fnmatch("." + k, p) or fnmatch(k, p) for p in alternatives)]
            if not matches:
                if self.ignore_missing:
                    continue
                fields = sorted(sample)
                raise MissingFieldError(
                    f"no field matches {alternatives}; the sample has {fields}", **sample_location(sample)
                )
            if len(matches) > 1 and self.duplicate_is_error:
                raise SampleError(f"several fields {matches} match {alternatives}", **sample_location(sample))
            result.append(sample[matches[0]])
        return tuple(result)


class RenameKeys(PerSample):
    """A new sample whose fields are renamed by patterns: ``rename_keys(image="*.jpg", ("label", "*.cls"))``.

    ``renamings`` are ``(new name, pattern)`` pairs, keyword arguments come
    after them; each field's base name (after the last ``/``), lower-cased, is
    matched against the patterns, the last one given winning.  Fields no
    pattern matches are dropped (``__key__`` too) unless ``keep_unselected``;
    ``must_match`` makes a pattern that matched no field an error; two fields
    renamed to one name are an error unless ``duplicate_is_error=False`` (the
    first is kept).
    """

    def __init__(
        self,
        *renamings: tuple[str, str],
        keep_unselected: bool = False,
        must_match: bool = True,
        duplicate_is_error: bool = True,
        handler: Handler = reraise_exception,
        **named: str,
    ) -> None:
        pairs = []
        for pair in renamings:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"rename_keys takes (new name, pattern) pairs, got {pair!r}")
            pairs.append((str(pair[1]), str(pair[0])))
        pairs += [(str(pattern), new) for new, pattern in named.items()]
        if not pairs:
            raise ValueError("rename_keys needs at least one (new name, pattern)")
        self.rules = pairs[::-1]  # (pattern, new name), the last given first
        self.keep_unselected, self.must_match = keep_unselected, must_match
        self.duplicate_is_error, self.handler = duplicate_is_error, handler

    def process(self, sample: Any) -> dict[str, Any]:
        sample = _dict_sample(sample, "rename_keys")
        result: dict[str, Any] = {}
        matched = set()
        for path, value in sample.items():
            name = path.rsplit("/", 1)[-1].lower()
            rule = next((r for r in self.rules if fnmatch(name, r[0])), None)
            if rule is None:
                if self.keep_unselected:
                    result[path] = value
                continue
            matched.add(rule[0])
            new = rule[1]
            if new in result:
                if self.duplicate_is_error:
                    raise SampleError(f"two fields are renamed to {new!r}", **sample_location(sample))
                continue
            result[new] = value
        if self.must_match:
            unmatched = sorted({pattern for pattern, _ in self.rules} - matched)
            if unmatched:
                raise MissingFieldError(
                    f"rename_keys: no field matches {unmatched}; the sample has {sorted(sample)}",
                    **sample_location(sample),
                )
        return result


class Associate(PerSample):
    """Add fields by sample key: ``associator(key) -> dict`` or ``associator.get(key, {})`` for a mapping."""

    def __init__(self, associator: Callable[[str], Any] | Mapping[str, Any], handler: Handler = reraise_exception):
        if not callable(associator) and not isinstance(associator, Mapping):
            raise TypeError(f"associate needs a function or a mapping, got {type(associator).__name__}")
        self.associator, self.handler = associator, handler

    def process(self, sample: Any) -> dict[str, Any]:
        sample = _dict_sample(sample, "associate")
        key = sample["__key__"]
        extra = self.associator(key) if callable(self.associator) else self.associator.get(key, {})
        sample.update(extra or {})
        return sample
