"""``MemoryCache`` (webdataset's ``Cached``): the first complete epoch is kept in memory and replayed after.

The items are kept by the stage object of each process (each DataLoader or
Loader worker keeps its own share; workers started anew each epoch start
empty).  An epoch that stops early keeps nothing.  Holding items in memory is
what the stage is for, so it cannot be checkpointed: asking for the state of
a pipeline that contains it is a :class:`~wds_core.errors.CheckpointError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import CheckpointError
from ..state import Recipe, RunContext, StageIterator

__all__ = ["MemoryCache"]


class MemoryCache(Recipe):
    """Read the upstream once, completely; replay what it gave on every later epoch."""

    def __init__(self) -> None:
        self.items: list[Any] | None = None

    def build(self, src: Any, ctx: RunContext) -> _MemoryCacheIterator:
        return _MemoryCacheIterator(src, self)

    def __getstate__(self) -> dict[str, Any]:
        return {"items": None}  # a pickled copy (a worker's) fills its own


class _MemoryCacheIterator(StageIterator):
    passes_order = False  # replays a kept epoch

    def __init__(self, src: Any, recipe: MemoryCache) -> None:
        super().__init__(src)
        self.recipe = recipe

    def _run(self) -> Iterator[Any]:
        if self.recipe.items is not None:
            yield from self.recipe.items
            return
        filling = []
        for item in self.src:
            filling.append(item)
            yield item
        self.recipe.items = filling

    def state_dict(self) -> dict[str, Any]:
        raise CheckpointError("cached() keeps samples in memory and cannot be checkpointed; remove it to checkpoint")
