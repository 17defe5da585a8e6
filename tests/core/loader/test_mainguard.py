"""A script that starts spawned workers outside ``if __name__ == "__main__":`` is told so, with the line, before any
worker starts (issue 58.3): the JAX snippet as written gave ``WdsError: Loader worker 0 died (exit code 1)`` and two
tracebacks, each worker having run the script again and tried to start workers of its own."""

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import make_samples, write_shard

PIPELINE = """
import wds_core as wds
dataset = wds.WebDataset({spec!r}).to_tuple("txt")
"""


def run(folder, body, *, module=False):
    script = folder / "train.py"
    script.write_text(textwrap.dedent(PIPELINE.format(spec=str(folder / "s-{0..3}.tar")) + body))
    command = [sys.executable, "-m", "train"] if module else [sys.executable, str(script)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=folder)


@pytest.fixture
def folder(tmp_path):
    for s in range(4):
        write_shard(tmp_path / f"s-{s}.tar", make_samples(f"s{s}-", 3, fields=("txt",)), ("txt",))
    return tmp_path


@pytest.mark.parametrize("module", [False, True], ids=["script", "python -m"])
def test_an_unguarded_start_is_named_with_its_line(folder, module):
    out = run(folder, "for batch in wds.Loader(dataset, num_workers=2):\n    pass\n", module=module)
    assert out.returncode == 1
    assert "line 4 of" in out.stderr and 'outside `if __name__ == "__main__":`' in out.stderr, out.stderr
    assert "died" not in out.stderr and out.stderr.count("Traceback") == 1  # no worker started


def test_an_unguarded_main_function_is_named_too(folder):
    out = run(folder, "def main():\n    return sum(1 for _ in wds.Loader(dataset, num_workers=2))\nmain()\n")
    assert out.returncode == 1 and "line 6 of" in out.stderr, out.stderr


@pytest.mark.slow
def test_guarded_scripts_and_fork_run(folder):
    guarded = 'if __name__ == "__main__":\n    print(sum(1 for _ in wds.Loader(dataset, num_workers=2)))\n'
    out = run(folder, guarded)
    assert out.returncode == 0 and out.stdout.split() == ["12"], out.stderr
    forked = 'print(sum(1 for _ in wds.Loader(dataset, num_workers=2, start_method="fork")))\n'
    out = run(folder, forked)  # fork runs nothing again: no guard needed
    assert out.returncode == 0 and out.stdout.split() == ["12"], out.stderr
