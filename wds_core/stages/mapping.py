"""Per-sample stages with no state of their own: map, select, to_tuple, rename...

Each takes a ``handler`` deciding what happens when the user's function (or a
missing field) raises: re-raise (default), skip the sample, or end the stream.
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import EmptyDatasetError, MissingFieldError, SampleError, SampleShapeError
from ..handlers import Handler, reraise_exception
from ..state import Recipe, RunContext, StageIterator, Stateless

_NONE_ID = id(None)

__all__ = [
    "CountingStage",
    "Map",
    "MapDict",
    "MapTuple",
    "NonEmpty",
    "PerSample",
    "Rename",
    "Select",
    "ToTuple",
    "getfirst",
    "sample_location",
    "transform_with",
]


def sample_location(sample: Any) -> dict[str, Any]:
    """``url=`` and ``member=`` for an error about ``sample`` (its shard and key), when it is a dict."""
    if isinstance(sample, dict):
        return {"url": sample.get("__url__"), "member": sample.get("__key__")}
    return {}


def getfirst(sample: dict, keys: str | list[str], default: Any = None, missing_is_error: bool = True) -> Any:
    """The value of the first of ``keys`` (a list, or names joined by ``;``) present in ``sample``."""
    names = keys.split(";") if isinstance(keys, str) else list(keys)
    for name in names:
        if name in sample:
            return sample[name]
    if missing_is_error:
        fields = sorted(k for k in sample if not k.startswith("__"))
        raise MissingFieldError(
            f"none of the fields {names} is in the sample; it has {fields}", **sample_location(sample)
        )
    return default


def transform_with(sample: Any, transformers: list[Callable[[Any], Any] | None] | None) -> list[Any]:
    """``[f(x) for f, x in zip(transformers, sample)]``, ``None`` or missing functions keeping their value."""
    if not transformers:
        return sample
    if len(transformers) > len(sample):
        raise SampleShapeError(f"{len(transformers)} functions for a sample of {len(sample)} values")
    result = list(sample)
    for i, f in enumerate(transformers):
        if f is not None:
            result[i] = f(sample[i])
    return result


class PerSample(Recipe):
    """A stage that looks at each item on its own; subclasses define ``process``."""

    handler: Handler = staticmethod(reraise_exception)  # type: ignore[assignment]

    def build(self, src: Any, ctx: RunContext) -> StageIterator:
        return Stateless(src, self._iterate)

    def process(self, sample: Any) -> Any:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def _iterate(self, src: Iterator[Any]) -> Iterator[Any]:
        process, handler = self.process, self.handler
        for sample in src:
            try:
                result = process(sample)
            except SampleShapeError:
                raise  # stages in the wrong order: not for the handler to skip
            except Exception as exn:
                if handler(exn):
                    continue
                return
            if result is not None:
                yield result


class CountingStage(PerSample):
    """A per-sample stage that counts what it keeps and skips in ``stats``, per process.

    A pickled copy (a DataLoader or Loader worker's) starts counting from zero.
    """

    def __init__(self) -> None:
        self.stats: collections.Counter[str] = collections.Counter()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["stats"] = collections.Counter()
        return state


class Map(PerSample):
    """``f(sample)`` for each sample; ``None`` results are dropped; dict results keep ``__key__``."""

    def __init__(self, f: Callable[[Any], Any], handler: Handler = reraise_exception) -> None:
        if not callable(f):
            raise TypeError(f"map needs a callable, got {type(f).__name__}")
        self.f, self.handler = f, handler

    def stage_name(self) -> str:
        """``map(crop)``: with the function's name."""
        return f"map({getattr(self.f, '__name__', type(self.f).__name__)})"

    def _iterate(self, src: Iterator[Any]) -> Iterator[Any]:
        f, handler = self.f, self.handler
        for sample in src:
            try:
                result = f(sample)
            except Exception as exn:
                if handler(exn):
                    continue
                return
            if result is None:
                continue
            if isinstance(result, dict) and isinstance(sample, dict) and result is not sample:
                result["__key__"] = sample.get("__key__")
            yield result


class Select(PerSample):
    """Keep the samples for which ``predicate(sample)`` is true."""

    def __init__(self, predicate: Callable[[Any], bool], handler: Handler = reraise_exception) -> None:
        if not callable(predicate):
            raise TypeError(f"select needs a callable, got {type(predicate).__name__}")
        self.predicate, self.handler = predicate, handler

    def process(self, sample: Any) -> Any:
        return sample if self.predicate(sample) else None


class ToTuple(PerSample):
    """Turn dict samples into tuples of fields; ``"jpg;png"`` takes the first present."""

    def __init__(
        self,
        *fields: str | list[str],
        handler: Handler = reraise_exception,
        missing_is_error: bool = True,
        none_is_error: bool | None = None,
    ) -> None:
        if len(fields) == 1 and isinstance(fields[0], str) and " " in fields[0]:
            fields = tuple(fields[0].split())
        if not fields:
            raise ValueError("to_tuple needs at least one field name")
        self.fields = fields
        self.handler = handler
        self.missing_is_error = missing_is_error
        self.none_is_error = missing_is_error if none_is_error is None else none_is_error
        # every field a single name (no "a;b" alternatives): one lookup a field, in C
        single = all(isinstance(f, str) and ";" not in f for f in fields)
        self._get = operator.itemgetter(*fields) if single and len(fields) > 1 else None

    def process(self, sample: Any) -> Any:
        result = None
        if self._get is not None and sample.__class__ is dict:
            try:
                result = self._get(sample)
            except KeyError:  # a field missing: the general way says which, or fills in None
                pass
        if result is None:
            missing = self.missing_is_error
            result = tuple(getfirst(sample, f, missing_is_error=missing) for f in self.fields)
        if self.none_is_error and _NONE_ID in map(id, result):  # not `None in`: that compares arrays with ==
            raise SampleError(f"to_tuple{self.fields}: a field is None", **sample_location(sample))
        return result


class MapTuple(PerSample):
    """Apply the i-th function to the i-th element of tuple samples (``None`` = unchanged)."""

    def __init__(self, *fns: Callable[[Any], Any] | None, handler: Handler = reraise_exception) -> None:
        for f in fns:
            if f is not None and not callable(f):
                raise TypeError(f"map_tuple needs callables or None, got {type(f).__name__}")
        self.fns, self.handler = fns, handler

    def process(self, sample: Any) -> Any:
        if not isinstance(sample, (list, tuple)):
            raise SampleShapeError(
                f"map_tuple expects tuple samples, got {type(sample).__name__}", **sample_location(sample)
            )
        out = list(sample)
        for i, f in enumerate(self.fns[: len(out)]):
            if f is not None:
                out[i] = f(out[i])
        return tuple(out)


class MapDict(PerSample):
    """Apply ``kw[field]`` to each named field of dict samples."""

    def __init__(self, handler: Handler = reraise_exception, **fns: Callable[[Any], Any]) -> None:
        if not fns:
            raise ValueError("map_dict needs at least one field=function argument")
        for name, f in fns.items():
            if not callable(f):
                raise TypeError(f"map_dict: {name}= must be callable, got {type(f).__name__}")
        self.fns, self.handler = fns, handler

    def process(self, sample: Any) -> Any:
        if not isinstance(sample, dict):
            raise SampleShapeError(f"map_dict expects dict samples, got {type(sample).__name__}")
        for name, f in self.fns.items():
            if name not in sample:
                raise MissingFieldError(f"map_dict: no field {name!r} in the sample", **sample_location(sample))
            sample[name] = f(sample[name])
        return sample


class Rename(PerSample):
    """Rename fields: ``rename(image="jpg;png")``; ``keep=False`` keeps only the renamed ones."""

    def __init__(self, handler: Handler = reraise_exception, keep: bool = True, **names: str | list[str]) -> None:
        if not names:
            raise ValueError("rename needs at least one new=old argument")
        self.names, self.handler, self.keep = names, handler, keep
        self.replaced = {old for v in names.values() for old in (v.split(";") if isinstance(v, str) else v)}

    def process(self, sample: Any) -> Any:
        renamed = {new: getfirst(sample, old) for new, old in self.names.items()}
        if not self.keep:
            return renamed
        result = {k: v for k, v in sample.items() if k not in self.replaced}
        result.update(renamed)
        return result


class NonEmpty(Recipe):
    """Pass everything through; raise when the upstream produced nothing in the epoch (webdataset's ``non_empty``)."""

    def build(self, src: Any, ctx: RunContext) -> _NonEmptyIterator:
        return _NonEmptyIterator(src)


class _NonEmptyIterator(StageIterator):
    passes_order = True

    def __init__(self, src: Any) -> None:
        super().__init__(src)
        self.count = 0  # part of the state: a run restored after its first item is not empty

    def _run(self) -> Iterator[Any]:
        for item in self.src:
            self.count += 1
            yield item
        if self.count == 0:
            raise EmptyDatasetError("the stages before non_empty produced nothing in this epoch")

    def _own_state(self) -> dict[str, Any]:
        return {"count": self.count}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])
