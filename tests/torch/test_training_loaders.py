"""Training loaders written against webdataset's API (tests/torch/loaders/) run unchanged on wds.

Each loader runs in a subprocess three ways: on the real webdataset 1.0.2 (the
test extra installs it), through ``python -m wds_torch.run`` (no edit), and
with the one-line switch (``wds_torch.install_as_webdataset()`` at the top),
with 0 and 2 DataLoader workers over 2 epochs.  Every way must see every
sample exactly as often as webdataset does (here: once per epoch), and where
the order is a function of the seeds, the same batches in the same order.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("webdataset")

import wds_core  # noqa: E402

pytestmark = pytest.mark.slow  # training scripts in subprocesses

LOADERS = os.path.join(os.path.dirname(__file__), "loaders")
WAYS = {
    "webdataset": [],
    "launcher": ["-m", "wds_torch.run", "--quiet"],
}


def _jpeg(seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG")
    return out.getvalue()


def _run(way: str, script: str, *args: str) -> dict:
    path = os.path.join(LOADERS, script)
    command = [sys.executable, *WAYS.get(way, []), path, *args]
    if way == "install":
        command.append("--install")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, f"{way} {script} failed:\n{out.stderr[-3000:]}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["webdataset"] == ("webdataset" if way == "webdataset" else "wds_torch")
    return result


def _counts(epoch_batches: list) -> Counter:
    return Counter(key for batch in epoch_batches for key in batch)


@pytest.fixture(scope="module")
def clip_shards(tmp_path_factory):
    """8 shards of 10 image-caption pairs; one pair per shard has no caption (the loader's select drops it)."""
    root = tmp_path_factory.mktemp("clip")
    keys = []
    for s in range(8):
        with wds_core.TarWriter(str(root / f"pairs-{s}.tar")) as sink:
            for i in range(10):
                sample = {"__key__": f"s{s}/{i:03d}", "jpg": _jpeg(s * 100 + i)}
                if i != 7:
                    sample["txt"] = f"a photo number {i} of shard {s}"
                    keys.append(sample["__key__"])
                sink.write(sample)
    return str(root / "pairs-{0..7}.tar"), keys


@pytest.fixture(scope="module")
def timm_root(tmp_path_factory):
    """8 shards of 10 labelled images and an ``_info.json`` naming them, as dataset-zoo readers expect."""
    root = tmp_path_factory.mktemp("zoo")
    names, keys = [], []
    for s in range(8):
        names.append(f"train-{s:02d}.tar")
        with wds_core.TarWriter(str(root / names[-1])) as sink:
            for i in range(10):
                keys.append(f"img{s}{i:03d}")
                sink.write({"__key__": keys[-1], "jpg": _jpeg(s * 10 + i), "cls": (s * 10 + i) % 7})
    info = {"name": "zoo", "splits": {"train": {"filenames": names, "num_samples": 80, "name": "train"}}}
    (root / "_info.json").write_text(json.dumps(info))
    return str(root), keys


@pytest.fixture(scope="module")
def mmc4_shards(tmp_path_factory):
    """6 shards of 5 interleaved documents with 0 to 3 embedded images each."""
    root = tmp_path_factory.mktemp("mmc4")
    keys = []
    for s in range(6):
        with wds_core.TarWriter(str(root / f"docs-{s}.tar")) as sink:
            for d in range(5):
                key = f"doc{s}-{d}"
                images = [
                    {"image_base64": base64.b64encode(_jpeg(s * 50 + d * 5 + j)).decode(), "matched_text_index": j}
                    for j in range((s + d) % 4)
                ]
                doc = {"key": key, "text_list": ["one.", "two.", "three."], "image_info": images}
                sink.write({"__key__": key, "json": doc})
                keys.append(key)
    return str(root / "docs-{0..5}.tar"), keys


@pytest.mark.parametrize("way", ["webdataset", "launcher", "install"])
def test_clip_style_loader(clip_shards, way):
    spec, keys = clip_shards
    grouping = "builtin" if way == "webdataset" else "nothrow"  # webdataset 1.0.2's {} markers break "nothrow"
    result = _run(way, "clip_loader.py", spec, "--workers", "0,2", "--epochs", "2", "--grouping", grouping)
    for workers, epochs in result["runs"].items():
        assert len(epochs) == 2
        for batches in epochs:
            assert _counts(batches) == Counter(keys), f"{way}, {workers} workers"
            assert all(len(batch) == 4 for batch in batches)
    if way != "webdataset":  # both readers of the loader, on wds
        builtin = _run(way, "clip_loader.py", spec, "--workers", "2", "--grouping", "builtin")
        assert all(_counts(batches) == Counter(keys) for batches in builtin["runs"]["2"])


def test_timm_style_reader_gives_webdataset_order(timm_root):
    root, keys = timm_root
    ways = ("webdataset", "launcher", "install")
    results = {way: _run(way, "timm_loader.py", root, "--workers", "0,2") for way in ways}
    reference = results["webdataset"]["runs"]
    for workers in ("0", "2"):
        epochs = reference[workers]
        assert all(Counter(k for k, _ in epoch) == Counter(keys) for epoch in epochs)
        assert epochs[0] != epochs[1]  # the shard shuffle follows the epoch
        for way in ("launcher", "install"):
            assert results[way]["runs"][workers] == epochs, f"{way}, {workers} workers: another order than webdataset"


def test_mmc4_style_loader(mmc4_shards):
    spec, keys = mmc4_shards
    for way in ("webdataset", "launcher", "install"):
        result = _run(way, "mmc4_loader.py", spec, "--workers", "0,2")
        for workers, epochs in result["runs"].items():
            for batches in epochs:
                assert _counts(batches) == Counter(keys), f"{way}, {workers} workers"


def test_launcher_says_which_webdataset_is_active(timm_root):
    root, _ = timm_root
    script = os.path.join(LOADERS, "timm_loader.py")
    out = subprocess.run(
        [sys.executable, "-m", "wds_torch.run", script, root, "--workers", "0", "--epochs", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "wds: import webdataset -> wds_torch" in out.stderr
    assert "no info file" not in out.stderr  # wds.gopen read _info.json
