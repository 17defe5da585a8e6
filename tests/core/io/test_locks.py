"""wds_core.io.locks: one writer per output pattern; a second one is refused at once, a dead one blocks nothing."""

import os
import subprocess
import sys

import pytest

from wds_core.errors import SpecError
from wds_core.io.locks import PatternLock


def test_a_second_writer_of_a_pattern_is_refused_naming_the_first(tmp_path):
    pattern = str(tmp_path / "out-%06d.tar")
    first = PatternLock(pattern)
    assert os.path.basename(first.path) == ".out-_06d.tar.lock"
    with pytest.raises(SpecError, match=f"process {os.getpid()}"):
        PatternLock(pattern)
    first.release()
    assert not os.path.exists(first.path)
    PatternLock(pattern).release()  # free again


def test_other_patterns_are_other_locks(tmp_path):
    a, b = PatternLock(str(tmp_path / "a-%04d.tar")), PatternLock(str(tmp_path / "b-%04d.tar"))
    a.release()
    b.release()


def test_a_writer_killed_while_holding_the_lock_blocks_nothing(tmp_path):
    pattern = str(tmp_path / "out-%06d.tar")
    code = f"import os; from wds_core.io.locks import PatternLock; PatternLock({pattern!r}); os._exit(9)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 9
    PatternLock(pattern).release()


def test_a_lock_dropped_without_release_is_let_go(tmp_path):
    pattern = str(tmp_path / "out-%06d.tar")
    lock = PatternLock(pattern)
    del lock
    PatternLock(pattern).release()
