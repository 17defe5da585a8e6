import pytest

torch = pytest.importorskip("torch")

import wds_torch as wds  # noqa: E402


@pytest.mark.slow
def test_map_style_dataset_with_distributed_sampler_and_workers(shards):
    spec, _, keys = shards
    dataset = wds.ShardListDataset(spec, transformations=[lambda s: s["__key__"]])
    assert isinstance(dataset, torch.utils.data.Dataset)
    seen = []
    for rank in range(2):
        sampler = wds.DistributedChunkedSampler(dataset, num_replicas=2, rank=rank, chunksize=10, seed=1)
        assert isinstance(sampler, torch.utils.data.Sampler)
        sampler.set_epoch(3)
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2)
        seen += [key for batch in loader for key in batch]
    assert sorted(seen) == sorted(keys)  # 100 samples, 50 per rank, each once
