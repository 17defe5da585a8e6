"""Remote reading at scale through PyTorch (issue 69): no start-up storm from a DataLoader's workers, and hf://
shards through the Loader, a DataLoader with workers and the drop-in's WebDataset."""

from __future__ import annotations

import os
import re
import time

import pytest

torch = pytest.importorskip("torch")

import wds_core  # noqa: E402
import wds_torch  # noqa: E402
from tests.conftest import write_shard  # noqa: E402
from tests.hubserver import HubServer  # noqa: E402
from tests.servers import HttpServer, Shape  # noqa: E402
from wds_core.io.backends import hf  # noqa: E402

SAMPLE = 64 << 10
BATCH = 16  # samples: a first batch of 1 MiB


def big_shards(root, n=8, per=64):
    os.makedirs(root, exist_ok=True)
    for s in range(n):
        samples = [{"__key__": f"s{s}_{i:04d}", "bin": os.urandom(SAMPLE)} for i in range(per)]
        write_shard(os.path.join(root, f"big-{s:03d}.tar"), samples, ("bin",))


def asked(ranges):
    """The bytes the ``Range`` headers ``ranges`` asked for."""
    total = 0
    for text in ranges:
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", text)
        total += int(match.group(2)) - int(match.group(1)) + 1 if match else 0
    return total


def collate(samples):
    return [sample["__key__"] for sample in samples]


@pytest.mark.parametrize("workers", [4])
def test_a_dataloaders_workers_ask_for_their_first_batches_before_anything_ahead(tmp_path, workers):
    """What a DataLoader(W) asks for before its first batch: at most four requests a worker (+4) and four times
    the batches' bytes (each worker makes its first batch at once) -- not every worker priming shards ahead."""
    root = str(tmp_path / "store")
    big_shards(root)
    server = HttpServer(root, shape=Shape(latency=0.02))
    try:
        spec = server.url + "/big-{000..007}.tar"
        dataset = wds_torch.WebDataset(spec)
        loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH, num_workers=workers, collate_fn=collate)
        stream = iter(loader)
        first = next(stream)
        requests, ranges = server.gets + server.heads, list(server.ranges)
        assert len(first) == BATCH
        batch_bytes = BATCH * (SAMPLE + 512)
        assert requests <= 4 * workers + 4, ranges
        assert asked(ranges) <= 4 * workers * batch_bytes, (asked(ranges), ranges)
        rest = [key for batch in stream for key in batch]
        assert len(first) + len(rest) == 8 * 64  # and then everything, once
        assert len(set(first + rest)) == 8 * 64
    finally:
        server.stop()


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    server = HubServer(token="hf_torch_token_789")
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", "hf_torch_token_789")
    hf.RESOLVED.clear()
    root = tmp_path / "shards"
    big_shards(str(root), n=4, per=12)
    for name in sorted(os.listdir(root)):
        server.add("dataset", "team/hub", f"train/{name}", (root / name).read_bytes())
    server.private.add("team/hub")
    yield server
    hf.RESOLVED.clear()
    server.stop()


EXPECTED = sorted(f"s{s}_{i:04d}" for s in range(4) for i in range(12))
SPEC = "hf://datasets/team/hub/train/big-{000..003}.tar"


def test_hf_shards_through_the_loader(hub):
    loader = wds_torch.Loader(wds_core.WebDataset(SPEC).batched(4, collation_fn=collate), num_workers=2)
    assert sorted(key for batch in loader for key in batch) == EXPECTED
    assert hub.resolves == 4  # each shard resolved once, by the worker process that read it


def test_hf_shards_through_a_dataloader_with_workers(hub):
    dataset = wds_torch.WebDataset(SPEC)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate)
    started = time.monotonic()
    got = sorted(key for batch in loader for key in batch)
    assert got == EXPECTED and time.monotonic() - started < 60
    assert hub.resolves == 4  # each shard resolved once, by the worker that read it
    assert not any("Authorization" in headers for *_, headers in hub.storage.requests)


def test_hf_shards_through_the_dropins_webdataset(hub):
    from wds_core.dropin import WebDataset

    dataset = WebDataset(SPEC, shardshuffle=False).to_tuple("__key__")
    assert sorted(key for (key,) in dataset) == EXPECTED
