"""Whole-dataset jobs: ``map_shards`` (one function over every shard, in parallel)."""
