"""Bytes in and out: every shard is opened and written through :mod:`.storage`.

The layer below the tar reader; its modules import only :mod:`wds_core.errors`
and each other.

* :mod:`.urls` -- brace patterns, ``::`` lists and environment variables to URLs;
* :mod:`.shardnames` -- the same URLs as a sequence computed on demand, for specs
  naming many shards (a range stays a range);
* :mod:`.storage` -- the storage context (:class:`Storage`): every URL rewritten,
  checked, cached and handed to its backend, for streaming (:func:`open_shard`),
  random access and writing (:func:`create_shard`);
* :mod:`.backends` -- one backend per kind of URL behind one protocol, found by scheme
  (:func:`~.backends.route`): local files and ``-``, ``pipe:``, HTTP(S), S3, every
  other fsspec filesystem, registered openers and backends; what was registered is
  kept in one table (:mod:`.registry`);
* :mod:`.storage_config` -- storage options and rewrites per URL prefix, from
  code, the environment or the config file;
* :mod:`.remote` and :mod:`.readahead` -- the remote engine: ranged, retried,
  resuming reads of remote objects, many ranges in flight on one I/O pool;
* :mod:`.cache` -- the local shard cache;
* :mod:`.decompress` -- gzip, bz2, xz and zstd shards by their magic bytes;
* :mod:`.destinations` -- atomic shard destinations: local files and streams (remote ones are their backends');
* :mod:`.secure` -- secure mode: no commands, no local paths outside allowed roots, no pickles;
* :mod:`.files` -- the one gate for local files: every file the package opens, creates, renames, lists or
  removes, secure mode applied there (no other module makes a file call; :mod:`.commands` alone starts processes);
* :mod:`.forklocks` -- every lock and event of the package, made anew in a forked child;
* :mod:`.streams` -- the small stream base classes the others share.

The names below are the expert interface (custom schemes, per-prefix options,
opening a shard by hand); pipelines rarely need them.
"""

from .backends import Backend, register_backend
from .cache import ShardCache
from .decompress import is_compressed
from .remote.rangestream import RetryPolicy
from .secure import secure_mode, set_secure
from .storage import Storage, create_shard, open_random_access, open_shard, read_bytes, register_opener, url_of
from .storage_config import (
    StorageOptions,
    options_for,
    register_rewrite,
    register_storage,
    rewrite_url,
    unregister_rewrite,
    unregister_storage,
)
from .urls import expand_urls, join_url

__all__ = [
    "Backend",
    "RetryPolicy",
    "ShardCache",
    "Storage",
    "StorageOptions",
    "create_shard",
    "expand_urls",
    "is_compressed",
    "join_url",
    "open_random_access",
    "open_shard",
    "options_for",
    "read_bytes",
    "register_backend",
    "register_opener",
    "register_rewrite",
    "register_storage",
    "rewrite_url",
    "secure_mode",
    "set_secure",
    "unregister_rewrite",
    "unregister_storage",
    "url_of",
]
