"""The first-hour tutorial (``docs/guides/first-hour.md``), run end to end as the page writes it (issues 45.8, 67).

A folder of 300 JPEGs in three class folders (issue 67: the page's fixed 3-shard spec failed for any folder under
2,001 images); the page's commands, run by bash in that folder as one shell session (``SPEC`` and ``SHARDS`` carry
from block to block), against the local S3 server the page says how to start (``moto_server``, on a free port
instead of the page's 9000: the bucket not made, the page makes it); its ``train.py``, written from the page; then
its last block, with the kill made at a known point (two steps after the first checkpoint line) instead of at
whatever moment the polling loop sees it.  The resumed run must train on what a run that was never killed trains
on, step for step.
"""

from __future__ import annotations

import os
import re
import signal
import socket
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
    """train/<class>/<n>.jpg: 100 small JPEGs a class, each class its own colour (so the model learns)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, name in enumerate(("cat", "dog", "eel")):
        folder = root / "train" / name
        folder.mkdir(parents=True)
        for i in range(100):
            pixels = rng.integers(0, 60, (48, 48, 3), dtype=np.uint8)
            pixels[..., c] += 150
            Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=80)


def _steps(output: str) -> dict[int, str]:
    return {int(m.group(2)): m.group(0) for m in re.finditer(r"^epoch (\d+) step (\d+) loss [\d.]+$", output, re.M)}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_the_pages_server(root: Path, command: str) -> tuple[subprocess.Popen, str]:
    """The page's ``pip install "moto[server]" && moto_server -p 9000 &``: moto's server (the ci extra installed
    it), started as the page says, on a free port."""
    assert command == 'pip install "moto[server]" && moto_server -p 9000 &', command
    port = _free_port()
    server = subprocess.Popen(
        ["moto_server", "-p", str(port)], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "moto_server did not start"
            time.sleep(0.2)


def test_the_first_hour_runs_as_written(tmp_path):
    install, shards, server_line, upload, train_and_kill = _blocks("bash")
    server, endpoint = _start_the_pages_server(tmp_path, server_line.strip())
    try:
        _run_the_page(tmp_path, endpoint, install, shards, upload, train_and_kill)
    finally:
        server.kill()
        server.wait()


def _run_the_page(root: Path, endpoint: str, install: str, shards: str, upload: str, train_and_kill: str) -> None:
    assert install.splitlines() == [  # the one step not run here: CI installed it
        "pip install torch --index-url https://download.pytorch.org/whl/cpu   # no GPU: the CPU build, first",
        'pip install -e ".[torch,s3]"     # in your clone of wds: the PyTorch adapter, torchdata and s3fs',
    ]
    assert train_and_kill.splitlines() == [
        "python train.py > train.log 2>&1 &",
        'until grep -q "^saved checkpoint" train.log || ! kill -0 $! 2>/dev/null; do sleep 0.2; done',
        "kill -9 $!",
        "python train.py",
    ]
    (train_py,) = [block for block in _blocks("python") if block.startswith("# train.py\n")]
    _class_folders(root)
    (root / "train.py").write_text(train_py)
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env.update(PYTHONUNBUFFERED="1", AWS_CONFIG_FILE=str(root / "none"), AWS_SHARED_CREDENTIALS_FILE=str(root / "none"))

    # steps 1 and 2 in one shell, as the reader types them; what it exported then stays for the training runs
    script = f"{shards}\n{upload}\nenv -0 > exported.env\n".replace(PAGE_ENDPOINT, endpoint)
    done = subprocess.run(["bash", "-e", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    assert sorted(p.name for p in (root / "shards").iterdir()) == [
        "classes.json", "train-000000.tar", "train-000001.tar", "train-000002.tar"
    ]  # fmt: skip
    assert done.stdout.startswith("shards/train-{000000..000002}.tar\n") and "cat/0000" in done.stdout
    assert "300 samples" in done.stdout and "labels (cls, 3 values)" in done.stdout
    exported = dict(item.split("=", 1) for item in (root / "exported.env").read_text().split("\0") if "=" in item)
    env.update(
        {key: exported[key] for key in ("SHARDS", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    )
    assert env["SHARDS"] == "s3://my-bucket/train/train-{000000..000002}.tar"

    def train(kill_after_checkpoint: bool = False) -> str:
        process = subprocess.Popen([sys.executable, "train.py"], cwd=root, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)  # fmt: skip
        lines = []
        deadline = time.monotonic() + 300
        saved = None
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if kill_after_checkpoint and saved is None and line.startswith("saved checkpoint at step "):
                saved = int(line.split()[-1])
            if saved is not None and line.startswith(f"epoch 0 step {saved + 2} "):
                process.send_signal(signal.SIGKILL)  # mid-epoch, two steps past the checkpoint the page waits for
                break
            assert time.monotonic() < deadline, "".join(lines)
        code = process.wait(timeout=60)
        output = "".join(lines)
        assert code == (-signal.SIGKILL if kill_after_checkpoint else 0), output
        return output

    uninterrupted = _steps(train())
    assert len(uninterrupted) == 2 * 10  # 300 samples in batches of 32 (the last of 12), two epochs
    os.remove(root / "checkpoint.pt")
    killed = train(kill_after_checkpoint=True)
    assert max(_steps(killed)) == 6 and (root / "checkpoint.pt").exists()
    resumed = train()
    assert resumed.splitlines()[0] == "resumed at epoch 0, step 4"
    after = _steps(resumed)
    assert sorted(after) == list(range(5, 21))
    assert [after[s] for s in after] == [uninterrupted[s] for s in after]  # the same batches, crops and losses
    assert float(after[20].rsplit(" ", 1)[1]) < float(uninterrupted[1].rsplit(" ", 1)[1])  # and it learned
