"""Elastic resume: continue a balanced epoch on a different number of ranks or workers.

In a balanced epoch (:mod:`wds_core.sources.balanced`) every sample of the epoch has a
*global position* ``0 <= p < N`` in the epoch's shard order, and each reader
(one rank's worker) reads a known part of those positions.  The state of a
balanced pipeline therefore carries, besides its ordinary nested state, a
``"position"`` summary: which global positions this reader has delivered to
its consumer (and which it has not yet read).

:func:`merge_states` takes the states of *all* readers of one checkpoint (one
per rank and worker, in any nesting: pipeline states, ``Loader`` states,
torchdata ``StatefulDataLoader`` states, lists of them) and returns one
*elastic state*: the union of the consumed positions.  Loading it into the
same recipe on any number of ranks and workers (``load_state_dict``) makes the
readers split the positions not consumed yet, in the epoch's order, into equal
parts again; the remainder policy (``"pad"``: repeat from the start of what is
left, ``"drop"``: leave the last few for this epoch) applies to what is left,
so at most ``readers - 1`` samples repeat or are left out, none when it
divides evenly.  Later epochs run normally on the new layout.

What a reader has delivered is exact when the stages after the tar reader
keep the reader's order (per-sample stages such as ``map``, ``decode``,
``select``, ``to_tuple``; ``batched``; ``slice``), and through a ``shuffle``
buffer whose input is one item per sample read (it records which of the
samples since its snapshot are still buffered).  Other stages (``unbatched``,
mixing, user generators) make the summary unavailable, and merging says why.
Shuffle buffers after the reader start afresh on the new layout: the
*set* of samples of the rest of the epoch is exact, not their order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from .errors import CheckpointError, NotElastic
from .intervals import Intervals, decode, encode, normalize
from .state import (
    BalancedPart,
    ReportsDelivered,
    StageIterator,
    describe,
    implements,
    upstream_of,
)

__all__ = ["WindowProgress", "find_balanced", "is_merged", "merge_states", "reader_progress", "summary"]


# ------------------------------------------------------------------ summaries of live iterators


def find_balanced(it: Any) -> BalancedPart | None:
    """The balanced split upstream of ``it`` (walking declared ``src`` links), or ``None``."""
    while it is not None:
        if implements(it, BalancedPart):
            return it
        it = upstream_of(it)
    return None


def reader_progress(it: Any) -> tuple[int, Any]:
    """``(prefix, extra)``: the positions of the reader's part that ``it`` has delivered downstream."""
    if implements(it, ReportsDelivered):
        return it.delivered_positions()
    if isinstance(it, StageIterator) and it.passes_order:
        return reader_progress(it.src)
    raise NotElastic(f"the stage {describe(it)} does not keep track of which samples it has delivered")


class WindowProgress:
    """Reader progress at the snapshots of a stage that holds a window of items (shuffle, threaded decode)."""

    def __init__(self, name: str, keeps_positions: bool = False) -> None:
        self.name = name
        # a stage that keeps the positions its upstream reports at each snapshot (not a count of items since)
        # may read from another that holds samples back
        self.keeps_positions = keeps_positions
        self.balanced: bool | None = None
        self.nested: NotElastic | None = None

    def at_snapshot(self, src: Any) -> Any:
        """``(prefix, extra)`` of ``src`` now, ``None`` outside balanced epochs, or why it is unknown."""
        if self.balanced is None:
            self.balanced = find_balanced(src) is not None
            it = src
            while self.balanced and not self.keeps_positions and it is not None and not implements(it, BalancedPart):
                if implements(it, ReportsDelivered) and not it.in_order:
                    self.nested = NotElastic(
                        f"{self.name} reads from {describe(it)}, which also holds samples back; "
                        "keep one buffering stage (shuffle or decode(num_threads=)) between reader and output"
                    )
                it = upstream_of(it)
        if not self.balanced:
            return None
        if self.nested is not None:
            return self.nested
        try:
            return reader_progress(src)
        except NotElastic as exn:
            return exn

    def since(self, src: Any, at: Any, count: int, held: Any, check: bool = True) -> tuple[int, Any]:
        """The progress once the ``count`` items read since the snapshot ``at`` are delivered, except ``held``."""
        if isinstance(at, NotElastic):
            raise at
        if at is None:
            raise NotElastic(f"{self.name} has no position snapshot")
        prefix, extra = at
        if len(extra):
            raise NotElastic(f"{self.name} reads from another stage that holds samples back")
        if check:
            now, now_extra = reader_progress(src)
            if len(now_extra) or now - prefix != count:
                between = f"the stages between the tar reader and {self.name}"
                raise NotElastic(f"{between} do not pass on one item per sample")
        delivered = np.ones(count, dtype=bool)
        delivered[np.asarray(held, dtype=np.int64)] = False
        k = int(np.argmin(delivered)) if count and not delivered.all() else count
        return prefix + k, prefix + k + np.nonzero(delivered[k:])[0]


def summary(chain: Any) -> dict[str, Any] | None:
    """The ``"position"`` entry of a pipeline state (``None`` when the pipeline is not balanced)."""
    part = find_balanced(chain)
    if part is None:
        return None
    try:
        prefix, extra = reader_progress(chain)
    except NotElastic as exn:
        return {"unavailable": str(exn)}
    return part.summarize(prefix, extra)


