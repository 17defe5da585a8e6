"""wds_core.io.roots: paths reached from a root's descriptor, links followed only while they stay beneath."""

import errno
import os
import shutil
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wds_core.errors import SpecError
from wds_core.io.roots import Roots


@pytest.fixture
def tree(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "d" / "f.txt").write_bytes(b"inside")
    (outside / "s.txt").write_bytes(b"secret")
    return root, outside


def _reached(roots, path, **kw):
    with roots.reach(str(path), "read", **kw) as (fd, name):
        return os.readlink(f"/proc/self/fd/{fd}"), name


def test_a_path_is_its_last_folder_and_name(tree):
    root, _ = tree
    roots = Roots([str(root)])
    assert _reached(roots, root / "d" / "f.txt") == (str(root / "d"), "f.txt")
    assert _reached(roots, root) == (str(root), None)
    assert _reached(roots, root / "d", folder=True) == (str(root / "d"), None)


def test_links_beneath_are_followed_and_links_out_refused(tree):
    root, outside = tree
    os.symlink("d", root / "rel")
    os.symlink(root / "d" / "f.txt", root / "abs.txt")
    os.symlink("../outside", root / "up")
    os.symlink(outside / "s.txt", root / "out.txt")
    roots = Roots([str(root)])
    assert _reached(roots, root / "rel" / "f.txt") == (str(root / "d"), "f.txt")
    assert _reached(roots, root / "abs.txt") == (str(root / "d"), "f.txt")
    assert _reached(roots, root / "abs.txt", follow_last=False) == (str(root), "abs.txt")  # the link itself
    for path in (root / "up" / "s.txt", root / "out.txt"):
        with pytest.raises(SpecError, match="leads out of the allowed roots"):
            _reached(roots, path)
    with pytest.raises(SpecError, match="not under an allowed root"):
        _reached(roots, outside / "s.txt")
    strict = Roots([str(root)], follow_links=False)
    with pytest.raises(SpecError, match="is a symbolic link"):
        _reached(strict, root / "rel" / "f.txt")


def test_folders_are_made_on_the_way_and_loops_end(tree):
    root, _ = tree
    roots = Roots([str(root)])
    assert _reached(roots, root / "a" / "b" / "c", make_folders=True, folder=True) == (
        str(root / "a" / "b" / "c"),
        None,
    )
    os.symlink("loop", root / "loop")
    with pytest.raises(OSError) as looped:
        _reached(roots, root / "loop" / "x")
    assert looped.value.errno == errno.ELOOP
    with pytest.raises(FileNotFoundError):
        _reached(roots, root / "missing" / "x")
    with pytest.raises(NotADirectoryError):
        _reached(roots, root / "d" / "f.txt" / "x")


# ---------------------------------------------------------------- a model: the kernel's walk, with a check at links

NAMES = ["d", "e", "l1", "l2", "l3", "f.txt"]
TARGETS = ["d", "e", "l1", "l2", "f.txt", "d/f.txt", "..", "../outside", "../outside/s.txt", "../root/d", "./d",
           "/ROOT/d", "/ROOT/l2", "/OUTSIDE", "/OUTSIDE/s.txt", "/ROOT", "missing"]  # fmt: skip
LINKS = st.lists(st.tuples(st.sampled_from(["", "d/", "e/"]), st.sampled_from(["l1", "l2", "l3"]),
                           st.sampled_from(TARGETS)), max_size=5)  # fmt: skip
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=5)


def _model(root: str, parts: list[str]):
    """``("ok", the real location)``, ``"refused"`` (a link on the way leads out of the root), or the error a walk
    by name meets: the path walked by names, each link's target taken against the folder it is in."""
    here, todo, links = root, list(parts), 0
    while todo:
        name = todo.pop(0)
        step = os.path.join(here, name)
        if os.path.islink(step):
            links += 1
            if links > 40:
                return "loop"
            target = os.path.normpath(os.path.join(here, os.readlink(step)))
            if not (target == root or target.startswith(root + os.sep)):
                return "refused"
            here, todo = root, [p for p in target[len(root) :].split(os.sep) if p] + todo
            continue
        if todo and not os.path.isdir(step):
            return "missing"
        here = step
    return ("ok", here) if os.path.lexists(here) else "missing"


@given(LINKS, PATHS)
def test_the_walk_agrees_with_a_walk_by_names(links, parts):
    base = tempfile.mkdtemp(prefix="wds-roots-")
    try:
        root, outside = os.path.join(base, "root"), os.path.join(base, "outside")
        os.makedirs(os.path.join(root, "d"))
        os.makedirs(os.path.join(root, "e"))
        os.makedirs(outside)
        for where in (root, os.path.join(root, "d"), outside):
            with open(os.path.join(where, "f.txt"), "w") as out:
                out.write(where)
        with open(os.path.join(outside, "s.txt"), "w") as out:
            out.write("secret")
        for folder, name, target in links:
            path = os.path.join(root, folder, name)
            if not os.path.lexists(path):
                os.symlink(target.replace("/ROOT", root).replace("/OUTSIDE", outside), path)
        expected = _model(root, parts)
        path = os.path.join(root, *parts)
        try:
            with Roots([root]).reach(path, "read") as (fd, name):
                got = os.path.join(os.readlink(f"/proc/self/fd/{fd}"), name or "")  # None: the folder itself
                got = got.rstrip(os.sep)
                got = ("ok", got) if os.path.lexists(got) else "missing"
        except SpecError:
            got = "refused"
        except OSError as exn:
            got = "loop" if exn.errno == errno.ELOOP else "missing"
        assert got == expected, (links, parts)
        if got[0] == "ok":
            assert got[1] == os.path.realpath(path)  # where the kernel's own walk ends, too
    finally:
        shutil.rmtree(base)
