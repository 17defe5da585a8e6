"""webdataset-compatible lowercase names at the top of ``wds_core``: those of the drop-in (:mod:`wds_core.dropin`,
where each is defined once), and ``Processor``.

``wds.shuffle(1000)``, ``wds.batched(16)``, ``wds.to_tuple("jpg", "json")``... build
the same stage objects as ``Shuffle(1000)``, ``Batch(16)``, ``ToTuple(...)``.
"""

from __future__ import annotations

from typing import Any

from .collate import default_collation_fn
from .dropin.filters import batched, map, map_dict, map_tuple, rename, select, shuffle, slice, to_tuple, unbatched
from .shardreader import tarfile_to_samples
from .shards import single_node_only, split_by_node, split_by_worker

__all__ = [
    "Processor",
    "batched",
    "default_collation_fn",
    "map",
    "map_dict",
    "map_tuple",
    "rename",
    "select",
    "shuffle",
    "single_node_only",
    "slice",
    "split_by_node",
    "split_by_worker",
    "tarfile_to_samples",
    "to_tuple",
    "unbatched",
]


class Processor:
    """webdataset's stage wrapper: ``Processor(wds.map, fn)(dataset)`` is ``dataset`` followed by ``wds.map(fn)``.

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
