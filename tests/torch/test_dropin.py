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


# A resharder written for webdataset 0.2.31 (issue 68): its writer module's `gopen` is the gopen module, whose Pipe
# it subclasses, and whose `info` dict its pipe reads when a child fails.
RESHARDER_0_2 = r"""
import sys
import webdataset as wds

Pipe = wds.writer.gopen.Pipe  # 0.2.x: writer.gopen is the module (1.0.2: the function, and this fails)
from webdataset.gopen import info


class Checked(Pipe):
    def wait_for_child(self):
        info["shard"] = "s-1"  # what the error should say
        super().wait_for_child()


out = wds.writer.gopen.gopen(sys.argv[1], "wb")
out.write(b"payload")
out.close()
with wds.TarWriter(sys.argv[1] + ".tar") as sink:  # 0.2.31's writer opens through the module's gopen
    sink.write({"__key__": "a", "txt": "x"})
with Checked(["cat", sys.argv[1]], mode="rb") as pipe:
    print(pipe.read(), wds.writer.gopen.info is info, wds.writer.gopen.set_options(pipe, timeout=5), pipe.timeout)
try:
    failing = Checked("exit 3", mode="rb", shell=True)
    failing.read()
    failing.close()
except Exception as exn:  # 0.2.31 raises Exception, 1.0.2 and wds OSError
    print("error", "exit" in str(exn), "s-1" in str(exn))
print(sorted(s["__key__"] for s in wds.WebDataset(sys.argv[1] + ".tar")))
"""


def _run_script(script_path, argv, pythonpath=None, switch=False):
    """``python SCRIPT ARGV`` (with ``pythonpath`` first on the path), or through the switch."""
    env = {**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    runner = ["-m", "wds_torch.run", "--quiet"] if switch else []
    command = [sys.executable, *runner, str(script_path), *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


def test_code_written_for_webdataset_0_2_runs_through_the_switch(tmp_path):
    """Issue 68.1 and 68.2: `wds.writer.gopen.Pipe` (0.2.x's module under the writer's name) and `gopen.info`
    raised AttributeError through the switch; the same script runs on webdataset 0.2.31 (where CI installs it
    beside 1.0.2: WDS_WEBDATASET_0_2_31) and through the switch, with the same output."""
    script = tmp_path / "reshard.py"
    script.write_text(RESHARDER_0_2)
    ours = _run_script(script, [str(tmp_path / "out.bin")], switch=True)
    assert ours.returncode == 0, ours.stderr
    expected = "b'payload' True True 5\nerror True True\n['a']\n"
    assert ours.stdout == expected
    old = os.environ.get("WDS_WEBDATASET_0_2_31")
    if old:
        theirs = _run_script(script, [str(tmp_path / "theirs.bin")], pythonpath=old)
        assert theirs.returncode == 0, theirs.stderr
        assert theirs.stdout == expected


def test_the_torch_modules_hold_webdataset_s_names_as_the_core_s_do():
    """Issue 68: the names the drop-in gives webdataset's modules, in wds_torch's copies, with the siblings they name
    being wds_torch's (``webdataset.filters.utils is webdataset.utils`` through the switch)."""
    from wds_core import dropin

    for name, core in dropin.MODULES.items():
        ours = getattr(wds_torch, name) if name != "gopen" else sys.modules["wds_torch.gopen"]
        assert set(vars(core)) - {"__spec__", "__loader__"} <= set(vars(ours)), name
    assert wds_torch.filters.utils is sys.modules["wds_torch.utils"]
    assert wds_torch.compat.shardlists is sys.modules["wds_torch.shardlists"]
    assert wds_torch.shardlists.IterableDataset is torch.utils.data.IterableDataset
    assert wds_torch.filters.TorchTensor is torch.Tensor
    assert wds_torch.writer.gopen.Pipe is sys.modules["wds_torch.gopen"].Pipe


# Issue 68.3 and 68.4, as one script run on webdataset itself and through the switch.
COMPOSE_AND_COLLATE = r"""
import sys
import numpy as np
import webdataset as wds

source = [{"__key__": f"k{i}", "json": {"i": i}, "npy": np.zeros(i + 1)} for i in range(3)]
dataset = wds.DataPipeline(lambda: iter(source))
meta = dataset.compose(wds.to_tuple("json"))
print("aliased", len(dataset.pipeline) == len(meta.pipeline))  # 0.2.31's compose shared the stage list
try:
    next(iter(wds.DataPipeline(lambda: iter(source), wds.to_tuple("npy"), wds.batched(3))))
except Exception as exn:
    print("ragged", type(exn).__name__ in ("AssertionError", "ShapeMismatch"), "all shapes must be equal" in str(exn))
"""


def _same_script(tmp_path, script, env_var=None):
    path = tmp_path / "script.py"
    path.write_text(script)
    ours = _run_script(path, [], switch=True)
    assert ours.returncode == 0, ours.stderr
    theirs = None
    if env_var is None:
        pytest.importorskip("webdataset")
        theirs = _run_script(path, [])
    elif os.environ.get(env_var):
        theirs = _run_script(path, [], pythonpath=os.environ[env_var])
    if theirs is not None:
        assert theirs.returncode == 0, theirs.stderr
    return ours.stdout, None if theirs is None else theirs.stdout


def test_compose_gives_a_new_pipeline_where_0_2_31_shared_the_stages(tmp_path):
    """Issue 68.3: on 0.2.31 `meta = ds.compose(...)` (what `ds.to_tuple(...)` does) changed `ds` too; wds, as 1.0.2,
    gives a new pipeline (the migration guide says so, with the symptom and the fix). Ragged arrays raise on both."""
    ours, theirs = _same_script(tmp_path, COMPOSE_AND_COLLATE, "WDS_WEBDATASET_0_2_31")
    assert ours == "aliased False\nragged True True\n"
    if theirs is not None:  # (0.2.31's collation fails on ragged arrays too, inside numpy, in other words)
        assert theirs.startswith("aliased True\nragged ")


def test_arrays_of_different_shapes_fail_to_batch_as_on_webdataset_1_0_2(tmp_path):
    """Issue 68.4: webdataset raises `all shapes must be equal in collation`; wds returned a list."""
    ours, theirs = _same_script(tmp_path, COMPOSE_AND_COLLATE)
    assert ours == theirs == "aliased False\nragged True True\n"
