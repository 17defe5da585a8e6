"""``MockDataset``: one sample repeated, to run a training loop without data (webdataset's)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .pipeline.datapipeline import DataPipeline
from .pipeline.fluid import FluidInterface
from .state import Recipe, RunContext, StageIterator

__all__ = ["MockDataset"]


class MockDataset(DataPipeline, FluidInterface):
    """A pipeline yielding ``sample`` ``length`` times per epoch (the same object each time)."""

    def __init__(self, sample: Any, length: int) -> None:
        if not isinstance(length, int) or length < 0:
            raise ValueError(f"length must be an integer >= 0, got {length!r}")
        super().__init__(_Repeat(sample, length), seed=0)


class _Repeat(Recipe):
    def __init__(self, sample: Any, length: int) -> None:
        self.sample, self.length = sample, length

    def build(self, src: Any, ctx: RunContext) -> _RepeatIterator:
        return _RepeatIterator(self)


class _RepeatIterator(StageIterator):
    passes_order = False  # a sample source

    def __init__(self, recipe: _Repeat) -> None:
        super().__init__(None)
        self.recipe, self.index = recipe, 0

    def _run(self) -> Iterator[Any]:
        while self.index < self.recipe.length:
            self.index += 1
            yield self.recipe.sample

    def _own_state(self) -> dict[str, Any]:
        return {"index": self.index}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])
