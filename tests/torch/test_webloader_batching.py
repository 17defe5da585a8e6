"""WebLoader knows when its dataset batches (issue 58.4): ``WebLoader(ds.batched(32), num_workers=2)`` without
``batch_size=None`` gave tensors of shape (1, 32, ...), and ``batch_size=64`` over batches (50, 20, ...) or torch's
``Trying to resize storage``.  Now the default passes a dataset's batches on, a number over batches is refused with
the reason, and the drop-in's WebLoader keeps webdataset's behaviour (a DataLoader's ``batch_size=1``)."""

import inspect
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import wds_torch as wds  # noqa: E402
from tests.conftest import make_samples, npy_bytes, write_shard  # noqa: E402
from wds_core.errors import SpecError  # noqa: E402
from wds_core.stages.batching import batch_stage_of  # noqa: E402


@pytest.fixture
def spec(tmp_path):
    for s in range(4):
        samples = make_samples(f"s{s}-", 16, fields=("cls",))
        for i, sample in enumerate(samples):
            sample["npy"] = npy_bytes(np.full((3, 2), s * 100 + i, dtype=np.float32))
            sample["cls"] = b"%d" % (i % 5)
        write_shard(tmp_path / f"shard-{s}.tar", samples, ("cls", "npy"))
    return str(tmp_path / "shard-{0..3}.tar")


def arrays(spec):
    return wds.WebDataset(spec).decode().to_tuple("npy", "cls")


def test_a_dataset_that_batches_is_passed_on_as_it_batches(spec):
    loader = wds.WebLoader(arrays(spec).batched(8), num_workers=2)
    shapes = [tuple(images.shape) for images, _ in loader]
    assert shapes == [(8, 3, 2)] * 8  # not (1, 8, 3, 2)
    plain = wds.WebLoader(arrays(spec), num_workers=0)  # a dataset of samples: DataLoader's batch_size=1
    assert tuple(next(iter(plain))[0].shape) == (1, 3, 2)


def test_a_batch_size_over_batches_is_refused_with_the_reason(spec):
    with pytest.raises(
        SpecError, match=r"already hands out batches \(of 8\).*unbatched\(\)\.shuffle\(1000\)\.batched\(64\)"
    ):
        wds.WebLoader(arrays(spec).batched(8), batch_size=64, num_workers=2)
    loader = wds.WebLoader(arrays(spec).batched(8), batch_size=None).unbatched().batched(16)
    assert [tuple(images.shape) for images, _ in loader] == [(16, 3, 2)] * 4  # rebatching on the loader


def test_which_datasets_batch():
    source = (wds.SimpleShardList(["a.tar"]), wds.tarfile_to_samples())
    assert batch_stage_of(wds.DataPipeline(*source)) is None
    assert batch_stage_of(wds.DataPipeline(*source, wds.batched(4))).batchsize == 4
    assert batch_stage_of(wds.DataPipeline(*source, wds.batched(4), wds.map(len))) is not None
    assert batch_stage_of(wds.DataPipeline(*source, wds.batched(4), wds.unbatched())) is None
    batching = wds.DataPipeline(*source, wds.batched(4))
    assert batch_stage_of(wds.DataPipeline(batching, wds.map(len))) is not None  # a pipeline as the source
    assert batch_stage_of(wds.DataPipeline(batching, wds.unbatched())) is None
    assert batch_stage_of(wds.WebDataset("a.tar").batched(4).unbatched().batched(2)).batchsize == 2


def test_the_signature_is_dataloaders_for_editors_and_help():
    parameters = inspect.signature(wds.WebLoader).parameters
    assert list(parameters)[:6] == ["dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers"]
    assert parameters["batch_size"].default == "auto" and "persistent_workers" in parameters
    assert "batch_size" in (wds.WebLoader.__init__.__doc__ or "")


@pytest.mark.slow
def test_through_the_switch_webdatasets_webloader_batches_as_it_did(tmp_path, spec):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import webdataset as wds
            ds = wds.WebDataset({spec!r}, shardshuffle=False).decode().to_tuple("npy", "cls").batched(8)
            images, _ = next(iter(wds.WebLoader(ds, num_workers=0)))
            print(tuple(images.shape))
            """
        )
    )
    out = subprocess.run([sys.executable, "-m", "wds_torch.run", "--quiet", str(script)], capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(1, 8, 3, 2)"  # webdataset 1.0.2's WebLoader is a DataLoader: batch_size=1
