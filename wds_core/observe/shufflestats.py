"""How well an epoch's order mixes the order of storage: the measures ``wds stats --shuffle`` reports.

A streaming shuffle reads shards in some order and mixes what it holds; with shards stored in order (a
class, a source, a crawl date per shard) a batch that holds samples of few shards is a biased batch.  Two
measures, each given against what a global shuffle (a uniform random permutation of the epoch) gives:

* **batch diversity**: the mean number of distinct shards in a batch of ``batch_size`` consecutive samples
  of the epoch, over what a global shuffle gives on average (the exact expectation of drawing that many
  samples without replacement from shards of these sizes); 1.0 is as good as a global shuffle;
* **displacement**: the mean distance between a sample's place in the epoch and its place in storage (the
  shards in their listed order, each in its own order), as a share of the epoch; a global shuffle gives
  about 1/3, reading in storage order 0.

    quality = shuffle_quality(order, storage, batch_size=256)
    quality.diversity_ratio, quality.displacement  # 0.25, 0.02 for shuffle=True + .shuffle(1000) on 100-sample shards

Shards that were already shuffled as a whole (``wds reshard --shuffle``) each hold a fair mix of the data, and
then a batch from few shards costs nothing: what a user cares about is the mix of a label.  **Label mixing**
measures it: the effective number of labels in a batch (the exponential of the entropy of its labels: 2.0 for
a half-and-half batch of two labels, 1.0 for one label, about 226 for 256 samples of 1,000 equally common
classes), for the epoch, for batches read in storage order, and for a global shuffle (the mean of a few
seeded permutations of the same labels)::

    mixing = label_mixing("cls", labels_in_epoch_order, labels_in_storage_order, batch_size=256)
    mixing.ratio, mixing.storage_ratio  # 1.0: as mixed as a global shuffle; storage_ratio 1.0: already shuffled
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LabelMixing", "ShuffleQuality", "effective_labels", "expected_distinct", "label_mixing", "shuffle_quality",
           "storage_order"]  # fmt: skip


@dataclass(frozen=True)
class ShuffleQuality:
    """The measures of one epoch's order (see the module doc)."""

    samples: int
    shards: int
    batch_size: int
    distinct_per_batch: float  # mean distinct shards in a batch of the epoch
    global_distinct_per_batch: float  # the same for a global shuffle (expected)
    diversity_ratio: float  # the first over the second
    displacement: float  # mean |place in the epoch - place in storage| / samples
    global_displacement: float  # the same for a global shuffle (expected: (samples² - 1) / (3 samples²))
    distinct_by_batch: tuple[int, ...] = dataclasses.field(default=(), repr=False)  # each batch's, in epoch order

    def as_dict(self) -> dict[str, Any]:
        """The measures (not the per-batch counts)."""
        return {name: value for name, value in vars(self).items() if name != "distinct_by_batch"}


@dataclass(frozen=True)
class LabelMixing:
    """How well an epoch mixes a label field (see the module doc)."""

    field: str
    labels: int  # distinct values of the field in the epoch
    batch_size: int
    effective_per_batch: float  # mean effective number of labels in a batch of the epoch
    global_effective_per_batch: float  # the same for a global shuffle (mean of seeded permutations)
    storage_effective_per_batch: float  # the same for batches read in storage order
    ratio: float  # the epoch's over the global shuffle's: 1.0 is as mixed as a global shuffle
    storage_ratio: float  # storage order's over the global shuffle's: near 1.0, the shards are already mixed
    effective_by_batch: tuple[float, ...] = dataclasses.field(default=(), repr=False)  # each batch's, in epoch order

    def as_dict(self) -> dict[str, Any]:
        """The measures (not the per-batch values)."""
        return {name: value for name, value in vars(self).items() if name != "effective_by_batch"}


