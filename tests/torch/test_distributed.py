"""Several ranks with torch.distributed (gloo on 127.0.0.1), each with DataLoader workers: shards split by both."""

import json
import os

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import make_samples, write_shard  # noqa: E402
from tests.servers import free_port  # noqa: E402


def _rank_main(rank, world, port, spec, out_dir, context):
    import torch.distributed as dist

    import wds_torch as wds

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        dataset = wds.WebDataset(spec, shardshuffle=True, seed=3).to_tuple("__key__")
        loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None, multiprocessing_context=context)
        keys = [key for (key,) in loader]
        with open(os.path.join(out_dir, f"rank-{rank}.json"), "w") as stream:
            json.dump(keys, stream)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_ranks_and_workers_split_the_shards(tmp_path, context):
    keys = []
    for s in range(8):
        samples = make_samples(f"s{s}-", 5)
        keys += [x["__key__"] for x in samples]
        write_shard(tmp_path / f"r-{s}.tar", samples)
    spec = str(tmp_path / "r-{0..7}.tar")
    torch.multiprocessing.spawn(_rank_main, args=(2, free_port(), spec, str(tmp_path), context), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    assert not set(got[0]) & set(got[1])
    assert sorted(got[0] + got[1]) == sorted(keys)
    assert len(got[0]) == len(got[1]) == 20
