"""Several ranks with torch.distributed (gloo on 127.0.0.1), each with DataLoader workers: shards split by both."""

import json
import os

import pytest

torch = pytest.importorskip("torch")

from tests.conftest import make_samples, write_shard  # noqa: E402
from tests.servers import free_port  # noqa: E402

pytestmark = pytest.mark.slow  # several ranks (gloo) with DataLoader workers


def _rank_main(rank, world, port, spec, out_dir, context):
    import torch.distributed as dist

    import wds_torch as wds

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        dataset = wds.WebDataset(spec, seed=3, shuffle=True).to_tuple("__key__")
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


def _balanced_rank(rank, world, port, spec, out_dir):
    from datetime import timedelta

    import torch.distributed as dist

    import wds_torch as wds

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    try:
        dataset = wds.WebDataset.balanced(spec, seed=7, how="drop", shuffle=True).to_tuple("__key__").batched(3)
        loader = torch.utils.data.DataLoader(dataset, num_workers=2, batch_size=None)
        keys, steps = [], 0
        for epoch in range(2):
            dataset.set_epoch(epoch)
            for batch in loader:  # a training step: every rank must take part, or all_reduce hangs
                step = torch.tensor([1.0])
                dist.all_reduce(step)
                assert step.item() == world
                keys += [f"{epoch}:{key}" for key in batch[0]]
                steps += 1
        with open(os.path.join(out_dir, f"balanced-{rank}.json"), "w") as stream:
            json.dump({"keys": keys, "steps": steps}, stream)
    finally:
        dist.destroy_process_group()


