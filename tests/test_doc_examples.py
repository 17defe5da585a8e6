"""Every ``python`` code block of README.md and of the documentation site runs, so neither can drift from the code.

Each block is executed as written, in a folder holding small shards under the names the examples use
(``data/train-{000000..000099}.tar``, ``data/dataset.json``, ``mix.yaml``...), with the names a
block takes from its context (``urls``, ``model``, ``loader``...) defined by the setup below.
``s3://bucket/`` is rewritten to a local folder. A block that needs a framework (or dask-jobqueue) is skipped when the
framework is not installed. A block whose first line is ``# NAME.py`` is a module the next blocks
import: it is written to the folder instead of run. A new block needs no setup unless it uses a name
no block defines. The first-hour tutorial is run end to end by ``tests/torch/test_first_hour.py``.
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

pytestmark = pytest.mark.slow  # the blocks start worker processes

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]


def _blocks(language: str) -> list[tuple[str, int, str]]:
    """``(page, index within the page, code)`` of every fenced block in that language."""
    found = []
    for page in PAGES:
        blocks = re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.S | re.M)
        found += [(str(page.relative_to(ROOT)), i, block) for i, block in enumerate(blocks)]
    return found


BLOCKS = _blocks("python")
MODULE = re.compile(r"^# (\w+\.py)\n")
FRAMEWORKS = {
    "wds_torch": "torch", "torch": "torch", "torchdata": "torchdata", "wds_jax": "jax", "wds_tf": "tensorflow",
    "dask_jobqueue": "dask_jobqueue",  # a batch system's cluster: skipped here
}  # fmt: skip


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
    for s in range(4):  # the processing guide's input
        with wds_core.TarWriter(str(root / f"pairs-{s:03d}.tar")) as sink:
            for i in range(10):
                caption = "" if i == 3 else f" caption {s}-{i} "
                sink.write({"__key__": f"p{s}-{i:02d}", "jpg": _images(i), "txt": caption, "json": {"i": i}})
    with wds_core.TarWriter(str(root / "docs.tar")) as sink:
        for d in range(6):
            sink.write(wds_core.interleaved_sample(f"d{d}", ["a sentence.", _images(d), "another one."]))
    array_shards(root, "arrays", 4, 8, (4,), 3)
    for c, name in enumerate(("cat", "dog", "eel")):  # an ImageNet-style class-folder tree
        (root / "train" / name).mkdir(parents=True)
        for i in range(4):
            (root / "train" / name / f"{name}{i}.jpg").write_bytes(b"JPEG %d %d" % (c, i))
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
        "coyo_urls": str(root / "pairs.tar"),
        "mmc4_urls": str(root / "docs.tar"),
        "laion": wds_core.WebDataset(str(root / "pairs.tar")).image_text_pairs(),
        "coyo": wds_core.WebDataset(str(root / "pairs.tar")).to_tuple("jpg", "txt"),
        "opts": {},
        "sharding": None,
        "__name__": "__main__",  # a page's `if __name__ == "__main__":` block runs, as in the script it shows
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
        dataset = wds_torch.WebDataset.balanced(ns["urls"], seed=0, how="pad", shuffle=True).shuffle(1000)
        loader = StatefulDataLoader(dataset, num_workers=0, batch_size=None)
        it = iter(loader)
        ns["taken"] = [next(it)["__key__"] for _ in range(5)]
        ns["loader"], ns["world_size"], ns["StatefulDataLoader"] = loader, 1, StatefulDataLoader
        ns["torch"] = sys.modules["torch"]
    if "register_rewrite" not in block:
        wds_core.register_rewrite("s3://bucket/", str(root / "bucket") + "/")
    if "install_as_webdataset" in block:  # (imported here: run alone, nothing has imported the drop-in yet)
        undo.append(importlib.import_module("wds_core.dropin").uninstall)
    if "hf://" in block:  # the Hub: tests/hubserver.py's stand-in, its repository holding the data folder's shards
        from tests.hubserver import HubServer

        hub = HubServer()
        for name in sorted(os.listdir(root / "data")):
            if name.endswith(".tar"):
                hub.add("dataset", "ORG/REPO", f"train/{name}", (root / "data" / name).read_bytes())
        old = os.environ.get("HF_ENDPOINT")
        os.environ["HF_ENDPOINT"] = hub.url
        undo += [hub.stop, lambda: os.environ.pop("HF_ENDPOINT") if old is None else os.environ.update(HF_ENDPOINT=old)]
    return undo


def _check(block: str, ns: dict, root: Path) -> None:
    """What a block must have done, beyond running."""
    if "ShardWriter" in block and "out/train" in block:
        assert json.loads((root / "out" / "train.json").read_text())["shardlist"][0]["nsamples"] == 30
    if "map_shards(fix_caption" in block:  # the guide's function dropped the samples without a caption
        clean = wds_core.WebDataset(str(root / "clean" / "pairs-{000..003}.tar"))
        samples = list(clean.decode())
        assert len(samples) == 36 and all(s["json"]["clean"] and s["txt"] == s["txt"].strip() for s in samples)
    if "all_gather_object" in block:  # the merged state resumes the rest of the epoch, nothing twice
        rest = [sample["__key__"] for sample in ns["loader"]]
        assert len(rest) + len(ns["taken"]) == 1300 and not set(rest) & set(ns["taken"])
    if "install_as_webdataset" in block:
        assert sys.modules["webdataset"].__wds__ == "wds_torch"
    if "classes = sorted(os.listdir" in block:  # the class-folder tree: labels by the folder's sorted number
        shard = wds_core.WebDataset(str(root / "train-000000.tar"))
        labels = {s["__key__"]: int(s["cls"]) for s in shard}
        assert len(labels) == 12 and labels["cat/cat0"] == 0 and labels["eel/eel3"] == 2
    _training_ready(block, ns)


def _training_ready(block: str, ns: dict) -> None:
    """A pipeline a block makes that ends in ``to_tuple`` gives training-ready values: no field left as bytes
    (issue 45: the README's crop_images example gave the label as b'0', which torch.as_tensor refuses)."""
    for name, value in ns.items():
        pipeline = value if isinstance(value, wds_core.DataPipeline) else None
        if pipeline is None or not pipeline.pipeline or f"{name} = " not in block:
            continue
        if type(pipeline.pipeline[-1]).__name__ != "ToTuple":
            continue
        first = next(iter(pipeline))
        kinds = [type(field).__name__ for field in first]
        assert not any(isinstance(field, (bytes, bytearray, memoryview)) for field in first), (name, kinds)


@pytest.mark.parametrize("page,index,block", BLOCKS, ids=[f"{page}-block{i}" for page, i, _ in BLOCKS])
def test_block_runs(page, index, block, folder, monkeypatch):
    module = MODULE.match(block)
    if module:  # a module the page's later blocks import
        (folder / module.group(1)).write_text(block)
        return
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    ns = _namespace(folder)
    _frameworks(block, ns)
    undo = _prepare(block, ns, folder)
    try:
        exec(compile(block, f"{page} block {index}", "exec"), ns)
        _check(block, ns, folder)
    finally:
        for step in undo:
            step()
        for value in list(ns.values()):  # workers a block left running (they stay between epochs) end with it
            if type(value).__name__ in ("TFSource", "Loader", "BatchIterator") and callable(getattr(value, "close", 0)):
                value.close()


SPECS = _blocks("yaml")


@pytest.mark.parametrize("page,index,block", SPECS, ids=[f"{page}-yaml{i}" for page, i, _ in SPECS])
def test_spec_file_examples_parse(page, index, block):
    """The dataset-spec examples are accepted by the parser (their keys and values are the real ones)."""
    yaml = pytest.importorskip("yaml")
    spec = yaml.safe_load(block)
    if isinstance(spec, dict) and ("dataset" in spec or "datasets" in spec):
        from wds_core.sources.specfile import load_spec

        sources, options = load_spec(spec)
        assert sources and all(source.urls for source in sources) and "longest" in options


def test_every_block_was_found():
    readme = [block for page, _, block in BLOCKS if page == "README.md"]
    assert len(readme) >= 1 and len(BLOCKS) >= 29 and all(block.strip() for _, _, block in BLOCKS)


def test_spec_file_docstring_example_parses():
    """The example in ``wds_core.sources.specfile``'s docstring, which the API reference shows."""
    yaml = pytest.importorskip("yaml")
    from wds_core.sources import specfile
    from wds_core.sources.specfile import load_spec

    text = specfile.__doc__.split("::\n", 1)[1].split("\nPer source:", 1)[0]
    sources, _ = load_spec(yaml.safe_load(text))
    assert [s.choose for s in sources] == [None, None, 4] and len(sources[1].urls) == 11
