"""The model of an epoch (issue 67, docs/guides/balanced-epochs.md "What an epoch holds"): for a layout of shards,
ranks and workers and a way of forming the epoch, which samples each reader (one rank's worker) yields, in order,
written from the promises and not from the code; the property tests in tests/core/test_epoch_model.py,
tests/tf/test_epoch_model.py and tests/jax/test_epoch_model.py read each configuration hypothesis draws and compare
what came, sample by sample, with what this says.

The promises:

* ``plain`` (no ``with_epoch``): each reader reads its shards once, rank ``r`` taking ``order[r::ranks]`` and its
  worker ``w`` every ``workers``-th of those; so every sample comes exactly once from all readers together.
  ``interleave=K`` reads the same samples in another order.
* ``each`` (``with_epoch(n)``, webdataset's): each reader yields ``n``, reading its shards again (in the next
  epoch's order) when they end before; a reader whose shards hold nothing yields nothing.
* ``shared`` (``with_epoch(n)`` with ``shared_epoch()``, TensorFlow's ``epoch="all"``): ``n`` from a rank's
  workers together, worker ``w`` taking ``n // workers`` (the first ``n % workers`` one more), read as in ``each``;
  refused at construction when the rank's workers read unequal numbers of shards; of several workers, one whose
  shards hold fewer samples than its share warns that it repeats some.
* ``pad`` / ``drop`` (balanced): the epoch's order laid end to end as one sequence of ``N`` samples, reader
  ``r * workers + w`` of ``S = ranks * workers`` takes its consecutive part of ``N // S`` (``drop``) or
  ``ceil(N / S)`` (``pad``, continuing from the start of the sequence past its end).
* ``resampled``: each reader yields ``n`` samples drawn from the shards with replacement; none are promised in
  particular, but each is a sample of the dataset; over shards that hold none, an error instead of a stream that
  never ends.

Every mode: with ``empty_check``, a reader that yields nothing in an epoch that should give it something is an
``EmptyDatasetError``; a reader interrupted after any item and restored from its state yields the rest of the
uninterrupted run exactly.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from hypothesis import strategies as st

MODES = ("plain", "each", "shared", "pad", "drop", "resampled")
SEED = 7


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...]  # samples in each shard
    ranks: int
    workers: int
    mode: str
    n: int | None = None  # with_epoch(n)
    shuffle: bool = False
    interleave: int | None = None
    empty_check: bool = False
    batch: int | None = None  # batched_epoch(batch): a with_epoch epoch in batches of its samples
    resume: float = 0.0  # where each reader is interrupted, as a part of what it yields

    @property
    def total(self) -> int:
        return sum(self.sizes)


@st.composite
def configs(draw, modes=MODES, max_ranks=4, max_workers=4, batches=True):
    sizes = tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=7)))
    mode = draw(st.sampled_from(modes))
    total = sum(sizes)
    epoch = mode in ("each", "shared", "resampled")
    return Config(
        sizes=sizes,
        ranks=draw(st.integers(1, max_ranks)),
        workers=draw(st.integers(1, max_workers)),
        mode=mode,
        n=draw(st.integers(1, 2 * total + 3)) if epoch else None,
        shuffle=draw(st.booleans()) if mode != "resampled" else False,
        interleave=draw(st.sampled_from([None, 2, 3])) if mode == "plain" else None,
        empty_check=draw(st.booleans()),
        batch=draw(st.sampled_from([None, 1, 2, 3, 5])) if batches and mode in ("each", "shared") else None,
        resume=draw(st.floats(0, 1)),
    )


def shard_keys(sizes) -> list[list[str]]:
    """The keys of each shard, as ``tests.conftest.counted_shards`` writes them."""
    return [[f"s{s}-{i:05d}" for i in range(count)] for s, count in enumerate(sizes)]


def order(cfg: Config, epoch: int) -> list[int]:
    """The epoch's shard order: ``random.Random(seed + epoch)`` shuffles the list (the shard list's docstring)."""
    shards = list(range(len(cfg.sizes)))
    if cfg.shuffle:
        random.Random(SEED + epoch).shuffle(shards)
    return shards


def reader_pass(cfg: Config, rank: int, worker: int, epoch: int) -> list[str]:
    """One pass over the shards of reader ``(rank, worker)`` in epoch ``epoch``."""
    keys = shard_keys(cfg.sizes)
    mine = order(cfg, epoch)[rank :: cfg.ranks][worker :: cfg.workers]
    return [key for shard in mine for key in keys[shard]]


def share(n: int, worker: int, workers: int) -> int:
    return n // workers + (1 if worker < n % workers else 0)


def rank_shard_counts(cfg: Config, rank: int) -> list[int]:
    return [len(order(cfg, 0)[rank :: cfg.ranks][w :: cfg.workers]) for w in range(cfg.workers)]


@dataclass
class Expected:
    keys: list[str] | None  # in order; None: only the count and validity are promised (resampled)
    count: int = 0
    refused: bool = False  # a SpecError at construction
    empty_error: bool = False  # an EmptyDatasetError
    warns: bool = False  # a warning that the reader repeats samples of its shards
    any_order: bool = False  # the same samples, in any order (interleave)


def expected(cfg: Config, rank: int, worker: int) -> Expected:
    """What reader ``(rank, worker)`` yields in epoch 0, by the promises above."""
    mode, workers = cfg.mode, cfg.workers
    if mode == "plain":
        keys = reader_pass(cfg, rank, worker, 0)
        return Expected(keys, len(keys), empty_error=cfg.empty_check and not keys, any_order=bool(cfg.interleave))
    if mode == "resampled":
        if cfg.total == 0:
            return Expected(None, 0, empty_error=True)
        return Expected(None, cfg.n or 0)
    if mode in ("pad", "drop"):
        sequence = [key for shard in order(cfg, 0) for key in shard_keys(cfg.sizes)[shard]]
        readers, reader, size = cfg.ranks * workers, rank * workers + worker, len(sequence)
        each = size // readers if mode == "drop" else -(-size // readers)
        keys = [sequence[(reader * each + j) % size] for j in range(each)] if size else []
        return Expected(keys, len(keys), empty_error=cfg.empty_check and not keys)
    assert cfg.n is not None
    if mode == "shared" and workers > 1 and len(set(rank_shard_counts(cfg, rank))) > 1:
        return Expected([], refused=True)
    wanted = share(cfg.n, worker, workers) if mode == "shared" else cfg.n
    first = reader_pass(cfg, rank, worker, 0)
    if wanted == 0:
        return Expected([], 0)
    stream: list[str] = []
    for epoch in itertools.count():
        one = reader_pass(cfg, rank, worker, epoch)
        if not one or len(stream) >= wanted:
            break
        stream += one
    keys = stream[:wanted]
    warns = mode == "shared" and workers > 1 and 0 < len(first) < wanted
    return Expected(keys, len(keys), empty_error=cfg.empty_check and not keys, warns=warns)


def in_batches(keys: list[str], size: int | None) -> list[list[str]]:
    """``keys`` as the batches ``batched_epoch(size)`` makes of them (a short last one)."""
    if size is None:
        return [[key] for key in keys]
    return [keys[i : i + size] for i in range(0, len(keys), size)]


def key_of(sample):
    return sample["__key__"]
