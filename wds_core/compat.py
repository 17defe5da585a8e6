"""webdataset-compatible lowercase names, as thin aliases of the core recipes.

``wds.shuffle(1000)``, ``wds.batched(16)``, ``wds.to_tuple("jpg", "json")``... build
the same stage objects as ``Shuffle(1000)``, ``Batch(16)``, ``ToTuple(...)``.
"""

from __future__ import annotations

from .buffers import Batch, Shuffle, Slice, Unbatch
from .collate import default_collation_fn
from .samples import tarfile_to_samples
from .shards import single_node_only, split_by_node, split_by_worker
from .stages import Map, MapDict, MapTuple, Rename, Select, ToTuple

__all__ = [
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

shuffle = Shuffle
batched = Batch
unbatched = Unbatch
slice = Slice
map = Map
map_dict = MapDict
map_tuple = MapTuple
select = Select
to_tuple = ToTuple
rename = Rename
