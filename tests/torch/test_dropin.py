"""wds_torch as webdataset: its module tree, the one-line switch, and shuffles that never duplicate samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

torch = pytest.importorskip("torch")

import wds_torch  # noqa: E402
from tests.conftest import make_samples, write_shard  # noqa: E402
from tests.servers import free_port  # noqa: E402

SUBMODULES = (
    "autodecode cache cborsiterators compat extradatasets filters gopen handlers mix multi pipeline pytorch "
    "shardlists tariterators tenbin utils writer"
).split()


def test_every_public_name_of_webdataset_1_0_2_is_here():
    webdataset = pytest.importorskip("webdataset")
    public = [name for name in dir(webdataset) if not name.startswith("_")]
    assert len(public) == 83
    assert [name for name in public if not hasattr(wds_torch, name)] == []


def test_submodules_hold_the_torch_classes():
    iterable = torch.utils.data.IterableDataset
    for name in SUBMODULES:
        if name != "gopen":  # webdataset.gopen is the function; the module is only in sys.modules
            assert sys.modules[f"wds_torch.{name}"] is getattr(wds_torch, name)
    assert callable(wds_torch.gopen) and wds_torch.gopen is sys.modules["wds_torch.gopen"].gopen
    # webdataset's WebLoader leaves the dataset's epoch to the code (issue 44); wds_torch's tells it each epoch
    assert issubclass(wds_torch.compat.WebLoader, wds_torch.WebLoader) and not wds_torch.compat.WebLoader.sets_epoch
    assert wds_torch.pipeline.DataPipeline is wds_torch.DataPipeline
    assert wds_torch.pytorch.IterableDataset is iterable and wds_torch.pytorch.DataLoader is torch.utils.data.DataLoader
    for cls in (
        wds_torch.shardlists.SimpleShardList,
        wds_torch.shardlists.ResampledShards,
        wds_torch.extradatasets.MockDataset,
        wds_torch.FluidWrapper,
        wds_torch.mix.RandomMix,
    ):
        assert issubclass(cls, iterable), cls
    assert wds_torch.autodecode.torch_loads is wds_torch.torch_loads
    assert wds_torch.writer.torch_dumps is wds_torch.torch_dumps
    from wds_torch.filters import _shuffle, getfirst  # noqa: F401
    from wds_torch.tariterators import base_plus_ext, tar_file_expander, url_opener, valid_sample  # noqa: F401


def test_mock_dataset_and_fluid_wrapper_feed_a_dataloader():
    loader = torch.utils.data.DataLoader(wds_torch.MockDataset((torch.zeros(3), 1), 10), batch_size=4)
    assert [len(b[1]) for b in loader] == [4, 4, 2]
    wrapped = wds_torch.FluidWrapper(list(range(10))).map(lambda x: x * 2).batched(5)
    assert [b.tolist() for b in torch.utils.data.DataLoader(wrapped, batch_size=None)] == [
        [0, 2, 4, 6, 8],
        [10, 12, 14, 16, 18],
    ]


_SWITCH = """
import sys, warnings
{before}
import wds_torch
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    wds_torch.install_as_webdataset()
import webdataset as wds
import webdataset.filters, webdataset.tariterators
from webdataset.filters import _shuffle
from webdataset.shardlists import expand_urls
from webdataset.utils import pytorch_worker_seed
print(wds.__wds__, issubclass(wds.WebDataset, wds_torch.WebDataset), _shuffle is wds_torch.filters._shuffle,
      webdataset.tariterators.tarfile_to_samples is wds_torch.tariterators.tarfile_to_samples, len(caught))
try:
    import webdataset.wids
except ModuleNotFoundError as exn:
    print("refused:", exn)
