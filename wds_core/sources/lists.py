"""A list as the source of a pipeline (``DataPipeline([a, b, c], ...)``): its position is its state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..state import StageIterator

__all__ = ["ListSource"]


class ListSource(StageIterator):
    """A list given as the first stage: its position is its state."""

    passes_order = False  # a source

    def __init__(self, items: list[Any]) -> None:
        super().__init__(None)
        self.items = items
        self.index = 0

    def _run(self) -> Iterator[Any]:
        while self.index < len(self.items):
            self.index += 1
            yield self.items[self.index - 1]

    def _own_state(self) -> dict[str, Any]:
        return {"index": self.index}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        self.index = int(state["index"])