class BalancedEpochs:
    """What the pipeline asks about balanced epochs (:class:`~wds_core.state.EpochTracker`)."""

    def position(self, chain: Any) -> dict[str, Any] | None:
        return summary(chain)

    def resume(self, chain: Any, elastic: dict[str, Any]) -> None:
        part = find_balanced(chain)
        if part is None:
            raise CheckpointError("an elastic state resumes a balanced epoch: WebDataset.balanced(...)")
        part.resume_elastic(elastic)


# ------------------------------------------------------------------ merging


def is_merged(state: Any) -> bool:
    """Whether ``state`` is an elastic state made by :func:`merge_states` (adapters pass it to their source)."""
    return isinstance(state, dict) and "elastic" in state and state.get("chain") is None


def _readers_in(obj: Any, complete: bool = False) -> Iterable[tuple[dict[str, Any], Any, bool]]:
    """``(pipeline state, position, finished)`` for every reader state inside ``obj``."""
    if isinstance(obj, dict):
        if "chain" in obj and "fingerprint" in obj:
            loader = _loader_state(obj["chain"]) if obj.get("position") is None else None
            if loader is None:
                yield obj, obj.get("position"), complete
            else:  # a pipeline whose source is a loader (wds_torch.WebLoader): the readers are its workers
                yield from _readers_in(loader, complete)
            return
        lag = obj.get("_steps_since_snapshot")
        if lag:  # a torchdata StatefulDataLoader state whose worker snapshots are older than its position
            raise CheckpointError(
                f"this loader's state is {lag} steps past its workers' snapshots; elastic resume needs a snapshot "
                "at every step: StatefulDataLoader(snapshot_every_n_steps=1), the default, or "
                "WebLoader(..., snapshot_every_n_steps=1)"
            )
        if "num_workers" in obj and isinstance(obj.get("workers"), list):  # a wds_core.Loader state
            for w, entry in enumerate(obj["workers"]):
                if not entry or entry.get("state") is None:
                    continue
                position = entry.get("position")
                if position is None:
                    position = entry["state"].get("position")
                    if entry.get("skip") and not entry.get("done") and position is not None:
                        raise CheckpointError(f"Loader worker {w}'s state has no position after its last item")
                yield entry["state"], position, bool(entry.get("done"))
            return
        for value in obj.values():
            yield from _readers_in(value, complete)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _readers_in(value, complete)


def _loader_state(chain: Any) -> Any:
    """The state of the loader a pipeline reads (``{"loader": ..., "epochs_started": ...}``, a WebLoader's), through
    stages that keep nothing of their own; ``None`` when it reads none.  A stage of its own after the loader (a
    shuffle, a rebatching) holds samples the workers delivered: their positions cannot be merged."""
    while isinstance(chain, dict):
        if "loader" in chain and "epochs_started" in chain:
            return chain["loader"]
        if set(chain) != {"parent"}:
            if _loader_state(chain.get("parent")) is not None:
                raise CheckpointError(
                    "this loader has stages of its own after its workers (a shuffle, a rebatching...), which hold "
                    "samples the workers delivered: elastic resume needs those stages in the dataset, before the "
                    "loader"
                )
            return None
        chain = chain["parent"]
    return None


def merge_states(*states: Any) -> dict[str, Any]:
    """One elastic state from the states of every reader of a balanced epoch (see the module doc).

    Give all of them: one per rank, each holding its workers' states (as a
    ``StatefulDataLoader``, ``Loader``, ``BatchIterator`` or pipeline returns
    them).  A missing reader, readers of different checkpoints or recipes, or
    a pipeline whose position is unavailable raise :class:`CheckpointError`.
    """
    found = list(_readers_in(list(states)))
    if not found:
        raise CheckpointError("no wds pipeline state found in what was given to merge_states()")
    first = found[0][0]
    readers: dict[int, tuple[dict[str, Any], bool]] = {}
    expected: int | None = None
    for state, position, complete in found:
        for key in ("fingerprint", "seed", "epoch", "rep"):
            if state.get(key) != first.get(key):
                raise CheckpointError(f"the states differ in {key!r}: they are not from one checkpoint of one recipe")
        if "elastic" in state and state.get("chain") is None:
            raise CheckpointError("merge_states() takes the readers' states, not an already merged state")
        if position is None:
            raise CheckpointError("elastic resume needs a balanced epoch: WebDataset.balanced(urls, 'pad' or 'drop')")
        if "unavailable" in position:
            raise CheckpointError(f"this pipeline's position in the epoch is unknown: {position['unavailable']}")
        reader, count = position["reader"]
        if expected is None:
            expected, total, policy = count, position["total"], position["policy"]
        if count != expected or position["total"] != total or position["policy"] != policy:
            raise CheckpointError("the states come from different splits of the epoch")
        if reader in readers and readers[reader][0] != position:
            raise CheckpointError(f"two different states for reader {reader} of {count}")
        readers[reader] = (position, complete)
    missing = sorted(set(range(expected or 0)) - set(readers))
    if missing:
        raise CheckpointError(
            f"states of readers {missing} of {expected} are missing: give the states of every rank "
            "(each with all its workers) to merge_states()"
        )
    consumed: Intervals = []
    for position, complete in readers.values():
        consumed += decode(position["consumed"])
        if "scattered" in position:
            consumed += decode(position["scattered"])
        if complete:  # a finished reader read all of its part, delivered or not
            consumed += decode(position["part"])
    return {
        "format": first["format"],
        "fingerprint": first["fingerprint"],
        "seed": first["seed"],
        "epoch": first["epoch"],
        "rep": first["rep"],
        "chain": None,
        "elastic": {"total": total, "policy": policy, "consumed": encode(normalize(consumed)), "readers": expected},
    }
