"""The one gate for local files (issue 56): secure mode's roots, the check on what was opened, and links that lead
out, for every way the package touches a file."""

import os

import pytest

from wds_core import SpecError
from wds_core.io import files


@pytest.fixture
def roots(tmp_path, monkeypatch):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (inside / "a.txt").write_bytes(b"inside")
    (outside / "secret.txt").write_bytes(b"secret")
    monkeypatch.setenv("WDS_SECURE", "1")
    monkeypatch.setenv("WDS_SECURE_ROOTS", str(inside))
    return inside, outside


def test_outside_secure_mode_the_gate_is_the_plain_calls(tmp_path):
    path = tmp_path / "sub" / "f.bin"
    files.makedirs(path.parent)
    files.write_atomic(path, b"abc")
    assert files.read_file(path) == b"abc" and files.getsize(path) == 3 and files.isfile(path)
    files.append(path, b"de")
    assert files.read_file(path) == b"abcde"
    assert files.listdir(path.parent) == ["f.bin"]
    assert files.glob("*.bin", path.parent) == [str(path)]
    assert files.glob(str(path.parent / "*.bin")) == [str(path)]
    files.rename(path, path.with_suffix(".txt"))
    files.replace(path.with_suffix(".txt"), path)
    assert [names for _, _, names in files.walk(tmp_path)] == [[], ["f.bin"]]
    files.remove(path)
    files.remove(path)  # missing: no error
    with pytest.raises(FileNotFoundError):
        files.remove(path, missing_ok=False)
    assert not files.exists(path) and not files.isdir(path)


def test_a_folder_named_like_a_pattern_is_taken_literally(tmp_path):
    folder = tmp_path / "data[1]"
    folder.mkdir()
    (folder / "x.tar").write_bytes(b"")
    assert files.glob("*.tar", folder) == [str(folder / "x.tar")]


def test_reads_inside_the_roots_and_nothing_outside(roots):
    inside, outside = roots
    assert files.read_file(inside / "a.txt") == b"inside"
    for call in (files.read_file, files.exists, files.isfile, files.getsize, files.stat, files.listdir):
        with pytest.raises(SpecError, match="not under an allowed root"):
            call(outside / "secret.txt" if call is not files.listdir else outside)
    with pytest.raises(SpecError, match="not under an allowed root"):
        files.glob("*.txt", outside)
    with pytest.raises(SpecError, match="not under an allowed root"):
        list(files.walk(outside))


def test_a_link_that_leads_out_is_refused_on_what_was_opened(roots):
    inside, outside = roots
    os.symlink(outside / "secret.txt", inside / "link.txt")
    with pytest.raises(SpecError, match="refusing to read"):
        files.read_file(inside / "link.txt")
    os.symlink(outside, inside / "linked-folder")
    with pytest.raises(SpecError):
        files.read_file(inside / "linked-folder" / "secret.txt")


def test_writes_never_go_through_a_link_out_of_the_roots(roots):
    inside, outside = roots
    os.symlink(outside / "secret.txt", inside / "link.txt")
    for mode in ("wb", "ab", "w", "r+b"):
        with pytest.raises(SpecError, match="refusing to (read|write)"):
            files.open_file(inside / "link.txt", mode)
    with pytest.raises(SpecError):
        files.write_atomic(outside / "new.txt", b"x")
    with pytest.raises(SpecError):
        files.append(outside / "log.jsonl", b"x\n")
    assert (outside / "secret.txt").read_bytes() == b"secret"  # not even truncated for a moment
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    os.symlink(outside, inside / "linked-folder")
    with pytest.raises(SpecError):
        files.write_atomic(inside / "linked-folder" / "new.txt", b"x")
    with pytest.raises(SpecError):
        files.makedirs(inside / "linked-folder" / "sub")
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_renames_and_removals_stay_inside(roots):
    inside, outside = roots
    with pytest.raises(SpecError):
        files.remove(outside / "secret.txt")
    with pytest.raises(SpecError):
        files.replace(inside / "a.txt", outside / "a.txt")
    with pytest.raises(SpecError):
        files.rename(outside / "secret.txt", inside / "stolen.txt")
    os.symlink(outside / "secret.txt", inside / "link.txt")
    files.remove(inside / "link.txt")  # the link itself goes, never what it leads to
    assert (outside / "secret.txt").read_bytes() == b"secret"
    files.write_atomic(inside / "b.txt", b"b")
    files.replace(inside / "b.txt", inside / "c.txt")
    assert files.read_file(inside / "c.txt") == b"b"


def test_the_package_s_own_temporary_files_are_not_data(roots):
    with files.temporary_copy(b"video", "file.mp4") as path:
        assert open(path, "rb").read() == b"video"
    assert not os.path.exists(path)
    with pytest.raises(ValueError):
        with files.temporary_copy(b"x", "../escape"):
            pass
    with files.temporary_file() as scratch:
        scratch.write(b"x")


