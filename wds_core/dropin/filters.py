"""``webdataset.filters``: the stages by their webdataset names, webdataset's iterator functions and helpers.

The lowercase stages (``shuffle``, ``map``, ``batched``...) are wds's recipes:
``wds.shuffle(1000)`` makes the stage, ``wds.shuffle(1000)(iterator)`` runs
it on any iterator.  The underscored functions (``_shuffle(data, ...)``,
``_map(data, f)``...) that training code imports run the same recipes on an
iterator.  ``pipelinefilter`` curries a user's own ``f(data, *args)`` the way
webdataset does.  ``_shuffle(data, bufsize, initial, rng)`` with a
``random.Random`` picks exactly as webdataset's does, so seeded shuffles give
the same order on both.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Iterable, Iterator
from fnmatch import fnmatch
from typing import Any

from ..handlers import reraise_exception
from ..rng import fresh_seed
from ..stages.batching import ReadAheadBatch, Slice, Unbatch
from ..stages.collate import collate_column, default_collation_fn
from ..stages.decode import Decode
from ..stages.fieldkeys import Associate, ExtractKeys, RenameKeys
from ..stages.mapping import Map, MapDict, MapTuple, Rename, Select, ToTuple, getfirst, transform_with
from ..stages.memorycache import MemoryCache
from ..stages.sampling import RandomSample
from ..stages.shuffle import DetShuffle, Shuffle
from ..stages.tracing import Info, LogKeys
from ..stages.xdecode import XDECODE_DEFAULTS, XDecode, decode_bin, decode_pickle, decode_text
from . import autodecode, utils  # noqa: F401 - webdataset's module imports them, and code reaches them here
from ._refuse import refused_class
from .autodecode import Decoder
from .pytorch import TorchTensor  # noqa: F401 - webdataset's ``filters.TorchTensor`` (torch.Tensor with wds_torch)
from .utils import PipelineStage  # noqa: F401

__all__ = [
    "Cached",
    "FilterFunction",
    "LMDBCached",
    "Processor",
    "RestCurried",
    "associate",
    "batched",
    "combine_values",
    "compose",
    "compose2",
    "decode",
    "decode_bin",
    "decode_pickle",
    "decode_text",
    "default_collation_fn",
    "default_decoders",
    "detshuffle",
    "dict2tuple",
    "extract_keys",
    "find_decoder",
    "getfirst",
    "identity",
    "info",
    "log_keys",
    "map",
    "map_dict",
    "map_tuple",
    "parse_field_spec",
    "pick",
    "pipeline",
    "pipelinefilter",
    "rename",
    "rename_keys",
    "reraise_exception",
    "rsample",
    "select",
    "shuffle",
    "slice",
    "to_tuple",
    "transform_with",
    "tuple2dict",
    "unbatched",
    "unlisted",
    "xdecode",
]


class FilterFunction:
    """``f`` with every argument but the data bound: ``FilterFunction(f, 3)(data) == f(data, 3)``; picklable."""

    def __init__(self, f: Callable[..., Any], *args: Any, **kw: Any) -> None:
        self.f, self.args, self.kw = f, args, kw

    def __call__(self, data: Any) -> Any:
        return self.f(data, *self.args, **self.kw)

    def __repr__(self) -> str:
        return f"<{getattr(self.f, '__name__', self.f)} {self.args} {self.kw}>"

    __str__ = __repr__


class RestCurried:
    """``RestCurried(f)(*args, **kw)`` is the stage ``FilterFunction(f, *args, **kw)``."""

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f

    def __call__(self, *args: Any, **kw: Any) -> FilterFunction:
        return FilterFunction(self.f, *args, **kw)


def pipelinefilter(f: Callable[..., Any]) -> RestCurried:
    """Decorator turning ``f(data, *args, **kw)`` into a stage factory: ``f(*args, **kw)`` is then a stage."""
    curried = RestCurried(f)
    functools.update_wrapper(curried, f)
    return curried


def identity(x: Any) -> Any:
    return x


def compose2(f: Callable[[Any], Any], g: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``g(f(x))``."""
    return lambda x: g(f(x))