from wds_core import dropin
dropin.uninstall()
import webdataset
print("after:", getattr(webdataset, "__wds__", "real"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("before", ["", "import webdataset"])
def test_the_one_line_switch(before):
    pytest.importorskip("webdataset")
    code = _SWITCH.format(before=before)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    warned = "1" if before else "0"  # importing the real one first gets a warning, not a failure
    assert lines[0] == f"wds_torch True True True {warned}"
    assert lines[1].startswith("refused: No module named 'webdataset.wids'") and "wds's drop-in" in lines[1]
    assert lines[2] == "after: real"
    assert "wds: import webdataset -> wds_torch" in out.stderr and "webdataset 1.0.2 is not used" in out.stderr


def test_refused_names_import_but_say_why():
    from wds_torch.multi import MultiLoader

    from wds_torch import LMDBCached

    with pytest.raises(NotImplementedError, match="LMDBCached is not provided by wds.*cache_dir"):
        LMDBCached("/tmp/x.lmdb")
    with pytest.raises(NotImplementedError, match="Loader"):
        MultiLoader(None)
    with pytest.raises(AttributeError, match="webdataset.utils.*safe_eval"):
        wds_torch.utils.safe_eval  # noqa: B018
    assert wds_torch.utils.enforce_security is False  # secure mode's switch (issue 28): live, off by default


# ---------------------------------------------------------------- shuffle placements across ranks and workers


class _SeededShardShuffle(wds_torch.PipelineStage):
    """A user stage in webdataset's protocol: a seeded shard shuffle with ``_shuffle`` (run before the split)."""

    def __init__(self, seed):
        self.seed = seed

    def run(self, src):
        import random

        return wds_torch.filters._shuffle(src, 100, 5, random.Random(self.seed))


def _placements(spec):
    wds = wds_torch
    tail = [wds.tarfile_to_samples(), wds.shuffle(7), wds.to_tuple("__key__")]
    return {
        "shuffle-seed-before-split": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec), wds.shuffle(100, seed=5), wds.split_by_node, wds.split_by_worker, *tail
        ),
        "shuffle-pipeline-seed-before-split": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec), wds.shuffle(100), wds.split_by_node, wds.split_by_worker, *tail, seed=9
        ),
        "shuffle-unseeded-before-split": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec), wds.shuffle(100), wds.split_by_node, wds.split_by_worker, *tail
        ),
        "detshuffle-before-split": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec), wds.detshuffle(100, seed=3), wds.split_by_node, wds.split_by_worker, *tail
        ),
        "pipelinestage-before-split": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec), _SeededShardShuffle(4), wds.split_by_node, wds.split_by_worker, *tail
        ),
        "shardlist-seed": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec, seed=2), wds.split_by_node, wds.split_by_worker, *tail
        ),
        "webdataset-shardshuffle": lambda: wds.WebDataset(spec, shardshuffle=100).shuffle(7).to_tuple("__key__"),
        "shuffle-after-split": lambda: wds.DataPipeline(
            wds.SimpleShardList(spec), wds.split_by_node, wds.split_by_worker, wds.shuffle(100, seed=1), *tail
        ),
    }


def _placement_rank(rank, world, port, spec, out_dir):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        seen = {}
        for name, make in _placements(spec).items():
            # persistent workers run epoch after epoch themselves (and start once: worker start-up is slow here)
            loader = torch.utils.data.DataLoader(make(), num_workers=2, batch_size=None, persistent_workers=True)
            epochs = [[key for (key,) in loader] for _ in range(2)]
            seen[name] = epochs
        with open(os.path.join(out_dir, f"placements-{rank}.json"), "w") as stream:
            json.dump(seen, stream)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_no_shuffle_placement_duplicates_or_drops_across_two_ranks_and_two_workers(tmp_path):
    keys = []
    for s in range(16):
        samples = make_samples(f"s{s}-", 5)
        keys += [x["__key__"] for x in samples]
        write_shard(tmp_path / f"p-{s:02d}.tar", samples)
    spec = str(tmp_path / "p-{00..15}.tar")
    torch.multiprocessing.spawn(_placement_rank, args=(2, free_port(), spec, str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"placements-{r}.json").read_text()) for r in range(2)]
    for name in _placements(spec):
        for epoch in range(2):
            seen = Counter(ranks[0][name][epoch] + ranks[1][name][epoch])
            assert seen == Counter(keys), f"{name}, epoch {epoch}: duplicated or missing samples"
