"""Shard destinations: atomic local files, stdout, clear errors."""

import subprocess
import sys

import pytest

from wds_core import ShardOpenError
from wds_core.sinks import create_shard


def test_local_shards_appear_on_commit_and_vanish_on_abort(tmp_path):
    sink = create_shard(str(tmp_path / "sub" / "a.tar"))  # missing folders are created
    sink.write(b"abc")
    assert not (tmp_path / "sub" / "a.tar").exists()
    sink.commit()
    assert (tmp_path / "sub" / "a.tar").read_bytes() == b"abc"
    other = create_shard(str(tmp_path / "b.tar"))
    other.write(b"x")
    other.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


def test_unwritable_destinations_are_reported(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ShardOpenError, match="cannot create shard") as info:
        create_shard(str(blocker / "a.tar"))
    assert str(blocker / "a.tar") in str(info.value)


def test_dash_writes_to_stdout(tmp_path):
    code = "from wds_core import TarWriter\nwith TarWriter('-') as s: s.write({'__key__': 'k', 'txt': 'hi'})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    listing = subprocess.run(["tar", "tf", "-"], input=out, capture_output=True, check=True).stdout
    assert listing == b"k.txt\n"