def test_balanced_epochs_on_four_ranks_take_equal_steps(tmp_path):
    keys = []
    for s, n in enumerate([9, 14, 3, 11, 7, 6, 10, 1]):  # 61 samples in uneven shards
        samples = make_samples(f"s{s}-", n)
        keys += [x["__key__"] for x in samples]
        write_shard(tmp_path / f"b-{s}.tar", samples)
    spec = str(tmp_path / "b-{0..7}.tar")
    torch.multiprocessing.spawn(_balanced_rank, args=(4, free_port(), spec, str(tmp_path)), nprocs=4, join=True)
    results = [json.loads((tmp_path / f"balanced-{r}.json").read_text()) for r in range(4)]
    assert len({r["steps"] for r in results}) == 1  # equal step counts: nobody waits at the end
    for epoch in range(2):
        seen = [k.split(":", 1)[1] for r in results for k in r["keys"] if k.startswith(f"{epoch}:")]
        assert len(seen) == len(set(seen)) == (61 // 8) * 8  # each sample at most once, 8 readers x 7
        assert set(seen) <= set(keys)


def _resume_rank(rank, world, port, spec, out_dir, stop_after):
    """Run an epoch (the rest of one, where a state was saved); with stop_after, save the loader's state after that
    many steps, as a job killed there would have, and go on (the uninterrupted run, to compare with)."""
    from datetime import timedelta

    import torch.distributed as dist
    from torchdata.stateful_dataloader import StatefulDataLoader

    import wds_torch as wds

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    try:
        dataset = wds.WebDataset.balanced(spec, seed=2, how="pad", shuffle=True).shuffle(5).to_tuple("__key__")
        loader = StatefulDataLoader(dataset.batched(2), num_workers=2, batch_size=None)
        saved = os.path.join(out_dir, f"state-{rank}.json")
        if stop_after is None and os.path.exists(saved):  # the restarted job
            with open(saved) as stream:
                loader.load_state_dict(json.load(stream))
        restarted, keys = os.path.exists(saved), []
        for step, batch in enumerate(loader):
            flag = torch.tensor([1.0])
            dist.all_reduce(flag)
            keys += list(batch[0])
            if stop_after is not None and step + 1 == stop_after:  # the state a job killed here would have saved
                with open(saved, "w") as stream:
                    json.dump(loader.state_dict(), stream)
        with open(os.path.join(out_dir, f"{'rest' if restarted else 'full'}-{rank}.json"), "w") as stream:
            json.dump(keys, stream)
    finally:
        dist.destroy_process_group()


def test_four_ranks_killed_at_step_k_resume_the_same_stream(tmp_path):
    pytest.importorskip("torchdata.stateful_dataloader")
    for s, n in enumerate([9, 14, 3, 11, 7, 6, 10, 1]):
        write_shard(tmp_path / f"k-{s}.tar", make_samples(f"s{s}-", n))
    spec = str(tmp_path / "k-{0..7}.tar")
    spawn = torch.multiprocessing.spawn
    spawn(_resume_rank, args=(4, free_port(), spec, str(tmp_path), 2), nprocs=4, join=True)  # the state at step 2
    spawn(_resume_rank, args=(4, free_port(), spec, str(tmp_path), None), nprocs=4, join=True)  # restarted from it
    for rank in range(4):
        full, rest = (json.loads((tmp_path / f"{t}-{rank}.json").read_text()) for t in ("full", "rest"))
        assert len(full) > 4 and full[:4] + rest == full  # two batches of 2, then the same stream


def _elastic_rank(rank, world, port, spec, out_dir, stop_after):
    from datetime import timedelta

    import torch.distributed as dist
    from torchdata.stateful_dataloader import StatefulDataLoader

    import wds_torch as wds

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    try:
        dataset = wds.WebDataset.balanced(spec, seed=4, how="pad", shuffle=True).shuffle(5).to_tuple("__key__")
        dataset = dataset.batched(2)
        checkpoint = os.path.join(out_dir, "elastic-checkpoint.json")
        if stop_after is None:  # the job restarted on fewer ranks: every old rank's state, merged
            with open(checkpoint) as stream:
                dataset.load_state_dict(wds.merge_states(json.load(stream)))
        loader = StatefulDataLoader(dataset, num_workers=2, batch_size=None)
        keys, steps = [], 0
        for batch in loader:
            steps += 1
            keys += list(batch[0])
            if stop_after is not None and steps == stop_after:
                states = [None] * world
                dist.all_gather_object(states, loader.state_dict())
                if rank == 0:
                    with open(checkpoint, "w") as stream:
                        json.dump(states, stream)
                break
        counts = [None] * world
        dist.all_gather_object(counts, steps)
        tag = "before" if stop_after is not None else "after"
        with open(os.path.join(out_dir, f"elastic-{tag}-{rank}.json"), "w") as stream:
            json.dump({"keys": keys, "steps": counts}, stream)
    finally:
        dist.destroy_process_group()


def test_a_checkpoint_on_four_ranks_resumes_on_two(tmp_path):
    """4 ranks x 2 workers stop at step 3 (24 of 64 samples); 2 ranks x 2 workers read the other 40, once each."""
    pytest.importorskip("torchdata.stateful_dataloader")
    keys = []
    for s, n in enumerate([9, 14, 3, 11, 7, 6, 10, 4]):
        samples = make_samples(f"s{s}-", n)
        keys += [x["__key__"] for x in samples]
        write_shard(tmp_path / f"e-{s}.tar", samples)
    spec = str(tmp_path / "e-{0..7}.tar")
    spawn = torch.multiprocessing.spawn
    spawn(_elastic_rank, args=(4, free_port(), spec, str(tmp_path), 3), nprocs=4, join=True)
    spawn(_elastic_rank, args=(2, free_port(), spec, str(tmp_path), None), nprocs=2, join=True)
    before = [json.loads((tmp_path / f"elastic-before-{r}.json").read_text()) for r in range(4)]
    after = [json.loads((tmp_path / f"elastic-after-{r}.json").read_text()) for r in range(2)]
    head = [k for b in before for k in b["keys"]]
    rest = [k for a in after for k in a["keys"]]
    assert len(head) == 24 and len(rest) == 40
    assert sorted(head + rest) == sorted(keys), "every sample exactly once across the two jobs"
    assert after[0]["steps"] == [10, 10], "both new ranks take the same number of steps"
