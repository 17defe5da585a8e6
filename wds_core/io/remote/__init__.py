"""The remote engine: byte ranges of remote shards, many in flight, retried without loss.

``engine`` (the I/O thread pool and its bookkeeping), ``readahead`` (how far ahead ranges and shards are asked
for, within a memory budget), ``retries`` (the retry policy, which failures are transient, the retry counts) and
``rangestream`` (a shard as a stream of ranges, parsed as each arrives).  The backends that answer a range
request are in :mod:`wds_core.io.backends`.
"""
