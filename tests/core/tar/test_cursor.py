"""wds_core.tar.cursor: where the next sample starts, kept by the tar layer as samples are handed out."""

import io
import tarfile

from tests.conftest import make_samples, write_shard
from wds_core.tar.cursor import Cursor, name_digest
from wds_core.tar.grouping import group_members
from wds_core.tar.tario import iter_members


def test_the_cursor_names_the_offset_and_member_of_the_next_sample(tmp_path):
    write_shard(tmp_path / "s.tar", make_samples("k", 3), ("txt", "cls"))
    data = (tmp_path / "s.tar").read_bytes()
    headers = {m.name: m.offset for m in tarfile.open(fileobj=io.BytesIO(data))}
    cursor = Cursor()
    seen = []
    for sample in group_members(iter_members(io.BytesIO(data), "s.tar"), "s.tar", cursor=cursor):
        seen.append((sample["__key__"], cursor.offset, cursor.name))
    first, second = (min((n for n in headers if n.startswith(f"k0000{i}")), key=headers.get) for i in (1, 2))
    assert seen[0][1:] == (headers[first], first) and seen[1][1:] == (headers[second], second)
    assert seen[2][1:] == (-1, None)  # the last sample: nothing starts after it


def test_a_name_s_digest_is_short_stable_and_differs_from_others():
    assert name_digest("k00001.cls") == name_digest("k00001.cls") and len(name_digest("x")) == 16
    assert name_digest("k00001.cls") != name_digest("k00001.txt")
    cursor = Cursor()
    cursor.at(1536, "a.txt")
    assert (cursor.offset, cursor.name) == (1536, "a.txt")
    cursor.at(-1)
    assert (cursor.offset, cursor.name) == (-1, None)
