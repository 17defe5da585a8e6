"""Every ``python`` code block of README.md runs, so the README cannot drift from the code.

Each block is executed as written, in a folder holding small shards under the names the README uses
(``data/train-{000000..000099}.tar``, ``data/dataset.json``, ``mix.yaml``...), with the names a
block takes from its context (``urls``, ``model``, ``loader``...) defined by the setup below.
``s3://bucket/`` is rewritten to a local folder. A block that needs a framework is skipped when the
framework is not installed. A new block needs no setup unless it uses a name no block defines.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import wds_core
from tests.conftest import array_shards

pytestmark = pytest.mark.slow  # README blocks start worker processes

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
FRAMEWORKS = {"wds_torch": "torch", "torch": "torch", "wds_jax": "jax", "wds_tf": "tensorflow"}


def _images(i: int) -> np.ndarray:
    return np.full((8, 8, 3), i % 256, dtype=np.uint8)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("readme")
    (root / "data").mkdir()
    for s in range(100):
        with wds_core.TarWriter(str(root / "data" / f"train-{s:06d}.tar")) as sink:
            for i in range(13):
                image = "png" if i % 5 == 0 else "jpg"
                sink.write(
                    {"__key__": f"s{s}-{i:02d}", image: _images(i), "seg.png": _images(s), "cls": i % 3,
                     "json": {"shard": s, "i": i}}
                )  # fmt: skip
    shards = [{"url": f"train-{s:06d}.tar", "nsamples": 13} for s in range(100)]
    (root / "data" / "dataset.json").write_text(json.dumps({"wids_version": 1, "shardlist": shards}))
    (root / "bucket").mkdir()
    for s in range(100):
        os.symlink(root / "data" / f"train-{s:06d}.tar", root / "bucket" / f"shard-{s:03d}.tar")
    with wds_core.TarWriter(str(root / "pairs.tar")) as sink:
        for i in range(12):
            meta = {"width": 300 if i % 2 else 100, "height": 300, "similarity": 0.3 if i % 3 else 0.2}
            sink.write({"__key__": f"p{i:02d}", "jpg": _images(i), "txt": f"caption {i}", "json": meta})
    with wds_core.TarWriter(str(root / "docs.tar")) as sink:
        for d in range(6):
            sink.write(wds_core.interleaved_sample(f"d{d}", ["a sentence.", _images(d), "another one."]))
    array_shards(root, "arrays", 4, 8, (4,), 3)
    (root / "mix.yaml").write_text(
        "dataset:\n  - shards: data/train-{000000..000009}.tar\n    weight: 2\n  - shards: pairs.tar\n"
    )
    return root


class _Model:
    """A stand-in for a Keras model: ``fit`` takes the first batches of the first epoch."""

    def fit(self, dataset, epochs=1):
        self.batches = [batch for batch, _ in zip(dataset, range(2))]


def _namespace(root: Path) -> dict:
    spec = str(root / "data" / "train-{000000..000099}.tar")
    return {
        "wds": wds_core,
        "urls": spec,
        "my_mask_decoder": lambda data: len(data),
        "data": [(_images(i), i % 3) for i in range(30)],
        "laion_urls": str(root / "pairs.tar"),
        "mmc4_urls": str(root / "docs.tar"),
        "laion": wds_core.WebDataset(str(root / "pairs.tar")).image_text_pairs(),
        "coyo": wds_core.WebDataset(str(root / "pairs.tar")).to_tuple("jpg", "txt"),
        "opts": {},
        "sharding": None,
        "model": _Model(),
        "new_workers": 0,
    }


def _frameworks(block: str, ns: dict) -> None:
    """Skip without the frameworks the block uses; adapters it names without importing are in scope."""
    for module, framework in FRAMEWORKS.items():
        if re.search(rf"^\s*import {module}\b|\b{module}\.", block, flags=re.M):
            pytest.importorskip(framework)
            ns[module] = importlib.import_module(module)


def _prepare(block: str, ns: dict, root: Path) -> list:
    """Names a block takes from what the README says around it; returns what to undo afterwards."""
    undo: list = []
    arrays = str(root / "arrays-{0..3}.tar")
    if "wds_jax.BatchIterator" in block:
        ns["dataset"] = wds_core.WebDataset(arrays).decode().to_tuple("npy", "cls")
    if "wds_tf.TFSource" in block:
        ns["pipeline"] = wds_core.WebDataset(arrays).decode().to_tuple("npy", "cls")
    if "all_gather_object" in block:  # one gloo rank, and a loader some steps into a balanced epoch
        import torch.distributed as dist
        from torchdata.stateful_dataloader import StatefulDataLoader

        import wds_torch
        from tests.servers import free_port

        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
        undo.append(dist.destroy_process_group)
        dataset = wds_torch.WebDataset(ns["urls"], shardshuffle=True, seed=0, balanced="pad").shuffle(1000)
        loader = StatefulDataLoader(dataset, num_workers=0, batch_size=None)
        it = iter(loader)
        ns["taken"] = [next(it)["__key__"] for _ in range(5)]
        ns["loader"], ns["world_size"], ns["StatefulDataLoader"] = loader, 1, StatefulDataLoader
        ns["torch"] = sys.modules["torch"]
    if "register_rewrite" not in block:
        wds_core.register_rewrite("s3://bucket/", str(root / "bucket") + "/")
    if "install_as_webdataset" in block:
        undo.append(wds_core.dropin.uninstall)
    return undo


def _check(block: str, ns: dict, root: Path) -> None:
    """What a block must have done, beyond running."""
    if "ShardWriter" in block:
        assert json.loads((root / "out" / "train.json").read_text())["shardlist"][0]["nsamples"] == 30
    if "all_gather_object" in block:  # the merged state resumes the rest of the epoch, nothing twice
        rest = [sample["__key__"] for sample in ns["loader"]]
        assert len(rest) + len(ns["taken"]) == 1300 and not set(rest) & set(ns["taken"])
    if "install_as_webdataset" in block:
        assert sys.modules["webdataset"].__wds__ == "wds_torch"


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_block_runs(index, folder, monkeypatch):
    block = BLOCKS[index]
    monkeypatch.chdir(folder)
    ns = _namespace(folder)
    _frameworks(block, ns)
    undo = _prepare(block, ns, folder)
    try:
        exec(compile(block, f"README.md block {index}", "exec"), ns)
        _check(block, ns, folder)
    finally:
        for step in undo:
            step()


def test_every_block_was_found():
    assert len(BLOCKS) >= 13 and all(block.strip() for block in BLOCKS)
