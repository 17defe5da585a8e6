"""``webdataset.utils``: who am I (rank, worker), seeds, ``PipelineStage``, ``repeatedly`` and small helpers.

``pytorch_worker_info()`` reads the same sources as the rest of wds
(:mod:`wds_core.dist`: a registered provider, ``torch.distributed`` and
DataLoader workers when torch is imported, ``RANK``/``WORLD_SIZE`` and
``WORKER``/``NUM_WORKERS``); ``pytorch_worker_seed()`` is webdataset's
``rank * 1000 + worker``.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import braceexpand
import numpy as np

from ..dist import node_info, worker_info
from ..io import files
from ..io.secure import secure_mode, set_secure
from ..pipeline.datapipeline import PipelineStage
from ._refuse import refuse_missing

__all__ = [
    "ObsoleteException",
    "PipelineStage",
    "compute_sample_weights",
    "deprecated",
    "fnmatch_with_braces",
    "glob_with_braces",
    "guess_batchsize",
    "identity",
    "is_iterable",
    "make_seed",
    "obsolete",
    "pytorch_worker_info",
    "pytorch_worker_seed",
    "repeatedly",
    "repeatedly0",
]


def glob_with_braces(pattern: str) -> list[str]:
    """``glob`` of every brace expansion of ``pattern``."""
    return [name for expanded in braceexpand.braceexpand(pattern) for name in files.glob(expanded)]


def fnmatch_with_braces(filename: str, pattern: str) -> bool:
    """Whether ``filename`` matches one of the brace expansions of ``pattern``."""
    return any(fnmatch.fnmatch(filename, expanded) for expanded in braceexpand.braceexpand(pattern))


def make_seed(*args: Any) -> int:
    """webdataset's seed from values: ``seed * 31 + hash(arg)`` over the arguments, kept to 31 bits.

    Like webdataset's, it uses ``hash()``, so strings give different seeds in
    different interpreter runs unless ``PYTHONHASHSEED`` is fixed.
    """
    seed = 0
    for arg in args:
        seed = (seed * 31 + hash(arg)) & 0x7FFFFFFF
    return seed


def is_iterable(obj: Any) -> bool:
    """Iterable, but not a string or bytes."""
    return not isinstance(obj, (str, bytes)) and isinstance(obj, Iterable)


def identity(x: Any) -> Any:
    return x


def guess_batchsize(batch: Any) -> int:
    """The length of a batch's first column."""
    return len(batch[0])


def repeatedly0(loader: Iterable[Any], nepochs: int = sys.maxsize, nbatches: int = sys.maxsize) -> Iterator[Any]:
    """``nepochs`` passes over ``loader``, at most ``nbatches`` items from each."""
    for _ in range(nepochs):
        yield from itertools.islice(loader, nbatches)


def repeatedly(
    source: Iterable[Any],
    nepochs: int | None = None,
    nbatches: int | None = None,
    nsamples: int | None = None,
    batchsize: Callable[[Any], int] = guess_batchsize,
) -> Iterator[Any]:
    """Iterate ``source`` again and again: stop after ``nepochs`` passes, ``nbatches`` items in all, or once
    ``nsamples`` samples were yielded (counting ``batchsize(item)`` per item).

    An empty pass ends it too (instead of looping forever).
    """
    epochs = items = samples = 0
    while True:
        empty = True
        for item in source:
            empty = False
            yield item
            items += 1
            if nbatches is not None and items >= nbatches:
                return
            if nsamples is not None:
                samples += batchsize(item)
                if samples >= nsamples:
                    return
        epochs += 1
        if empty or (nepochs is not None and epochs >= nepochs):
            return


def pytorch_worker_info(group: Any = None) -> tuple[int, int, int, int]:
    """``(rank, world_size, worker, num_workers)`` of this process (of the process ``group`` when given)."""
    if group is not None:
        dist = sys.modules["torch.distributed"]
        rank, world = dist.get_rank(group=group), dist.get_world_size(group=group)
    else:
        rank, world = node_info()
    worker, workers = worker_info()
    return rank, world, worker, workers


def pytorch_worker_seed(group: Any = None) -> int:
    """webdataset's per-reader seed: ``rank * 1000 + worker``."""
    rank, _, worker, _ = pytorch_worker_info(group)
    return rank * 1000 + worker


def deprecated(arg: Any = None) -> Any:
    """Decorator: calling the function warns with a ``DeprecationWarning`` (optionally with a reason)."""
    reason = None if callable(arg) else arg

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kw: Any) -> Any:
            message = f"Call to deprecated function {func.__name__}." + (f" Reason: {reason}" if reason else "")
            warnings.warn(message, category=DeprecationWarning, stacklevel=2)
            return func(*args, **kw)

        return wrapper

    return decorate(arg) if callable(arg) else decorate


class ObsoleteException(Exception):
    """Raised by functions marked ``@obsolete`` unless ``ALLOW_OBSOLETE=1``."""


def obsolete(func: Callable[..., Any] | None = None, *, reason: str | None = None) -> Any:
    """Decorator: calling the function raises :class:`ObsoleteException` unless ``ALLOW_OBSOLETE=1`` is set."""
    if func is None:
        return functools.partial(obsolete, reason=reason)

    @functools.wraps(func)
    def wrapper(*args: Any, **kw: Any) -> Any:
        if os.environ.get("ALLOW_OBSOLETE", "0") in ("", "0"):
            message = f"Call to obsolete function {func.__name__}. Set env ALLOW_OBSOLETE=1 to permit."
            raise ObsoleteException(message + (f" Reason: {reason}" if reason else ""))
        return func(*args, **kw)

    return wrapper


def compute_sample_weights(n_w_pairs: list[tuple[float, float]]) -> np.ndarray:
    """``n * w`` for ``(n, w)`` pairs, divided by its maximum."""
    weighted = np.array([n for n, _ in n_w_pairs]) * np.array([w for _, w in n_w_pairs])
    return weighted / np.amax(weighted)


class _UtilsModule(types.ModuleType):
    """``webdataset.utils`` with webdataset's ``enforce_security`` flag: reading it says whether secure mode is
    on (:mod:`wds_core.io.secure`), setting it turns secure mode on or off for this process and the workers
    it starts, at once, wherever the flag is read."""

    @property
    def enforce_security(self) -> bool:
        return secure_mode()

    @enforce_security.setter
    def enforce_security(self, on: Any) -> None:
        set_secure(bool(on), roots=None)


sys.modules[__name__].__class__ = _UtilsModule

__getattr__ = refuse_missing(
    __name__,
    {
        "safe_eval": "it evaluates strings as Python; wds has no use for it",
        "lookup_sym": "it imports modules by name for webdataset's own command line",
    },
)