def compose(*fns: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The functions applied left to right."""
    return functools.reduce(compose2, fns)


def pipeline(source: Any, *stages: Callable[[Any], Any]) -> Any:
    """``source`` passed through each stage in turn."""
    return compose(*stages)(source) if stages else source


def parse_field_spec(fields: str | list[str]) -> list[list[str]]:
    """``"jpg;png cls"`` as ``[["jpg", "png"], ["cls"]]``."""
    if isinstance(fields, str):
        fields = fields.split()
    return [field.split(";") for field in fields]


def pick(buf: list[Any], rng: random.Random) -> Any:
    """Remove and return a random item of ``buf``: the last item takes its place (webdataset's pick)."""
    k = rng.randint(0, len(buf) - 1)
    item, buf[k] = buf[k], buf[-1]
    buf.pop()
    return item


def _shuffle(
    data: Iterable[Any],
    bufsize: int = 1000,
    initial: int = 100,
    rng: random.Random | None = None,
    seed: int | None = None,
    handler: Any = None,
) -> Iterator[Any]:
    """webdataset's shuffle as an iterator function; ``rng`` (or ``random.Random(seed)``) picks.

    Without either, a fresh random generator is used.  A ``bufsize`` under 2 keeps the order, as in webdataset
    (where ``_shuffle(src, 0, 0, rng)`` is how a stage says "no shuffle").  ``handler`` is accepted
    as in webdataset: a shuffle raises nothing for it to handle.
    """
    if seed is not None:
        if rng is not None:
            raise ValueError("_shuffle takes rng= or seed=, not both")
        rng = random.Random(seed)
    elif rng is None:
        rng = random.Random(fresh_seed())
    return iter(shuffle(bufsize, initial, rng=rng)(iter(data)))


def _on_iterator(make: Callable[..., Any], name: str) -> Callable[..., Iterator[Any]]:
    """webdataset's ``_name(data, *args, **kw)``: the stage ``make(*args, **kw)`` run on an iterator."""

    def run(data: Iterable[Any], *args: Any, **kw: Any) -> Iterator[Any]:
        return iter(make(*args, **kw)(iter(data)))

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"webdataset's {name}(data, ...): the stage {name[1:]}(...) run on the iterator data."
    return run


def decode(*handlers: Any, handler: Any = reraise_exception, num_threads: int = 0, **options: Any) -> Decode:
    """webdataset's ``decode(...)`` stage: wds's (:func:`wds_core.stages.decode.decode`), with the drop-in's
    :class:`~.autodecode.Decoder` (its default handlers are ``autodecode``'s lists when code changed them)."""
    return Decode(Decoder(*handlers, **options), handler=handler, num_threads=num_threads)


def unlisted() -> Unbatch:
    """Split lists back into their items (the inverse of ``batched(n, collation_fn=None)``)."""
    return Unbatch(lists="items")


def shuffle(
    bufsize: int = 1000,
    initial: int = 100,
    rng: random.Random | None = None,
    seed: int | None = None,
    handler: Any = None,
) -> Shuffle:
    """webdataset's ``shuffle(bufsize, initial, rng, seed, handler)``: the
    :class:`~wds_core.stages.shuffle.Shuffle` stage.

    A ``bufsize`` under 2 keeps the order, as webdataset's buffer of one item
    does (``shuffle(0)`` is a no-op; with ``rng``, each item is still a pick,
    a draw of it, as in webdataset); ``handler`` is accepted and ignored, as
    in webdataset: a shuffle raises nothing for it to handle.
    """
    if bufsize < 2:
        return Shuffle(1, 1, seed=seed, rng=rng)
    return Shuffle(bufsize, initial, seed=seed, rng=rng)


detshuffle = DetShuffle
select = Select
log_keys = LogKeys
map = Map
rename = Rename
associate = Associate
map_dict = MapDict
to_tuple = ToTuple
map_tuple = MapTuple
batched = ReadAheadBatch  # webdataset's batching: a full batch waits for the item after it
unbatched = Unbatch
rsample = RandomSample
slice = Slice
extract_keys = ExtractKeys
rename_keys = RenameKeys
xdecode = XDecode
info = Info
Cached = MemoryCache

_info = _on_iterator(Info, "_info")
_select = _on_iterator(Select, "_select")
_log_keys = _on_iterator(LogKeys, "_log_keys")
_decode = _on_iterator(decode, "_decode")
_map = _on_iterator(Map, "_map")
_rename = _on_iterator(Rename, "_rename")
_associate = _on_iterator(Associate, "_associate")
_map_dict = _on_iterator(MapDict, "_map_dict")
_to_tuple = _on_iterator(ToTuple, "_to_tuple")
_map_tuple = _on_iterator(MapTuple, "_map_tuple")
_batched = _on_iterator(ReadAheadBatch, "_batched")
_unlisted = _on_iterator(unlisted, "_unlisted")
_unbatched = _on_iterator(Unbatch, "_unbatched")
_rsample = _on_iterator(RandomSample, "_rsample")
_extract_keys = _on_iterator(ExtractKeys, "_extract_keys")
_rename_keys = _on_iterator(RenameKeys, "_rename_keys")
_xdecode = _on_iterator(XDecode, "_xdecode")


def combine_values(b: list[Any], combine_tensors: bool = True, combine_scalars: bool = True) -> Any:
    """One column of a batch (see :func:`wds_core.stages.collate.collate_column`)."""
    return collate_column(list(b), combine_tensors, combine_scalars)


def tuple2dict(values: Any) -> dict[Any, Any]:
    return values if isinstance(values, dict) else dict(enumerate(values))


def dict2tuple(d: dict[int, Any]) -> tuple[Any, ...]:
    return tuple(d[i] for i in range(1 + max(d)))


default_decoders = XDECODE_DEFAULTS


def find_decoder(decoders: list[tuple[str, Any]], path: str) -> Any:
    """The decoder of the last pattern matching ``path``'s base name (identity for ``__*`` names)."""
    name = re.sub(r".*/", "", path)
    if name.startswith("__"):
        return identity
    for pattern, fn in decoders[::-1]:
        if fnmatch(name.lower(), pattern) or fnmatch("." + name.lower(), pattern):
            return fn
    return None


LMDBCached = refused_class(
    "LMDBCached",
    "it pickles every sample into an LMDB database; cache shards with WebDataset(..., cache_dir=...) "
    "or samples in memory with cached()",
)


class Processor:
    """The seeds' stage wrapper: ``Processor(wds.map, fn)(dataset)`` is ``dataset`` followed by ``wds.map(fn)``.

    A pipeline source gets the stage appended (and stays a pipeline); any
    other iterable is wrapped by the stage.
    """

    def __init__(self, stage: Any, *args: Any, **kw: Any) -> None:
        if not callable(stage):
            raise TypeError(f"Processor needs a stage factory such as wds.map, got {stage!r}")
        self.stage, self.args, self.kw = stage, args, kw

    def __call__(self, source: Any) -> Any:
        built = self.stage(*self.args, **self.kw)
        if hasattr(source, "compose"):
            return source.compose(built)
        return built(source)
