"""Tar shards at the member level: reading with offsets, grouping, offset indexes, writing members.

* :mod:`.headers` -- the fields of one 512-byte header (numbers, checksums,
  names, pax records), shared by the reader and the indexer;
* :mod:`.tario` -- the streaming reader: :func:`iter_members` yields
  ``(name, data, offset)`` and reads compressed shards transparently;
  :mod:`.source` gives it exact reads from a stream, and :mod:`.compiled`
  the optional C walk of plain members (``tarscan.c``);
* :mod:`.tarindex` -- offset indexes of shards (``.idx`` sidecars), built by
  the same walk (:mod:`.walk`) over the shard read by offset, headers alone:
  :func:`index_shard`;
* :mod:`.tarwrite` -- members packed into tar bytes for the writers;
* :mod:`.keys` -- webdataset's key rules (:func:`split_key`, :func:`is_meta`):
  which sample and field a member's name stands for.

* :mod:`.grouping` -- members to samples by those rules (:func:`group_members`).

This package reads and writes members and imports nothing from the layers
above it (errors, limits and storage lie below).  These are the expert
interface: ``WebDataset`` and the writers use them for you.
"""

from .grouping import group_members
from .headers import BLOCK
from .keys import is_meta, split_key
from .tarindex import INDEX_FORMAT, ShardIndex, index_shard, stored_index, walk_headers
from .tario import compiled_walk, iter_members, open_decompressed
from .tarwrite import encode_member, end_of_archive

__all__ = [
    "BLOCK",
    "INDEX_FORMAT",
    "ShardIndex",
    "compiled_walk",
    "encode_member",
    "end_of_archive",
    "group_members",
    "index_shard",
    "is_meta",
    "iter_members",
    "open_decompressed",
    "split_key",
    "stored_index",
    "walk_headers",
]