# ---------------------------------------------------------------- races: a link swapped in while the gate works
# Issue 66: a name checked and then used let makedirs make a folder outside the roots and touch set the times of a
# file outside them while a link was swapped; every operation of the gate is raced here by a process that flips a
# folder of the roots between a real folder inside and a link to one outside, as fast as it can.

FLIPPER = """
import os, sys
link, inside, outside = sys.argv[1:4]
i = 0
while True:
    temporary = link + ".new"
    if i % 2:
        os.symlink(outside, temporary)
    else:
        os.symlink(inside, temporary)
    os.replace(temporary, link)
    i += 1
"""


@pytest.fixture
def flipping(roots):
    import subprocess
    import sys

    inside, outside = roots
    real = inside / "real"
    real.mkdir()
    (real / "mine.txt").write_bytes(b"mine")
    (outside / "theirs.txt").write_bytes(b"theirs")
    os.utime(outside / "theirs.txt", (1_000_000, 1_000_000))
    link = inside / "flip"
    os.symlink(real, link)
    flipper = subprocess.Popen([sys.executable, "-c", FLIPPER, str(link), str(real), str(outside)])
    try:
        yield inside, outside, link
    finally:
        flipper.kill()
        flipper.wait()


def _race(call, seconds=0.4):
    """``call()`` over and over for ``seconds`` while the link flips; what it returned, refusals left out."""
    import time

    results, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            results.append(call())
        except (SpecError, OSError):
            pass
    return results


def _outside_untouched(outside):
    assert sorted(os.listdir(outside)) == ["secret.txt", "theirs.txt"]
    assert os.stat(outside / "theirs.txt").st_mtime == 1_000_000
    assert (outside / "theirs.txt").read_bytes() == b"theirs"


RACED = {
    "makedirs": lambda link, n: files.makedirs(link / f"new{n}" / "deeper"),
    "touch": lambda link, n: files.touch(link / "theirs.txt"),
    "stat": lambda link, n: files.stat(link / "theirs.txt").st_size,
    "exists": lambda link, n: files.exists(link / "theirs.txt") or None,
    "isfile": lambda link, n: files.isfile(link / "theirs.txt") or None,
    "listdir": lambda link, n: files.listdir(link),
    "walk": lambda link, n: [names for _, _, names in files.walk(link)],
    "glob": lambda link, n: files.glob(str(link / "*.txt")),
    "glob in": lambda link, n: files.glob("*.txt", link),
    "read": lambda link, n: files.read_file(link / "theirs.txt"),
    "write": lambda link, n: files.write_atomic(link / f"w{n}.txt", b"w"),
    "append": lambda link, n: files.append(link / "log.txt", b"x"),
    "rename": lambda link, n: files.rename(link / "theirs.txt", link / "moved.txt"),
    "remove": lambda link, n: files.remove(link / "theirs.txt"),
    "open folder": lambda link, n: os.close(files.open_folder(link / f"made{n}", make=True)),
}


@pytest.mark.parametrize("operation", list(RACED))
def test_no_operation_of_the_gate_reaches_outside_through_a_swapped_link(flipping, operation):
    inside, outside, link = flipping
    counter = iter(range(10**9))
    results = _race(lambda: RACED[operation](link, next(counter)))
    _outside_untouched(outside)
    for result in results:
        text = repr(result)
        assert "theirs" not in text and result not in (6, True), (operation, result)  # 6: theirs.txt's size


def test_a_link_inside_the_roots_is_followed_and_one_out_refused_by_every_operation(roots):
    inside, outside = roots
    (inside / "sub").mkdir()
    (inside / "sub" / "x.txt").write_bytes(b"x")
    os.symlink(inside / "sub", inside / "alias")  # absolute, and beneath the roots
    os.symlink("sub/x.txt", inside / "relative.txt")
    os.symlink("../outside/secret.txt", inside / "up.txt")
    assert files.read_file(inside / "alias" / "x.txt") == b"x" and files.read_file(inside / "relative.txt") == b"x"
    assert files.listdir(inside / "alias") == ["x.txt"] and files.isdir(inside / "alias")
    assert files.glob(str(inside / "alias" / "*.txt")) == [str(inside / "alias" / "x.txt")]
    files.touch(inside / "alias" / "x.txt")
    files.makedirs(inside / "alias" / "made")
    assert (inside / "sub" / "made").is_dir()
    for call in (files.read_file, files.stat, files.touch, files.exists):
        with pytest.raises(SpecError, match="leads out of the allowed roots"):
            call(inside / "up.txt")
    loop = inside / "loop"
    os.symlink(loop, loop)
    assert not files.exists(loop)
