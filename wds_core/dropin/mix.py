"""``webdataset.mix``: ``RandomMix`` and ``RoundRobin`` (wds's: seeded and checkpointable), and their iterator forms."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..pipeline.mixing import RandomMix, RoundRobin
from . import autodecode, utils  # noqa: F401 - 0.2's module imported them, and code reaches them here
from .pytorch import IterableDataset, TorchTensor  # noqa: F401
from .utils import PipelineStage  # noqa: F401

__all__ = ["RandomMix", "RoundRobin", "random_samples", "round_robin_longest", "round_robin_shortest"]


def round_robin_shortest(*sources: Any) -> Iterator[Any]:
    """One item of each source in turn, until the first source is exhausted."""
    return iter(RoundRobin(list(sources)))


def round_robin_longest(*sources: Any) -> Iterator[Any]:
    """One item of each source in turn, skipping exhausted sources, until all are."""
    return iter(RoundRobin(list(sources), longest=True))


def random_samples(
    sources: Sequence[Any], probs: Sequence[float] | None = None, longest: bool = False
) -> Iterator[Any]:
    """Items of randomly chosen sources (in proportion to ``probs``) until one (``longest``: every one) is exhausted."""
    return iter(RandomMix(list(sources), probs, longest=longest))
