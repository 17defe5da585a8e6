"""Fixtures of the torch adapter's tests."""

import pytest

from tests.conftest import write_shard


@pytest.fixture(scope="module")
def photo_shards(tmp_path_factory):
    """Four shards of 12 photo-like JPEGs of three sizes with a class each: ``shard-{0..3}.tar``."""
    from tests.torch.test_devicecut import photo

    root = tmp_path_factory.mktemp("photos")
    for s in range(4):
        samples = [{"__key__": f"s{s}-{i:03d}", "jpg": photo(s * 100 + i, *((375, 500), (500, 333), (600, 800))[i % 3]),
                    "cls": b"%d" % ((s * 100 + i) % 7)} for i in range(12)]  # fmt: skip
        write_shard(root / f"shard-{s}.tar", samples, ("jpg", "cls"))
    return str(root / "shard-{0..3}.tar")
