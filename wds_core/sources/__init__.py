"""Where samples come from: shard lists and their splits, reading shards (plain, K at once, balanced),
spec files, record streams, sample counts and descriptors."""