def effective_labels(codes: np.ndarray, batch_size: int) -> np.ndarray:
    """The effective number of labels (exp of the entropy) of each batch of ``batch_size`` consecutive ``codes``
    (a last, shorter batch is left out unless it is the only one)."""
    batches = max(len(codes) // batch_size, 1)
    out = np.empty(batches)
    for i in range(batches):
        _, counts = np.unique(codes[i * batch_size : (i + 1) * batch_size], return_counts=True)
        shares = counts / counts.sum()
        out[i] = math.exp(-float((shares * np.log(shares)).sum()))
    return out


def label_mixing(
    field_name: str,
    epoch: Sequence[Hashable],
    storage: Sequence[Hashable],
    batch_size: int = 256,
    trials: int = 8,
    seed: int = 0,
) -> LabelMixing:
    """The mixing of ``field_name``'s values, given in epoch order (``epoch``) and in storage order
    (``storage``: the values of all of the epoch's samples, in the order they are stored)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if not len(epoch):
        raise ValueError("the epoch is empty")
    values = {value: code for code, value in enumerate(dict.fromkeys([*epoch, *storage]))}
    in_epoch = np.fromiter((values[v] for v in epoch), dtype=np.int64, count=len(epoch))
    in_storage = np.fromiter((values[v] for v in storage), dtype=np.int64, count=len(storage))
    batch = min(batch_size, len(in_epoch))
    by_batch = effective_labels(in_epoch, batch)
    rng = np.random.default_rng(seed)
    shuffled = float(np.mean([effective_labels(rng.permutation(in_epoch), batch).mean() for _ in range(trials)]))
    stored = float(effective_labels(in_storage, batch).mean())
    mean = float(by_batch.mean())
    return LabelMixing(
        field=field_name,
        labels=len(np.unique(in_epoch)),
        batch_size=batch,
        effective_per_batch=mean,
        global_effective_per_batch=shuffled,
        storage_effective_per_batch=stored,
        ratio=mean / shuffled,
        storage_ratio=stored / shuffled,
        effective_by_batch=tuple(float(x) for x in by_batch),
    )


def storage_order(shards: Iterable[Iterable[Hashable]]) -> dict[Hashable, tuple[int, int]]:
    """``{sample id: (shard number, place in storage)}`` from the ids of each shard's samples, shards in order."""
    where: dict[Hashable, tuple[int, int]] = {}
    place = 0
    for number, ids in enumerate(shards):
        for sample_id in ids:
            if sample_id in where:
                raise ValueError(f"sample {sample_id!r} is stored twice")
            where[sample_id] = (number, place)
            place += 1
    return where


def expected_distinct(sizes: Sequence[int], batch_size: int) -> float:
    """The expected number of distinct shards among ``batch_size`` samples drawn without replacement from
    shards of ``sizes`` samples: the sum over shards of the chance that at least one of its samples is drawn."""
    total = sum(sizes)
    draw = min(batch_size, total)
    if draw <= 0:
        return 0.0
    log_all = math.lgamma(total + 1) - math.lgamma(draw + 1) - math.lgamma(total - draw + 1)
    expected = 0.0
    for size in sizes:
        if total - size < draw:  # every draw takes one of its samples
            expected += 1.0
            continue
        log_none = math.lgamma(total - size + 1) - math.lgamma(draw + 1) - math.lgamma(total - size - draw + 1)
        expected += 1.0 - math.exp(log_none - log_all)
    return expected


def shuffle_quality(
    order: Iterable[Hashable], storage: dict[Hashable, tuple[int, int]], batch_size: int = 256
) -> ShuffleQuality:
    """The measures of the epoch ``order`` (sample ids, as delivered) against ``storage``
    (:func:`storage_order`).  Every id in ``order`` must be in ``storage``; batches are the consecutive runs of
    ``batch_size`` (a last, shorter one is left out unless it is the only one)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    shard_of, place = [], []
    for sample_id in order:
        if sample_id not in storage:
            raise ValueError(f"sample {sample_id!r} of the epoch is not in the storage order")
        shard, stored = storage[sample_id]
        shard_of.append(shard)
        place.append(stored)
    count = len(shard_of)
    if count == 0:
        raise ValueError("the epoch is empty")
    shards = np.asarray(shard_of)
    batches = max(count // batch_size, 1)
    distinct = [len(np.unique(shards[i * batch_size : (i + 1) * batch_size])) for i in range(batches)]
    delivered = np.bincount(shards)
    sizes = [int(n) for n in delivered if n > 0]  # the shards this epoch drew from, with what it took of them
    expected = expected_distinct(sizes, min(batch_size, count))
    # displacement against the epoch's own storage order (a part of the data, a rank's share, compares with itself)
    ranks = np.empty(count, dtype=np.int64)
    ranks[np.argsort(np.asarray(place), kind="stable")] = np.arange(count)
    displacement = float(np.abs(ranks - np.arange(count)).mean()) / count
    mean_distinct = float(np.mean(distinct))
    return ShuffleQuality(
        samples=count,
        shards=len(sizes),
        batch_size=batch_size,
        distinct_per_batch=mean_distinct,
        global_distinct_per_batch=expected,
        diversity_ratio=mean_distinct / expected if expected > 0 else 0.0,
        displacement=displacement,
        global_displacement=(count * count - 1) / (3 * count * count),
        distinct_by_batch=tuple(distinct),
    )
