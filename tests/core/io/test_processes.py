"""Whether a process is alive: this one is, one that ended is not, a zombie not reaped yet is not."""

import os
import subprocess
import sys
import time

from wds_core.io.processes import process_running


def test_running_ended_and_zombie_processes():
    assert process_running(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while process_running(child.pid) and time.monotonic() < deadline:  # a zombie until reaped: not running
        time.sleep(0.01)
    assert not process_running(child.pid)
    child.wait()
    assert not process_running(child.pid)
    assert process_running(1)  # another user's process (init): it exists
