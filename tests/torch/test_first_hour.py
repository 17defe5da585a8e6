"""The first-hour tutorial (``docs/guides/first-hour.md``), run end to end as the page writes it (issue 45.8).

A folder of 2,400 JPEGs in three class folders; the page's commands, run by bash in that folder, with its
``AWS_ENDPOINT_URL`` pointed at a local S3 server that serves ``my-bucket`` for the page's access key (the bucket
not made: the page makes it); its
``train.py``, written from the page; then the page's last block, ``python train.py &``, ``kill -9`` and
``python train.py``, with the kill made at a known point (after the checkpoint of step 30) instead of after
``sleep 10``.  The resumed run must train on what a run that was never killed trains on, step for step.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")
pytest.importorskip("s3fs")

pytestmark = pytest.mark.slow  # subprocesses, DataLoader workers and an S3 server

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "first-hour.md"
PAGE_ENDPOINT = "http://127.0.0.1:9000"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)


def _class_folders(root: Path) -> None:
    """train/<class>/<n>.jpg: 800 small JPEGs a class, each class its own colour (so the model learns)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, name in enumerate(("cat", "dog", "eel")):
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for i in range(800):
            pixels = rng.integers(0, 60, (48, 48, 3), dtype=np.uint8)
            pixels[..., c] += 150
            Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=80)


def _steps(output: str) -> dict[int, str]:
    return {int(m.group(2)): m.group(0) for m in re.finditer(r"^epoch (\d+) step (\d+) loss [\d.]+$", output, re.M)}


def test_the_first_hour_runs_as_written(tmp_path):
    from tests.servers import S3Server

    server = S3Server({"my-bucket": "AKIDEXAMPLE"})  # no bucket made: the page makes it, as a newcomer would
    try:
        _run_the_page(tmp_path, server)
    finally:
        server.stop()


def _run_the_page(root: Path, server) -> None:
    install, shards, upload, train_and_kill = _blocks("bash")
    assert install.startswith('pip install -e ".[torch,s3]"')  # the one step not run here: CI installed it
    assert train_and_kill.splitlines() == ["python train.py &", "sleep 10 && kill -9 $!", "python train.py"]
    (train_py,) = [block for block in _blocks("python") if block.startswith("# train.py\n")]
    _class_folders(root)
    (root / "train.py").write_text(train_py)
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env.update(PYTHONUNBUFFERED="1", AWS_CONFIG_FILE=str(root / "none"), AWS_SHARED_CREDENTIALS_FILE=str(root / "none"))

    def bash(script: str) -> str:
        script = script.replace(PAGE_ENDPOINT, server.endpoint)
        done = subprocess.run(["bash", "-e", "-c", script], cwd=root, env=env, capture_output=True,
                              text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    listing = bash(shards)
    assert sorted(p.name for p in (root / "shards").iterdir()) == [
        "classes.json", "train-000000.tar", "train-000001.tar", "train-000002.tar"
    ]  # fmt: skip
    assert "cat/0000" in listing
    # the exports of the next block stay for the training runs, as in the reader's shell
    stats = bash(upload)
    for line in upload.splitlines():
        if line.startswith("export "):
            for assignment in line.split()[1:]:
                key, value = assignment.split("=", 1)
                env[key] = value.replace(PAGE_ENDPOINT, server.endpoint)
    assert "2,400 samples" in stats and "labels (cls, 3 values)" in stats

    def train(kill_after: int | None = None) -> str:
        process = subprocess.Popen([sys.executable, "train.py"], cwd=root, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)  # fmt: skip
        lines = []
        deadline = time.monotonic() + 300
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if kill_after is not None and line.startswith(f"epoch 0 step {kill_after + 3} "):
                process.send_signal(signal.SIGKILL)  # mid-epoch, three steps past a checkpoint
                break
            assert time.monotonic() < deadline, "".join(lines)
        code = process.wait(timeout=60)
        output = "".join(lines)
        assert code == (-signal.SIGKILL if kill_after is not None else 0), output
        return output

    uninterrupted = _steps(train())
    assert len(uninterrupted) == 2 * 75  # 2,400 samples in batches of 32, two epochs
    os.remove(root / "checkpoint.pt")
    killed = train(kill_after=30)
    assert max(_steps(killed)) == 33 and (root / "checkpoint.pt").exists()
    resumed = train()
    assert resumed.splitlines()[0] == "resumed at epoch 0, step 30"
    after = _steps(resumed)
    assert sorted(after) == list(range(31, 151))
    assert [after[s] for s in after] == [uninterrupted[s] for s in after]  # the same batches, crops and losses
    assert float(after[150].rsplit(" ", 1)[1]) < float(uninterrupted[1].rsplit(" ", 1)[1])  # and it learned
